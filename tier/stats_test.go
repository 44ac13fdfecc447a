package tier

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// recountLocked computes, by walking every entry and zombie, the figures
// of Stats that the stores keep incrementally (what Stats cost O(n) for
// before): the base tier's and the shm tier's (zero without one).
func recountLocked(c *Cache) (base, shm stats.Tier) {
	base.Entries = int64(len(c.entries))
	for _, cs := range c.coldSets() { // frozen: not in use
		base.Entries += int64(cs.len())
		cs.each(func(_ uint64, _, v []byte) bool {
			if r, _ := decodeRecord(v); r.pinned {
				base.PinnedBytes += r.blocks
			}
			return true
		})
	}
	for _, e := range c.entries {
		switch {
		case e.rec.pinned:
			base.PinnedBytes += e.rec.blocks
		case e.inUseLocked():
			base.InUseBytes += e.rec.blocks
		}
		if h := e.hot; h != nil {
			shm.Entries++
			switch {
			case e.rec.hotPin:
				shm.PinnedBytes += h.rec.blocks
			case h.refs > 0:
				shm.InUseBytes += h.rec.blocks
			}
		}
	}
	pending := func(st *store) int64 {
		var n int64
		for _, z := range st.zombies {
			n += z.rec.blocks
		}
		for z := range st.detached {
			n += z.rec.blocks
		}
		return n
	}
	base.PendingBytes = pending(c.base)
	base.InUseBytes += base.PendingBytes
	if c.hot != nil {
		shm.PendingBytes = pending(c.hot)
		shm.InUseBytes += shm.PendingBytes
	}
	return base, shm
}

// checkCounters fails the test unless Stats equals a full recount (and the
// other invariants hold), both taken under one hold of the cache's lock.
func checkCounters(t *testing.T, c *Cache, after string) {
	t.Helper()
	c.mu.Lock()
	got := c.statsLocked()
	wantBase, wantShm := recountLocked(c)
	err := c.checkInvariantsLocked()
	c.mu.Unlock()
	if err != nil {
		t.Fatalf("after %s: invariants: %v", after, err)
	}
	type figures struct {
		entries                int64
		pinned, inUse, pending int64
	}
	of := func(s stats.Tier) figures {
		return figures{s.Entries, s.PinnedBytes, s.InUseBytes, s.PendingBytes}
	}
	gotShm, _ := got.Shm()
	if of(got.Base()) != of(wantBase) || of(gotShm) != of(wantShm) {
		t.Fatalf("after %s: Stats() = %+v, shm %+v; a recount gives %+v, shm %+v", after,
			of(got.Base()), of(gotShm), of(wantBase), of(wantShm))
	}
}

// TestStatsCountersMatchRecount runs a random sequence of operations (opens
// held and released, prefetches, new generations replacing copies in use,
// eviction, budget changes, pins, hot pins, promotion, demotion, damaged
// files and restarts, which reconcile) and checks after each that the
// counters Stats reads equal a recount over every entry.
func TestStatsCountersMatchRecount(t *testing.T) {
	for _, withShm := range []bool{false, true} {
		t.Run(map[bool]string{false: "disk", true: "shm"}[withShm], func(t *testing.T) {
			for seed := range uint64(3) {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runCounterOps(t, withShm, seed) })
			}
		})
	}
}

// counterRun is the state of one TestStatsCountersMatchRecount sequence.
type counterRun struct {
	env  *dirEnv
	cfg  Config
	c    *Cache
	objs []object.Attrs
	held []*Handle
	r    *rand.Rand
	size int64 // filesystem block size
}

