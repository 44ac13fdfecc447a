package tier

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/object"
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
	// Listing is true while the objects are still being listed
	// (PrefetchSeq): Objects and Bytes count those listed so far.
	Listing bool
}

// Prefetch makes sure every object in objs is cached, downloading what is
// missing (or cached at an older generation) at priority p, with up to
// Config.PrefetchParallelism objects in flight. An object with Generation 0
// is stat'ed first. progress, if not nil, is called once at the start and
// after each object; calls are never concurrent and must return quickly.
//
// Prefetch keeps going past per-object failures and returns them joined;
// it stops early when the cache has no space left (ErrNoSpace), ctx ends
// or the cache is closed (ErrClosed).
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
	run := &prefetchRun{fn: progress}
	run.p.Objects = len(objs)
	for _, a := range objs {
		run.p.Bytes += a.Size
	}
	return c.prefetch(ctx, run, slices.All(objs), len(objs), p, window)
}

// PrefetchSeq is PrefetchWindow over the objects a listing yields, started
// on the first while the listing goes on (the listing of 1.28 M objects
// takes over a minute, a page of 1,000 at a time). Until it ends,
// Progress.Listing is true and Objects and Bytes count the objects listed
// so far. An error from objs ends the listing: the objects listed before
// it are still cached, and the error is returned with theirs.
func (c *Cache) PrefetchSeq(ctx context.Context, objs iter.Seq2[object.Attrs, error], p object.Priority, window int, progress func(Progress)) error {
	run := &prefetchRun{fn: progress}
	run.p.Listing = true
	return c.prefetch(ctx, run, func(yield func(int, object.Attrs) bool) {
		i := 0
		for a, err := range objs {
			if err != nil {
				run.listFailed(err)
				return
			}
			run.listed(a)
			if !yield(i, a) {
				return
			}
			i++
		}
	}, -1, p, window)
}

// listAhead is how many listed objects wait for a prefetch worker: a page
// of a GCS listing, so that the next page is asked for while the workers
// are busy with this one.
const listAhead = 1024

// prefetch caches the objects objs yields (n of them, or -1 if not known)
// with up to window of them in flight, on as many workers (a goroutine per
// worker, not per object: each grows its stack once). One object (a
// FetchObjects of one, as the planner makes for an object it could not
// list) is cached on the caller's goroutine.
func (c *Cache) prefetch(ctx context.Context, run *prefetchRun, objs iter.Seq2[int, object.Attrs], n int, p object.Priority, window int) error {
	if limit := int(c.plans.inflight.Load()); window <= 0 || window > limit {
		window = limit
	}
	end, err := c.begin()
	if err != nil {
		return err
	}
	defer end()
	run.report()
	ctx, closed := c.closable(ctx) // Close stops a listing too, not only its fills
	defer closed()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	ahead := listAhead
	if n >= 0 {
		ahead = min(n, listAhead)
	}
	work := make(chan object.Attrs, ahead)
	worker := func() {
		here, release := fillHere(ctx)
		defer release()
		for a := range work {
			if ctx.Err() != nil { // stopped: the rest are drained, not fetched
				continue
			}
			fetched, cached, err := c.prefetchOne(ctx, here, a, p)
			if errors.Is(err, ErrNoSpace) {
				stop(err)
			}
			run.done(a, fetched, cached, err)
		}
	}
	if n == 1 {
		for _, a := range objs {
			work <- a
		}
		close(work)
		worker()
		return run.result(ctx)
	}
	var workers sync.WaitGroup
	for i, a := range objs {
		if i < window {
			workers.Go(worker)
		}
		select {
		case work <- a:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			if n < 0 || i < n-1 {
				run.cutShort()
			}
			break
		}
	}
	close(work)
	run.listEnded()
	workers.Wait()
	return run.result(ctx)
}

// prefetchOne caches one object, returning the bytes it downloaded and
// whether it was already cached. A small object is filled on this
// goroutine, on here (see shareHere).
func (c *Cache) prefetchOne(ctx, here context.Context, a object.Attrs, p object.Priority) (int64, bool, error) {
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
		if c.packs(a) {
			r, joined, err = c.shareHere(here, a, p)
		} else {
			r, joined, err = c.share(ctx, a, p)
		}
		c.takeFillHold(r.e) // overtaken by a newer generation: not kept
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

	mu      sync.Mutex // protects the fields below, and serialises fn
	p       Progress
	errs    []error
	listErr error
	// cut: the run stopped taking objects before they ran out;
	// cutListing: while they were being listed (PrefetchSeq).
	cut, cutListing bool
}

// cutShort records that the run stopped taking objects before they ran
// out: even if every object taken is done, the run is not complete.
func (r *prefetchRun) cutShort() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut, r.cutListing = true, r.p.Listing
}

// listed counts one more object listed.
func (r *prefetchRun) listed(a object.Attrs) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.p.Objects++
	r.p.Bytes += a.Size
}

// listFailed records the error that ended the listing.
func (r *prefetchRun) listFailed(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listErr = err
}

// listEnded marks the totals final and reports them.
func (r *prefetchRun) listEnded() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p.Listing {
		r.p.Listing = false
		r.report()
	}
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
	if r.listErr != nil {
		errs = append(errs, fmt.Errorf("tier: prefetch: %w", r.listErr))
	}
	if r.p.ObjectsDone < r.p.Objects || r.cut {
		cause := context.Cause(ctx)
		if !errors.Is(cause, ErrNoSpace) { // a no-space error is already among errs
			of := fmt.Sprint(r.p.Objects)
			if r.cutListing {
				of += " listed so far"
			}
			errs = append(errs, fmt.Errorf("tier: prefetch stopped after %d of %s objects: %w",
				r.p.ObjectsDone, of, cause))
		}
	}
	return errors.Join(errs...)
}
