package daemon

import (
	"context"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// warmParallelism is how many objects a prefetch warms at their owners at
// once.
const warmParallelism = 32

// fleetWindowPerMember sizes a fleet node's prefetch window: this many
// objects in flight per member (at most the cache's PrefetchParallelism:
// as many as the fetch lanes allow reads, at least 64; see Config.Tier).
// Owners fill what they are asked for side by side, sharing their GCS
// link, so a wide window makes every object finish late and cross the
// peer links together at the end; a narrow one lets the first objects
// finish and move while the owners fill the next. Cold epoch, 4 nodes,
// 192 x 512 KiB (docs/benchmarks.md): 64 in flight 2.89-3.22x one node,
// 128 2.49-2.65x, 32 3.33-3.39x, 16 3.35x.
const fleetWindowPerMember = 8

// prefetchObjects is a prefetch job's fill. Alone, or with a dataset that
// fits its disk budget, a node caches every object (tier.Cache.Prefetch;
// a fleet node with fleetWindowPerMember objects in flight per member).
// A fleet node asked for more than its budget holds would only evict, as
// it goes, the copies it owns for the fleet: it warms the objects others
// own at their owners instead (peer.Source.Warm: the owner fills its copy,
// nothing is kept here) and caches those it owns, and any whose owner
// failed. Progress counts a warmed object as done, with nothing fetched
// here.
func (d *Daemon) prefetchObjects(ctx context.Context, objs []object.Attrs, p object.Priority, progress func(tier.Progress)) error {
	var total int64
	for _, a := range objs {
		total += a.Size
	}
	if d.peers == nil || d.fleet == nil || d.fleet.Table().Len() < 2 {
		return d.cache.Prefetch(ctx, objs, p, progress)
	}
	if total <= d.stats.get().Base().MaxBytes {
		return d.cache.PrefetchWindow(ctx, objs, p, fleetWindowPerMember*d.fleet.Table().Len(), progress)
	}
	var (
		mu     sync.Mutex
		warmed tier.Progress // the warmed objects' share of the progress
		local  []object.Attrs
	)
	report := func(l tier.Progress) { // under mu
		if progress == nil {
			return
		}
		progress(tier.Progress{Objects: len(objs), Bytes: total,
			ObjectsDone: warmed.ObjectsDone + l.ObjectsDone, BytesDone: warmed.BytesDone + l.BytesDone,
			BytesFetched: l.BytesFetched, Cached: l.Cached, Failed: l.Failed})
	}
	mu.Lock()
	report(tier.Progress{})
	mu.Unlock()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(warmParallelism)
	for _, a := range objs {
		g.Go(func() error {
			here, err := d.peers.src.Warm(gctx, a)
			mu.Lock()
			defer mu.Unlock()
			if here || err != nil {
				if err != nil && gctx.Err() == nil {
					d.log.Debug("prefetch: warming at the owner failed; caching here", "object", a.Object, "err", err)
				}
				local = append(local, a)
				return nil
			}
			warmed.ObjectsDone++
			warmed.BytesDone += a.Size
			report(tier.Progress{})
			return nil
		})
	}
	g.Wait()
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	return d.cache.Prefetch(ctx, local, p, func(l tier.Progress) {
		mu.Lock()
		defer mu.Unlock()
		report(l)
	})
}
