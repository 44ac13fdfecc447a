package mount

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// listRetry is how long a failed listing is not retried while the previous
// listing is served instead.
const listRetry = 5 * time.Second

// bucketView is one bucket under the mount: the prefixes shown and the
// current listing.
type bucketView struct {
	// Immutable after New.
	name     string
	prefixes []string // sorted, none inside another
	flight   singleflight.Group

	// mu protects the fields below.
	mu      sync.Mutex
	cur     *listing  // nil until the first listing succeeds
	expires time.Time // when cur must be listed again (unless the TTL is forever)
	// invalidations counts the calls of invalidate; listedAt is its value
	// when the listing run that last settled cur began. cur must be listed
	// again while they differ.
	invalidations, listedAt uint64
}

// invalidate makes the next use of b list the bucket again, in a listing
// run that begins after this call.
func (b *bucketView) invalidate() {
	b.mu.Lock()
	b.invalidations++
	b.mu.Unlock()
}

// listing returns b's current listing, listing the bucket first if it never
// was, the listing held has expired or it was invalidated. Concurrent
// callers share one listing run, which goes on if ctx is cancelled; a
// caller never shares a run that began before the last invalidation.
func (f *FS) listing(ctx context.Context, b *bucketView) (*listing, error) {
	now := f.now()
	b.mu.Lock()
	l, seq := b.cur, b.invalidations
	fresh := l != nil && b.listedAt == seq && (f.cfg.ttl < 0 || now.Before(b.expires))
	b.mu.Unlock()
	if fresh {
		return l, nil
	}
	// A run is shared by callers that saw the same invalidations: one that
	// began before an invalidation is not joined after it.
	ch := b.flight.DoChan(strconv.FormatUint(seq, 10), func() (any, error) { return f.relist(ctx, b, seq) })
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*listing), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("mount: list gs://%s: %w", b.name, ctx.Err())
	}
}

// relist lists b on a context detached from ctx and installs the result,
// unless a run begun after a later invalidation (seq counts those before
// this run began) installed its own. If listing fails it keeps serving the
// previous listing, if there is one, and tries again after listRetry. The
// listing installed counts as current only if no invalidation followed seq.
func (f *FS) relist(ctx context.Context, b *bucketView, seq uint64) (*listing, error) {
	dctx, done, err := f.detach(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	l, err := f.list(dctx, b)
	now := f.now()
	b.mu.Lock()
	prev := b.cur
	if seq >= b.listedAt {
		switch {
		case err == nil:
			b.cur, b.expires, b.listedAt = l, now.Add(f.cfg.ttl), seq
		case prev != nil:
			b.expires, b.listedAt = now.Add(min(listRetry, max(f.cfg.ttl, 0))), seq
		}
	}
	b.mu.Unlock()
	switch {
	case err == nil:
		f.stats.listings.Add(1)
		return l, nil
	case prev != nil:
		f.stats.listErrors.Add(1)
		f.cfg.log.Warn("mount: listing failed; serving the previous listing", "bucket", b.name, "err", err)
		return prev, nil
	}
	f.stats.listErrors.Add(1)
	f.cfg.log.Warn("mount: listing failed", "bucket", b.name, "err", err)
	return nil, err
}

// list lists every prefix of b and builds the tree.
func (f *FS) list(ctx context.Context, b *bucketView) (*listing, error) {
	bl := newBuilder(func(name, why string) { f.reject(b.name, name, why) })
	for _, p := range b.prefixes {
		for a, err := range f.cfg.src.List(ctx, b.name, p) {
			if err != nil {
				return nil, fmt.Errorf("mount: list gs://%s/%s: %w", b.name, p, err)
			}
			bl.add(a)
		}
	}
	return bl.build(), nil
}
