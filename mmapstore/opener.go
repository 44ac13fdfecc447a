package mmapstore

import (
	"context"

	"github.com/cacheagent/cacheagent/object"
)

// Opener gives access to the current best local copy of an object, as a
// File of type F. The in-process cache's is tier.Cache.Opener (F is
// *tier.Handle); the daemon's client is another (F is *control.Lease).
// Implementations must be safe for concurrent use.
type Opener[F File] interface {
	// Open returns an open File on o's best local copy, fetching it first
	// if needed. The copy must stay readable, and its file must keep its
	// size, until the File is closed.
	Open(ctx context.Context, o object.Object) (F, error)
}

// File is an open local copy of one object generation.
type File interface {
	// Path is the local file holding the object's bytes, valid until
	// Close. The Store opens it read-only to map it.
	Path() string
	// Offset is where the object's bytes start in the file: 0 for a file
	// of its own, a multiple of the page size for an object packed into a
	// file with others.
	Offset() int64
	// Size is the object's size in bytes; the file must hold this many
	// from Offset.
	Size() int64
	// Attrs are the attributes of the generation the copy holds.
	Attrs() object.Attrs
	// Stale reports that the Opener no longer serves this copy (it was
	// replaced, evicted, dropped or promoted to a faster tier). Acquire
	// calls it on every hit, so it must be cheap: no I/O, no allocation.
	Stale() bool
	// Close releases the copy. It is called exactly once.
	Close() error
}

// openFunc is an Opener with its File type erased, as a Store keeps it.
type openFunc func(ctx context.Context, o object.Object) (File, error)

// erase returns o's Open as an openFunc. A failed Open yields a nil File,
// never a typed nil in the interface.
func erase[F File](o Opener[F]) openFunc {
	return func(ctx context.Context, obj object.Object) (File, error) {
		f, err := o.Open(ctx, obj)
		if err != nil {
			return nil, err
		}
		return f, nil
	}
}
