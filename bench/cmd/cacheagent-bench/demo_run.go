package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/internal/wait"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
	"github.com/cacheagent/cacheagent/tier"
)

const (
	// demoSeed seeds the demo loader's shuffles.
	demoSeed = 1
	// demoAhead is how many shards per connection the demo's prefetch
	// downloads at a time: enough that the next downloads are queued for
	// a connection while earlier shards are being fsynced.
	demoAhead = 4
)

// demoRun reads the demo's dataset with both readers and keeps their
// epochs' figures.
type demoRun struct {
	cfg   *demoConfig
	emu   *emulator.Server
	ds    loader.Dataset
	bytes int64 // the dataset's size
	out   io.Writer
	// warmTier names where warm epochs are served from: "shm" or "disk".
	warmTier string

	direct, cached []demoEpoch
}

// demoEpoch is one epoch of one reader: a row of the table.
type demoEpoch struct {
	reader  string
	epoch   int // from 1
	elapsed time.Duration
	samples int64
	// wait is the time the consumer was blocked in Next; waitFetch the
	// part of it spent on a shard being downloaded.
	wait, waitFetch time.Duration
	// gcsBytes is what the emulator sent during the epoch.
	gcsBytes int64
	// opens counts shard openings; hits those that found every object
	// of the shard cached already.
	opens, hits int64
}

// loaderConfig is the loader configuration both readers use.
func (r *demoRun) loaderConfig() loader.Config {
	return loader.Config{Dataset: r.ds, BatchSize: r.cfg.batch, Seed: demoSeed, Epochs: r.cfg.epochs}
}

// runDirect reads the dataset with no cache: every shard comes whole from
// GCS on every open (loader.Direct), as many shards at a time as the agent
// has connections, so both readers get the same share of the link.
func (r *demoRun) runDirect(ctx context.Context, src object.Source) error {
	cfg := r.loaderConfig()
	cfg.Lookahead = r.cfg.connections
	rows, err := r.epochs(ctx, loader.Direct(src), cfg, nil, func(int) string { return "direct GCS" })
	r.direct = rows
	return err
}

// runAgent reads the dataset through the agent's cache: the loader
// announces its plans to the cache and stages each shard (fetch, promote
// to shm) before opening it, while a prefetch alongside it fetches the
// first epoch's shards in the loader's order at plan priority and promotes
// each to shm as it lands.
func (r *demoRun) runAgent(ctx context.Context, a *cli.Agent) error {
	store := mmapstore.New(a.Cache.Opener(), mmapstore.Config{})
	defer store.Close()
	st := &hitStager{Stager: a.Cache.Stager(), cache: a.Cache}
	cfg := r.loaderConfig()
	cfg.Planner, cfg.Stager = a.Cache, st
	order, err := epochShards(r.ds, cfg, 0)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var perr error
	wg.Go(func() { perr = prefetchShards(pctx, a.Cache, order, demoAhead*r.cfg.connections) })
	r.cached, err = r.epochs(ctx, loader.FromStore(store), cfg, st, func(e int) string {
		if e == 1 {
			return "agent, cold"
		}
		return "agent, " + r.warmTier
	})
	if err != nil {
		cancel() // the prefetch's failure, if any, follows from ours
		wg.Wait()
		return err
	}
	wg.Wait()
	return perr
}

// epochShards returns the objects of each shard of ds, in the order in
// which a Loader with cfg opens the shards in epoch epoch.
func epochShards(ds loader.Dataset, cfg loader.Config, epoch int) ([][]object.Object, error) {
	rows, _ := ds.Rows()
	e, err := sampler.NewEpoch(rows, sampler.Config{Mode: cfg.Shuffle, Seed: cfg.Seed, Window: cfg.Window,
		Rank: cfg.Rank, World: cfg.World, Tail: cfg.Tail, Nodes: cfg.Nodes, Node: cfg.Node}, epoch)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	var shards [][]object.Object
	for _, g := range e.Order() {
		shards = append(shards, ds.Groups[g].Objects)
	}
	return shards, nil
}

