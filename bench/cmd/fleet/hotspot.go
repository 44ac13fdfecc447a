package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/bench/fleettest"
	"github.com/cacheagent/cacheagent/fleet/placement"
)

// hotSpot is phase 7, issue 18's hot-spot goal: one object S (o.hotSize;
// the goal is stated for 1 GiB), cached by its owners, read by all N nodes
// at once (`cacheagent prefetch --wait`, the object being the whole
// dataset). Targets: the read done in ≤ 1.5 × S / r_p, and the busiest
// node serving ≤ 1.5 × the mean of the bytes served by each node.
//
// Node N warms the object. An object over one chunk is owned chunk by
// chunk: the warm-up leaves each chunk on its owner, and node N is then
// SIGKILLed, its cache removed and restarted (it rejoins through node 1,
// the harness's seed), so it holds no whole copy; its own chunks come from
// GCS again during the read. An object of one chunk has one owner, found
// from the GCS proxies: if that is not node N, node N held a copy for
// itself too and is restarted empty the same way, so that only the owner
// holds the object. The GCS link is capped at o.hotGCSMbit during all of
// this (0: uncapped).
func hotSpot(ctx context.Context, o opts) error {
	N := o.nodes
	S := o.hotSize
	cfg := o.cfg(N, 2*S, false)
	cfg.Objects, cfg.Size, cfg.GCSMbit = 1, S, o.hotGCSMbit
	h, err := startAlive(ctx, cfg)
	if err != nil {
		return err
	}
	defer h.Close()
	own := "whole-object ownership"
	if S > placement.DefaultChunkSize {
		own = fmt.Sprintf("%d chunks of %s", placement.Chunks(S, placement.DefaultChunkSize), mib(placement.DefaultChunkSize))
	}
	report("\n## 7. hot spot: one %s object read by all %d nodes at once (%s), r_p = %d Mbit/s",
		mib(S), N, own, o.peerMbit)
	warmer := h.Nodes[N-1]
	t0 := time.Now()
	if err := warmer.Prefetch(ctx); err != nil {
		return fmt.Errorf("warming: %w", err)
	}
	warm := time.Since(t0)
	_, per, err := h.GCSBytes(ctx)
	if err != nil {
		return err
	}
	if S > placement.DefaultChunkSize {
		// Owned chunk by chunk: each chunk's owner filled its chunk copy
		// from GCS while the warmer read it. The warmer's whole copy and
		// its own chunks go with its cache: those chunks are read from
		// GCS again (uncapped with -hot-gcs-mbit 0) during the read.
		report("warmed by %s in %.2fs: chunk copies on their owners (GCS bytes per proxy %v)", warmer.Name,
			warm.Seconds(), mibs(per))
		if err := restartEmpty(ctx, h, warmer); err != nil {
			return err
		}
		report("%s restarted on an empty cache", warmer.Name)
		return hotRead(ctx, o, h)
	}
	owner := -1
	for k, b := range per {
		if b >= S {
			owner = k
		}
	}
	if owner < 0 {
		return fmt.Errorf("warming: no proxy served the whole object: %v", per)
	}
	report("warmed by %s in %.2fs: its owner is %s (GCS bytes per proxy %v)", warmer.Name, warm.Seconds(),
		h.Nodes[owner].Name, mibs(per))
	if owner != N-1 {
		if err := restartEmpty(ctx, h, warmer); err != nil {
			return err
		}
		report("%s restarted on an empty cache: only %s holds the object", warmer.Name, h.Nodes[owner].Name)
	}
	for k, n := range h.Nodes {
		names, err := n.Cached(ctx)
		if err != nil {
			return err
		}
		if (k == owner) != (len(names) == 1) {
			return fmt.Errorf("%s holds %v before the read", n.Name, names)
		}
	}
	return hotRead(ctx, o, h)
}

// restartEmpty SIGKILLs n, removes its cache and starts it again (it
// rejoins through node 1, the harness's seed).
func restartEmpty(ctx context.Context, h *fleettest.Harness, n *fleettest.Node) error {
	if err := n.Kill(); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(n.Dir, "disk")); err != nil {
		return fmt.Errorf("removing %s's cache: %w", n.Name, err)
	}
	if err := n.Start(ctx); err != nil {
		return err
	}
	return h.WaitAlive(ctx, 30*time.Second)
}

// hotRead has every node read the hot object at once and reports the time
// and the bytes served per node.
func hotRead(ctx context.Context, o opts, h *fleettest.Harness) error {
	N, S := o.nodes, o.hotSize
	before, err := snap(ctx, h)
	if err != nil {
		return err
	}
	took := make([]time.Duration, N)
	errs := make([]error, N)
	var wg sync.WaitGroup
	t0 := time.Now()
	for k, n := range h.Nodes {
		wg.Go(func() {
			s := time.Now()
			errs[k] = n.Prefetch(ctx)
			took[k] = time.Since(s)
		})
	}
	wg.Wait()
	T := time.Since(t0)
	after, err := snap(ctx, h)
	if err != nil {
		return err
	}
	d := after.sub(before)
	var times []string
	for k, e := range errs {
		if e != nil {
			return fmt.Errorf("%s: %w", h.Nodes[k].Name, e)
		}
		times = append(times, fmt.Sprintf("%.2fs", took[k].Seconds()))
	}
	unit := float64(S) / (float64(o.peerMbit) * 1e6 / 8)
	var mx int64
	for _, b := range d.served {
		mx = max(mx, b)
	}
	mean := float64(sum(d.served)) / float64(N)
	report("read by all at once: %.2fs = %.2f × S/r_p (S/r_p = %.2fs; target ≤ 1.5); per node %v", T.Seconds(),
		T.Seconds()/unit, unit, times)
	maxMean := 0.0
	if mean > 0 {
		maxMean = float64(mx) / mean
	}
	report("bytes served per node %v: max/mean %.2f (target ≤ 1.5); from peers per node %v; GCS bytes %s",
		mibs(d.served), maxMean, mibs(d.peer), mib(d.gcs))
	bad := 0
	for _, n := range h.Nodes {
		rep, err := n.Verify(ctx)
		if err != nil {
			return err
		}
		bad += rep.Bad()
	}
	report("verify on every node: %d bad copies (target 0)", bad)
	return h.Close()
}
