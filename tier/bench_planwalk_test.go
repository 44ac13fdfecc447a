package tier

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// BenchmarkPlannerWalk measures one walk of the planner over a plan whose
// first `held` positions are covered (here: being fetched) and whose next
// is missing, as after each fetch that ends while a fast reader's
// lookahead is full of cached objects: resuming at the last walk's
// frontier, and walking from the reader's position (every walk after a
// copy was dropped; every walk before the frontier existed).
//
//	go test ./tier -run '^$' -bench BenchmarkPlannerWalk
func BenchmarkPlannerWalk(b *testing.B) {
	for _, held := range []int{1_000, 10_000} {
		for _, mode := range []string{"frontier", "whole"} {
			b.Run(fmt.Sprintf("held-%d/%s", held, mode), func(b *testing.B) {
				c, r, keys := walkCache(b, held)
				c.mu.Lock()
				defer c.mu.Unlock()
				for b.Loop() {
					if mode == "whole" {
						c.plans.gen++ // as after a drop
					}
					todo := c.planNextLocked(1)
					if len(todo) != 1 || todo[0].Name != keys[held] {
						b.Fatalf("the walk chose %v; want %s", todo, keys[held])
					}
					delete(c.plans.busy, indexKey("bkt", keys[held])) // the same walk again next time
					r.skip = held
				}
			})
		}
	}
}

// walkCache opens a cache with a plan of 2 × held objects of 100 KiB
// (sizes known, a fetch rate whose 2 s cover the plan) whose first held
// are being fetched, and a planner that starts nothing itself.
func walkCache(b *testing.B, held int) (*Cache, *reader, []string) {
	e := newDirEnv(b)
	cfg := e.packConfig(b.TempDir(), 1<<40)
	cfg.PrefetchParallelism = 1
	c := openCache(b, cfg)
	c.plans.inflight.Store(0) // the planner goroutine dispatches nothing
	const size = 100 << 10
	objs := make([]object.Object, 2*held)
	keys := make([]string, len(objs))
	for i := range objs {
		keys[i] = fmt.Sprintf("imgs/%07d", i)
		objs[i] = obj("bkt", keys[i])
	}
	if err := c.Plan(context.Background(), "p", objs); err != nil {
		b.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.plans
	for i, k := range keys {
		p.noteSizeLocked(indexKey("bkt", k), size)
		if i < held {
			p.busy[indexKey("bkt", k)] = true
		}
	}
	p.fetch.Observe(time.Second, float64(len(objs)*size))
	return c, p.readers["p"], keys
}
