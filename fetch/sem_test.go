package fetch

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/cacheagent/cacheagent/object"
)

func mustSem(t *testing.T, limit int) *connSem {
	t.Helper()
	s, err := newConnSem(limit)
	if err != nil {
		t.Fatalf("newConnSem(%d): %v", limit, err)
	}
	return s
}

func isReady(w *semWaiter) bool {
	select {
	case <-w.ready:
		return true
	default:
		return false
	}
}

func TestSemInvalidLimit(t *testing.T) {
	for _, n := range []int{0, -1} {
		if _, err := newConnSem(n); !errors.Is(err, errSemLimit) {
			t.Errorf("newConnSem(%d) error = %v; want errSemLimit", n, err)
		}
	}
	s := mustSem(t, 1)
	if err := s.setLimit(0); !errors.Is(err, errSemLimit) {
		t.Errorf("setLimit(0) error = %v; want errSemLimit", err)
	}
}

func TestSemGrantOrder(t *testing.T) {
	s := mustSem(t, 1)
	if w := s.enqueue(object.NewUrgency(object.Warm), 0); w != nil {
		t.Fatal("first enqueue queued; want the free slot")
	}
	// Queued in this order; served by level, then download order, then seq.
	type q struct {
		name  string
		level object.Priority
		order uint64
	}
	queued := []q{
		{"warm-1", object.Warm, 1},
		{"warm-2", object.Warm, 2},
		{"warm-1b", object.Warm, 1}, // a second slice of download 1, queued later
		{"demand-5", object.Demand, 5},
		{"plan-4", object.Plan, 4},
		{"demand-3", object.Demand, 3},
	}
	want := []string{"demand-3", "demand-5", "plan-4", "warm-1", "warm-1b", "warm-2"}
	ws := map[string]*semWaiter{}
	for _, e := range queued {
		w := s.enqueue(object.NewUrgency(e.level), e.order)
		if w == nil {
			t.Fatalf("enqueue(%s) took a slot; want queued", e.name)
		}
		ws[e.name] = w
	}
	for i, name := range want {
		s.release()
		var got []string
		for n, w := range ws {
			if isReady(w) {
				got = append(got, n)
				delete(ws, n)
			}
		}
		if len(got) != 1 || got[0] != name {
			t.Fatalf("grant %d went to %v; want [%s]", i, got, name)
		}
	}
	s.release()
	if _, used, waiting := s.counts(); used != 0 || waiting != 0 {
		t.Errorf("counts() = %d used, %d waiting; want 0, 0", used, waiting)
	}
}

func TestSemRaiseWhileWaiting(t *testing.T) {
	s := mustSem(t, 1)
	s.enqueue(object.NewUrgency(object.Warm), 0)
	early := s.enqueue(object.NewUrgency(object.Warm), 1)
	u := object.NewUrgency(object.Warm)
	late := s.enqueue(u, 2)
	u.Raise(object.Demand)
	s.release()
	if !isReady(late) || isReady(early) {
		t.Fatalf("after Raise(object.Demand): late granted = %v, early granted = %v; want true, false",
			isReady(late), isReady(early))
	}
}

func TestSemCancelWhileQueued(t *testing.T) {
	s := mustSem(t, 1)
	s.enqueue(object.NewUrgency(object.Warm), 0)
	w := s.enqueue(object.NewUrgency(object.Demand), 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.wait(ctx, w); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait(cancelled) = %v; want context.Canceled", err)
	}
	if _, used, waiting := s.counts(); used != 1 || waiting != 0 {
		t.Errorf("counts() = %d used, %d waiting; want 1, 0", used, waiting)
	}
	s.release()
	if _, used, _ := s.counts(); used != 0 {
		t.Errorf("used after release = %d; want 0", used)
	}
}

// TestSemCancelAfterGrant: a waiter granted and cancelled at once either keeps
// the slot (wait returns nil) or hands it on; the slot never leaks.
func TestSemCancelAfterGrant(t *testing.T) {
	for range 50 {
		s := mustSem(t, 1)
		s.enqueue(object.NewUrgency(object.Warm), 0)
		w := s.enqueue(object.NewUrgency(object.Warm), 1)
		next := s.enqueue(object.NewUrgency(object.Warm), 2)
		s.release() // grants w
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.wait(ctx, w); err == nil {
			s.release() // w held it: give it back
		}
		if !isReady(next) {
			t.Fatal("slot leaked: the next waiter was never granted")
		}
		s.release()
		if _, used, waiting := s.counts(); used != 0 || waiting != 0 {
			t.Fatalf("counts() = %d used, %d waiting; want 0, 0", used, waiting)
		}
	}
}

