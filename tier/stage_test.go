package tier

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

func TestResident(t *testing.T) {
	page := int64(os.Getpagesize())
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 4*page), 0o644); err != nil {
		t.Fatal(err)
	}
	if !resident(path, 0, 4*page) {
		t.Errorf("a file just written is not resident")
	}
	if err := os.Truncate(path, 8*page); err != nil { // a hole: pages never in memory
		t.Fatal(err)
	}
	if resident(path, 0, 8*page) {
		t.Errorf("a file with a hole is resident")
	}
	if resident(filepath.Join(t.TempDir(), "missing"), 0, page) || resident(path, 0, 0) {
		t.Errorf("a missing or empty file is resident")
	}
}

// TestStageObjects: a cached object whose disk copy is in memory is queued
// for the promoter, not copied on the caller's path; one that is not is
// promoted before StageObjects returns.
func TestStageObjects(t *testing.T) {
	e := newDirEnv(t)
	cfg := e.shmConfig(t.TempDir(), shmDir(t), 0, 0)
	cfg.PromoteHits = -1
	c := openCache(t, cfg)
	log, h := newHooks(nil, nil)
	h.resident = func(key string) bool { return key == indexKey("bkt", "a") }
	c.hooks.Store(h)
	o := e.putObjects(t, "a", "b")
	ctx := context.Background()
	if err := c.FetchObjects(ctx, o, object.Demand); err != nil {
		t.Fatal(err)
	}
	promoted, queued, err := c.StageObjects(ctx, o)
	if promoted != 1 || queued != 1 || err != nil {
		t.Fatalf("StageObjects = %d promoted, %d queued, %v; want 1, 1, nil", promoted, queued, err)
	}
	if got := tierOf(c, "bkt", "b"); got != Shm {
		t.Errorf("b (not resident) is in %s after StageObjects; want shm", got)
	}
	if err := log.awaitPromoted(t, "bkt", "a"); err != nil {
		t.Fatalf("background promotion of a: %v", err)
	}
	if got := tierOf(c, "bkt", "a"); got != Shm {
		t.Errorf("a is in %s after its queued promotion; want shm", got)
	}
	if p, q, err := c.StageObjects(ctx, o); p != 0 || q != 0 || err != nil {
		t.Errorf("StageObjects again = %d, %d, %v; want nothing to do", p, q, err)
	}
	checkInvariants(t, c)

	noShm := openCache(t, e.config(t.TempDir(), 0))
	if _, _, err := noShm.StageObjects(ctx, o); !errors.Is(err, ErrNoShm) {
		t.Errorf("StageObjects without shm = %v; want ErrNoShm", err)
	}
}

// TestPromoterYieldsToDownloads: a queued promotion waits while a download
// is in flight and runs once it ends.
func TestPromoterYieldsToDownloads(t *testing.T) {
	e := newDirEnv(t)
	cfg := e.shmConfig(t.TempDir(), shmDir(t), 0, 0)
	cfg.PromoteHits = -1
	c := openCache(t, cfg)
	log, h := newHooks(nil, nil)
	h.resident = func(string) bool { return true }
	c.hooks.Store(h)
	o := e.putObjects(t, "a", "slow")
	ctx := context.Background()
	if err := c.FetchObjects(ctx, o[:1], object.Demand); err != nil {
		t.Fatal(err)
	}
	gate, entered := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	e.dl.before = func(ctx context.Context, a object.Attrs, _ *object.Urgency) error {
		if a.Name == "slow" && once.CompareAndSwap(false, true) {
			close(entered)
			<-gate
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- c.FetchObjects(ctx, o[1:], object.Demand) }()
	<-entered // the download of slow is in flight
	start := time.Now()
	if _, q, err := c.StageObjects(ctx, o[:1]); q != 1 || err != nil {
		t.Fatalf("StageObjects(a) queued %d, %v; want 1", q, err)
	}
	// The promoter holds a back while slow downloads (up to promoteYield).
	// This is an ordering check, not a timing one: whatever the machine's
	// speed, a is not promoted before the download ends unless a whole
	// promoteYield passed first.
	select {
	case n := <-log.notes:
		if n.kind == "promoted" && time.Since(start) < promoteYield/2 {
			t.Fatalf("a was promoted %v after queueing while a download was in flight", time.Since(start))
		}
	case <-time.After(promoteYield / 4):
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := log.awaitPromoted(t, "bkt", "a"); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("promotion of a: %v", err)
	}
	if got := tierOf(c, "bkt", "a"); got != Shm {
		t.Errorf("a is in %s; want shm", got)
	}
}

// TestYield checks the promoter's wait: it ends at once when the cache is
// quiet, not before quiet has passed since the last open, when the last
// download ends, at the bound, and on stop. Timers never fire early, so the
// lower bounds are exact; no upper bound is asserted.
func TestYield(t *testing.T) {
	const quiet = 30 * time.Millisecond
	stop := make(chan struct{})
	d := newDownloads()
	d.yield(time.Hour, quiet, stop) // quiet: returns at once

	d.noteOpen(time.Now().UnixNano())
	start := time.Now()
	d.yield(time.Hour, quiet, stop)
	if el := time.Since(start); el < quiet {
		t.Errorf("yield after an open returned after %v; want at least %v", el, quiet)
	}
	d.noteOpen(0) // an older time does not move the mark back
	if d.lastOpen.Load() == 0 {
		t.Error("noteOpen moved the last open back")
	}

	d.n.Add(1)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		d.yield(time.Hour, quiet, stop)
	}()
	select {
	case <-ended:
		t.Fatal("yield returned while a download was in flight")
	case <-time.After(2 * quiet):
	}
	d.n.Add(-1)
	d.signalIdle()
	<-ended

	d.n.Add(1)
	start = time.Now()
	d.yield(quiet, time.Hour, stop) // bounded
	if el := time.Since(start); el < quiet {
		t.Errorf("bounded yield returned after %v; want at least %v", el, quiet)
	}
	close(stop)
	d.yield(time.Hour, time.Hour, stop) // stopped: returns
}
