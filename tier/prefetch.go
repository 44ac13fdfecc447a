package tier

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"golang.org/x/sync/errgroup"
)

// Progress reports a Prefetch's advance. Byte counts are object sizes.
type Progress struct {
	// Objects and Bytes are the totals asked for.
	Objects int
	Bytes   int64
	// ObjectsDone and BytesDone count objects finished: cached, fetched or failed.
	ObjectsDone int
	BytesDone   int64
	// BytesFetched counts bytes downloaded for this call.
	BytesFetched int64
	// Cached counts objects that were already present.
	Cached int
	// Failed counts objects that could not be cached.
	Failed int
}

// Prefetch makes sure every object in objs is cached, downloading what is
// missing (or cached at an older generation) at priority p, with up to
// Config.PrefetchParallelism objects in flight. An object with Generation 0
// is stat'ed first. progress, if not nil, is called once at the start and
// after each object; calls are never concurrent and must return quickly.
//
// Prefetch keeps going past per-object failures and returns them joined;
// it stops early when the cache has no space left (ErrNoSpace) or ctx ends.
func (c *Cache) Prefetch(ctx context.Context, objs []object.Attrs, p object.Priority, progress func(Progress)) error {
	return c.PrefetchWindow(ctx, objs, p, 0, progress)
}

// PrefetchWindow is Prefetch with up to window objects in flight (0 or
// more than Config.PrefetchParallelism: that many). A fleet node reading
// from owners uses a smaller window than a node reading GCS: its objects
// come from owners that fill them first, and the fewer it asks for at
// once, the sooner the first ones are done and cross the peer links while
// the owners fill the next (see daemon.prefetchObjects).
func (c *Cache) PrefetchWindow(ctx context.Context, objs []object.Attrs, p object.Priority, window int, progress func(Progress)) error {
	if limit := int(c.plans.inflight.Load()); window <= 0 || window > limit {
		window = limit
	}
	end, err := c.begin()
	if err != nil {
		return err
	}
	defer end()
	run := &prefetchRun{fn: progress}
	run.p.Objects = len(objs)
	for _, a := range objs {
		run.p.Bytes += a.Size
	}
	run.report()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var g errgroup.Group
	g.SetLimit(window)
	for _, a := range objs {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			if ctx.Err() != nil { // stopped while this one waited for a slot
				return nil
			}
			fetched, cached, err := c.prefetchOne(ctx, a, p)
			if errors.Is(err, ErrNoSpace) {
				stop(err)
			}
			run.done(a, fetched, cached, err)
			return nil
		})
	}
	g.Wait()
	return run.result(ctx)
}

// prefetchOne caches one object, returning the bytes it downloaded and
// whether it was already cached.
func (c *Cache) prefetchOne(ctx context.Context, a object.Attrs, p object.Priority) (int64, bool, error) {
	if err := checkObject(a.Object); err != nil {
		return 0, false, fmt.Errorf("tier: prefetch: %w", err)
	}
	o := a.Object
	var err error
	for attempt := range maxAttempts {
		if a.Generation == 0 || attempt > 0 {
			if a, err = c.cfg.src.Stat(ctx, o); err != nil {
				return 0, false, fmt.Errorf("tier: prefetch %s: %w", o, err)
			}
		}
		if c.touchIfCached(a) {
			return 0, true, nil
		}
		var r fillResult
		var joined bool
		r, joined, err = c.share(ctx, a, p)
		if !errors.Is(err, object.ErrGenerationChanged) {
			if joined { // another caller's download: not ours to count
				return 0, false, err
			}
			return r.fetched, err == nil && r.fetched == 0, err
		}
		o.Generation = 0 // the listed generation is gone: take the live one
	}
	return 0, false, fmt.Errorf("tier: prefetch %s: gave up after %d attempts: %w", o, maxAttempts, err)
}

// touchIfCached reports whether a's generation (or a newer one) is cached,
// and if so records a use of it.
func (c *Cache) touchIfCached(a object.Attrs) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entryLocked(indexKey(a.Bucket, a.Name))
	if e == nil || e.rec.gen < a.Generation {
		return false
	}
	c.touchLocked(e, time.Now().UnixNano())
	c.trimWarmLocked() // e is dirty now: it stays warm
	return true
}

// prefetchRun tracks one Prefetch call's progress and failures.
type prefetchRun struct {
	fn func(Progress)

	mu   sync.Mutex // protects p and errs, and serialises fn
	p    Progress
	errs []error
}

// report calls fn with the current progress.
func (r *prefetchRun) report() {
	if r.fn != nil {
		r.fn(r.p)
	}
}

// done records one finished object and reports.
func (r *prefetchRun) done(a object.Attrs, fetched int64, cached bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.p.ObjectsDone++
	r.p.BytesDone += a.Size
	r.p.BytesFetched += fetched
	switch {
	case err != nil:
		r.p.Failed++
		r.errs = append(r.errs, err)
	case cached:
		r.p.Cached++
	}
	r.report()
}

// result joins the per-object errors and, if the run stopped early, why.
func (r *prefetchRun) result(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := r.errs
	if r.p.ObjectsDone < r.p.Objects {
		cause := context.Cause(ctx)
		if !errors.Is(cause, ErrNoSpace) { // a no-space error is already among errs
			errs = append(errs, fmt.Errorf("tier: prefetch stopped after %d of %d objects: %w",
				r.p.ObjectsDone, r.p.Objects, cause))
		}
	}
	return errors.Join(errs...)
}
