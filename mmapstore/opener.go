package mmapstore

import (
	"context"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/tier"
)

// Opener gives access to the current best local copy of an object. The
// in-process implementation is FromCache; a client of the daemon's socket
// is another. Implementations must be safe for concurrent use.
type Opener interface {
	// Open returns an open File on o's best local copy, fetching it first
	// if needed. The copy must stay readable, and its file must keep its
	// size, until the File is closed.
	Open(ctx context.Context, o fetch.Object) (File, error)
}

// File is an open local copy of one object generation.
type File interface {
	// Path is the local file holding the object's bytes, valid until
	// Close. The Store opens it read-only to map it.
	Path() string
	// Size is the object's size in bytes; the file must have exactly
	// this size.
	Size() int64
	// Attrs are the attributes of the generation the copy holds.
	Attrs() fetch.Attrs
	// Stale reports that the Opener no longer serves this copy (it was
	// replaced, evicted, dropped or promoted to a faster tier). Acquire
	// calls it on every hit, so it must be cheap: no I/O, no allocation.
	Stale() bool
	// Close releases the copy. It is called exactly once.
	Close() error
}

var _ File = (*tier.Handle)(nil)

// FromCache returns an Opener over c: each Open is c.Open(ctx, o, opts...),
// and each File a *tier.Handle, which keeps its entry from being evicted
// until closed.
func FromCache(c *tier.Cache, opts ...tier.OpenOption) Opener {
	return cacheOpener{c: c, opts: opts}
}

// cacheOpener adapts tier.Cache.Open to Opener.
type cacheOpener struct {
	c    *tier.Cache
	opts []tier.OpenOption
}

// Open implements Opener.
func (co cacheOpener) Open(ctx context.Context, o fetch.Object) (File, error) {
	h, err := co.c.Open(ctx, o, co.opts...)
	if err != nil {
		return nil, err // never a typed nil in the interface
	}
	return h, nil
}
