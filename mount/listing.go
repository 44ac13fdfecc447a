package mount

import (
	"context"
	"fmt"
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
	invalid bool      // cur must be listed again at the next use
}

// invalidate makes the next use of b list the bucket again.
func (b *bucketView) invalidate() {
	b.mu.Lock()
	b.invalid = true
	b.mu.Unlock()
}

// listing returns b's current listing, listing the bucket first if it never
// was or the listing held has expired. Concurrent callers share one listing
// run, which goes on if ctx is cancelled.
func (f *FS) listing(ctx context.Context, b *bucketView) (*listing, error) {
	now := f.now()
	b.mu.Lock()
	l := b.cur
	fresh := l != nil && !b.invalid && (f.cfg.ttl < 0 || now.Before(b.expires))
	b.mu.Unlock()
	if fresh {
		return l, nil
	}
	ch := b.flight.DoChan("", func() (any, error) { return f.relist(ctx, b) })
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

// relist lists b on a context detached from ctx and installs the result. If
// listing fails it keeps serving the previous listing, if there is one, and
// tries again after listRetry.
func (f *FS) relist(ctx context.Context, b *bucketView) (*listing, error) {
	dctx, done, err := f.detach(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	l, err := f.list(dctx, b)
	now := f.now()
	b.mu.Lock()
	prev := b.cur
	switch {
	case err == nil:
		b.cur, b.expires, b.invalid = l, now.Add(f.cfg.ttl), false
	case prev != nil:
		b.expires, b.invalid = now.Add(min(listRetry, max(f.cfg.ttl, 0))), false
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
