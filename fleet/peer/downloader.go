package peer

import (
	"context"
	"fmt"
	"io"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// Fetcher downloads one object into dst: a *fetch.Downloader.
type Fetcher interface {
	Fetch(ctx context.Context, a object.Attrs, dst io.WriterAt, u *object.Urgency) error
}

// Downloader is the tier.Downloader of a fleet node. It sends each fill to
// one of two fetch.Downloaders with connection budgets of their own:
// Owner fills, which read the origin (fills for peers, marked
// WithNoForward, and fills of objects this node owns), and Local fills,
// which read from peers. It is safe for concurrent use.
//
// One budget for both would deadlock a fleet under load: node A's
// connections all held by reads waiting on B's fills, B's all held by
// reads waiting on A's fills, and neither fill getting a connection.
// With two budgets, connections that wait on a peer are never the ones an
// owner's fill needs, and an owner's fill waits only on the origin.
//
// While a Local fill runs, the Source reports its object as Forwarding
// (from before it waits for a connection), so this node's Server answers
// a peer's request for it with 409 instead of joining a fill that may be
// waiting on that peer.
type Downloader struct {
	src          *Source
	local, owner Fetcher
}

var (
	_ tier.Downloader = (*Downloader)(nil)
	_ Fetcher         = (*fetch.Downloader)(nil)
)

// NewDownloader returns a Downloader that fills through local and owner,
// both reading from src.
func NewDownloader(src *Source, local, owner Fetcher) (*Downloader, error) {
	if src == nil || local == nil || owner == nil {
		return nil, fmt.Errorf("%w: nil Source or Fetcher", ErrConfig)
	}
	return &Downloader{src: src, local: local, owner: owner}, nil
}

// Fetch fills dst with a through the owner or the local budget.
func (d *Downloader) Fetch(ctx context.Context, a object.Attrs, dst io.WriterAt, u *object.Urgency) error {
	if NoForward(ctx) || d.src.ownedHere(a) {
		return d.owner.Fetch(WithNoForward(ctx), a, dst, u)
	}
	done := d.src.forward(a.Object)
	defer done()
	return d.local.Fetch(withSize(ctx, a.Size), a, dst, u)
}