func TestSemSetLimit(t *testing.T) {
	s := mustSem(t, 1)
	s.enqueue(object.NewUrgency(object.Warm), 0)
	a := s.enqueue(object.NewUrgency(object.Warm), 1)
	b := s.enqueue(object.NewUrgency(object.Warm), 2)
	if err := s.setLimit(3); err != nil {
		t.Fatal(err)
	}
	if !isReady(a) || !isReady(b) {
		t.Fatalf("growing to 3 granted a=%v b=%v; want both", isReady(a), isReady(b))
	}
	if err := s.setLimit(1); err != nil {
		t.Fatal(err)
	}
	c := s.enqueue(object.NewUrgency(object.Demand), 3)
	if c == nil {
		t.Fatal("enqueue after shrinking to 1 with 3 held took a slot")
	}
	s.release()
	s.release()
	if isReady(c) {
		t.Fatal("granted while 1 slot of limit 1 is still held")
	}
	s.release()
	if !isReady(c) {
		t.Fatal("not granted after every old holder released")
	}
}

// TestSemAcquireBlocks runs acquire in goroutines inside a synctest bubble,
// where synctest.Wait proves a goroutine is blocked rather than slow.
func TestSemAcquireBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mustSem(t, 1)
		ctx := context.Background()
		if err := s.acquire(ctx, object.NewUrgency(object.Warm), 0); err != nil {
			t.Fatal(err)
		}
		var order []string
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, e := range []struct {
			name string
			p    object.Priority
		}{{"warm", object.Warm}, {"demand", object.Demand}} {
			wg.Go(func() {
				if err := s.acquire(ctx, object.NewUrgency(e.p), 1); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, e.name)
				mu.Unlock()
				s.release()
			})
			synctest.Wait() // queued before the next one starts
		}
		mu.Lock()
		if len(order) != 0 {
			t.Errorf("acquired %v while the only slot was held", order)
		}
		mu.Unlock()
		s.release()
		wg.Wait()
		if len(order) != 2 || order[0] != "demand" {
			t.Errorf("grant order = %v; want [demand warm]", order)
		}
	})
}

// tryAcquire takes a free slot and never one past the limit.
func TestSemTryAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mustSem(t, 2)
		for range 2 {
			if !s.tryAcquire() {
				t.Fatal("tryAcquire failed with a slot free")
			}
		}
		if s.tryAcquire() {
			t.Fatal("tryAcquire took a slot past the limit")
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := s.acquire(context.Background(), object.NewUrgency(object.Warm), 0); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait() // queued
		if err := s.setLimit(3); err != nil {
			t.Fatal(err)
		}
		wg.Wait() // the waiter got the new slot
		if s.tryAcquire() {
			t.Error("tryAcquire took a slot past the grown limit")
		}
		s.release()
		if !s.tryAcquire() {
			t.Error("tryAcquire failed after a release")
		}
		if _, used, waiting := s.counts(); used != 3 || waiting != 0 {
			t.Errorf("counts = %d used, %d waiting; want 3, 0", used, waiting)
		}
	})
}

// TestSemStress hammers the semaphore with random priorities, raises and
// cancellations, checking the limit is never exceeded and nothing leaks.
func TestSemStress(t *testing.T) {
	const limit, workers, rounds = 3, 16, 200
	s := mustSem(t, limit)
	var inUse, peak atomic.Int64
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range rounds {
				u := object.NewUrgency(object.Priority(r.IntN(3)))
				ctx, cancel := context.WithCancel(context.Background())
				if r.IntN(8) == 0 {
					cancel()
				}
				w := s.enqueue(u, uint64(g*rounds+i))
				if r.IntN(4) == 0 {
					u.Raise(object.Demand)
				}
				var err error
				if w != nil {
					err = s.wait(ctx, w)
				}
				cancel()
				if err != nil {
					continue
				}
				n := inUse.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				inUse.Add(-1)
				s.release()
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Errorf("peak concurrent holders = %d; want ≤ %d", p, limit)
	}
	if _, used, waiting := s.counts(); used != 0 || waiting != 0 {
		t.Errorf("counts() = %d used, %d waiting; want 0, 0", used, waiting)
	}
}