func runCounterOps(t *testing.T, withShm bool, seed uint64) {
	env := newDirEnv(t)
	dir := t.TempDir()
	size := blockSize(t, dir)
	cfg := env.config(dir, 10*size)
	if withShm {
		cfg.ShmDir, cfg.ShmMaxBytes = shmDir(t), 6*size
	}
	cfg.PromoteHits = 2 // the promoter runs too, in the background
	run := &counterRun{env: env, cfg: cfg, c: openCache(t, cfg), r: rand.New(rand.NewPCG(seed, 7)), size: size}
	for i := range 16 {
		run.objs = append(run.objs, env.put(t, "bkt", fmt.Sprintf("o/%d/%02d", i%3, i), pattern(i, int(size)*(1+i%2)-i)))
	}
	for step := range 300 {
		what := run.step(t)
		checkCounters(t, run.c, fmt.Sprintf("step %d (%s)", step, what))
	}
	run.closeHeld(t, len(run.held))
	checkCounters(t, run.c, "closing every handle")
	if st, sh := statsOf(run.c); st.InUseBytes != 0 || sh.InUseBytes != 0 || st.PendingBytes != 0 {
		t.Errorf("Stats() = %+v, shm %+v with no handle open; want nothing in use or pending", st, sh)
	}
}

// step does one random operation and says what it did.
func (run *counterRun) step(t *testing.T) string {
	ctx := context.Background()
	c, r := run.c, run.r
	i := r.IntN(len(run.objs))
	a := run.objs[i]
	prefix := fmt.Sprintf("o/%d/", r.IntN(3))
	var err error
	var what string
	switch op := r.IntN(17); {
	case op < 4:
		what = "open " + a.Name
		if len(run.held) >= 6 {
			run.closeHeld(t, 1)
		}
		var h *Handle
		if h, err = c.Open(ctx, a.Object); err == nil {
			run.held = append(run.held, h)
		}
	case op < 6:
		what = "close a handle"
		run.closeHeld(t, 1)
	case op == 6:
		what = "prefetch"
		err = c.Prefetch(ctx, []object.Attrs{a, run.objs[r.IntN(len(run.objs))]}, object.Warm, nil)
	case op == 7:
		what = "new generation of " + a.Name
		run.objs[i] = run.env.put(t, a.Bucket, a.Name, pattern(i+100*r.IntN(50), int(a.Size)))
		err = c.Prefetch(ctx, []object.Attrs{run.objs[i]}, object.Warm, nil)
	case op == 8:
		what = "evict " + prefix
		_, err = c.Evict(ctx, "bkt", prefix)
	case op == 9:
		what = "set the budget"
		err = c.SetMaxBytes(ctx, int64(4+r.IntN(9))*run.size)
	case op == 10:
		what = "pin " + prefix
		_, err = c.Pin(ctx, "bkt", prefix)
	case op == 11:
		what = "unpin " + prefix
		_, err = c.Unpin(ctx, "bkt", prefix)
	case op == 12 && c.hot != nil:
		what = "pin hot " + prefix
		_, err = c.PinHot(ctx, "bkt", prefix)
	case op == 13 && c.hot != nil:
		what = "promote " + prefix + " and open " + a.Name
		if _, err = c.Promote(ctx, "bkt", prefix); err == nil || errors.Is(err, ErrNoSpace) ||
			errors.Is(err, fs.ErrNotExist) {
			var h *Handle
			if h, err = c.Open(ctx, a.Object); err == nil {
				run.held = append(run.held, h)
			}
		}
	case op == 14 && c.hot != nil:
		what = "demote " + prefix
		_, err = c.Demote(ctx, "bkt", prefix)
	case op == 15:
		what = "damage and open " + a.Name
		if e, ok := c.Lookup(a.Bucket, a.Name); ok && e.Attrs.Generation == a.Generation {
			os.Remove(c.base.path(idOf(a.Bucket, a.Name, a.Generation)))
		}
		var h *Handle
		if h, err = c.Open(ctx, a.Object); err == nil {
			err = h.Close()
		}
	case op == 16:
		what = "restart"
		run.closeHeld(t, len(run.held))
		if err = c.Close(); err == nil {
			run.c = openCache(t, run.cfg)
		}
	default:
		what = "stats"
	}
	// Out of space is an outcome, and so is a promotion finding the disk
	// file damaged earlier gone (the copy is dropped, as the watcher would).
	if err != nil && !errors.Is(err, ErrNoSpace) && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s: %v", what, err)
	}
	return what
}

// closeHeld closes n random held handles.
func (run *counterRun) closeHeld(t *testing.T, n int) {
	for range min(n, len(run.held)) {
		k := run.r.IntN(len(run.held))
		if err := run.held[k].Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		run.held = append(run.held[:k], run.held[k+1:]...)
	}
}