// prefetchShards fetches shards into c at plan priority, in order, with
// up to ahead shards downloading at a time (the connection budget goes to
// the downloads in the order they started), and promotes each one to the
// shm tier once it is cached. Promotion failures are left to the loader's
// Stager, which promotes again and counts them.
func prefetchShards(ctx context.Context, c *tier.Cache, shards [][]object.Object, ahead int) error {
	g, ctx := errgroup.WithContext(ctx)
	slots := make(chan struct{}, max(ahead, 1))
	for _, objs := range shards {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			if err := g.Wait(); err != nil {
				return err
			}
			return fmt.Errorf("demo: prefetch: %w", context.Cause(ctx))
		}
		g.Go(func() error {
			err := c.FetchObjects(ctx, objs, object.Plan)
			<-slots
			if err != nil {
				return fmt.Errorf("demo: prefetch: %w", err)
			}
			c.PromoteObjects(ctx, objs)
			return nil
		})
	}
	return g.Wait()
}

// demoMark is the state at an epoch boundary.
type demoMark struct {
	t           time.Time
	ls          stats.Loader
	gcs         int64
	opens, hits int64
}

// epochs runs a Loader over src with cfg to the end, printing and
// returning a row per epoch; reader names the reader of an epoch (from 1).
// hits, if set, is the Stager counting cache hits.
func (r *demoRun) epochs(ctx context.Context, src loader.Source, cfg loader.Config, hits *hitStager,
	reader func(epoch int) string) (rows []demoEpoch, err error) {
	var l *loader.Loader
	snap := func() demoMark {
		m := demoMark{t: time.Now(), gcs: r.emu.BytesServed()}
		if l != nil {
			m.ls = l.Stats()
			m.opens = m.ls.ShardsOpened
		}
		if hits != nil {
			m.opens, m.hits = hits.load()
		}
		return m
	}
	prev := snap()
	if l, err = loader.New(src, cfg); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	per := l.BatchesPerEpoch()
	for {
		b, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return rows, fmt.Errorf("demo: %w", err)
		}
		epoch, last := b.Epoch+1, b.Index == per-1
		if err := r.train(ctx); err != nil {
			b.Release()
			return rows, err
		}
		b.Release()
		if !last {
			continue
		}
		m := snap()
		row := demoEpoch{reader: reader(epoch), epoch: epoch, elapsed: m.t.Sub(prev.t),
			samples: m.ls.Samples - prev.ls.Samples, wait: m.ls.Wait - prev.ls.Wait,
			waitFetch: m.ls.WaitFetch - prev.ls.WaitFetch, gcsBytes: m.gcs - prev.gcs,
			opens: m.opens - prev.opens, hits: m.hits - prev.hits}
		rows = append(rows, row)
		r.printRow(row)
		prev = m
	}
}

// train is the consumer's work on a batch: --step, or nothing.
func (r *demoRun) train(ctx context.Context) error {
	if r.cfg.step <= 0 {
		return nil
	}
	return wait.Sleep(ctx, r.cfg.step)
}

// hitStager is the loader's Stager over the demo's cache; it counts the
// shard openings that found every object of the shard cached already.
type hitStager struct {
	loader.Stager
	cache *tier.Cache
	// counts holds the openings in its high 32 bits and the hits in its
	// low 32 bits, so that one load reads a consistent pair.
	counts atomic.Uint64
}

// Fetch implements loader.Stager.
func (h *hitStager) Fetch(ctx context.Context, objs []object.Object) error {
	d := uint64(1) << 32
	if h.cached(objs) {
		d++
	}
	h.counts.Add(d)
	return h.Stager.Fetch(ctx, objs)
}

// load returns the openings and hits so far.
func (h *hitStager) load() (opens, hits int64) {
	c := h.counts.Load()
	return int64(c >> 32), int64(c & (1<<32 - 1))
}

// cached reports whether every one of objs is in the cache.
func (h *hitStager) cached(objs []object.Object) bool {
	for _, o := range objs {
		e, ok := h.cache.Lookup(o.Bucket, o.Name)
		if !ok || (o.Generation != 0 && e.Attrs.Generation != o.Generation) {
			return false
		}
	}
	return true
}
