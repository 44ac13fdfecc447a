package formats_test

import (
	"context"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/bench/loadertest"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// recordingStager is a Stager that records what the Loader stages, then
// stages it in a real cache.
type recordingStager struct {
	tier.Stager
	mu      sync.Mutex
	fetches [][]string // object names of each Fetch
}

func (s *recordingStager) Fetch(ctx context.Context, objs []object.Object) error {
	s.mu.Lock()
	s.fetches = append(s.fetches, objectNames(objs))
	s.mu.Unlock()
	return s.Stager.Fetch(ctx, objs)
}

// objectNames returns the base names of objs without their extension
// ("tok/part-a.bin" is "a").
func objectNames(objs []object.Object) []string {
	names := make([]string, len(objs))
	for i, o := range objs {
		names[i] = strings.TrimSuffix(strings.TrimPrefix(path.Base(o.Name), "part-"), ".bin")
	}
	return names
}

// TestSpillShardsPlannedAndStaged checks that a token shard whose last
// windows run into the next shards announces and stages those with it,
// right after its own object: part-a's last window (tokens [16, 25))
// reads part-b (tokens [20, 22)) and part-c, part-c's reads part-d. The
// cache then never has a miss: every Acquire, spill shards included, finds
// its object staged.
func TestSpillShardsPlannedAndStaged(t *testing.T) {
	const L = 8
	e := loadertest.New(t)
	d := e.Dir
	ds, want := putTokenFiles(t, e, []int{20, 2, 20, 20}, L)
	entries := map[string][]string{"a": {"a", "b", "c"}, "b": {"b"}, "c": {"c", "d"}, "d": {"d"}}
	for _, mode := range []sampler.Mode{sampler.Sequential, sampler.Global} {
		t.Run(mode.String(), func(t *testing.T) {
			c := cachetest.Cache(t, d.Src, cachetest.NewDownloader(t, d.Src), tier.Config{})
			store := mmapstore.New(c.Opener(), mmapstore.Config{MaxIdleMappings: -1, Revalidate: -1})
			cachetest.CloseAtEnd(t, "Store", store, mmapstore.ErrClosed)
			p, st := &recordingPlanner{}, &recordingStager{Stager: c.Stager()}
			cfg := loader.Config{Dataset: ds, BatchSize: 2, Shuffle: mode, Seed: 7, Lookahead: 1, Epochs: 2,
				Planner: p, Stager: st}
			checkWindows(t, cfg, drainTokensFrom(t, loader.FromStore(store), cfg), want)
			if m := c.Stats().Misses(); m != 0 {
				t.Errorf("%d cache misses; want 0: every object, spill shards too, staged before its Acquire", m)
			}
			st.mu.Lock()
			for _, f := range st.fetches {
				if w := entries[f[0]]; !slices.Equal(f, w) {
					t.Errorf("staged %v; opening %s reads %v", f, f[0], w)
				}
			}
			st.mu.Unlock()
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.plans) == 0 {
				t.Fatal("no plan announced")
			}
			for i, plan := range p.plans {
				starts := checkPlanEntries(t, objectNames(plan), entries)
				for _, pos := range p.advances[i] {
					if !slices.Contains(starts, pos) {
						t.Errorf("plan %d: advance to %d, which starts no shard's entry (%v)", i, pos, starts)
					}
				}
			}
		})
	}
}

// checkPlanEntries splits an announced plan into its shards' entries
// (each shard's object, then its spill shards') and returns where each
// starts.
func checkPlanEntries(t *testing.T, plan []string, entries map[string][]string) []int {
	t.Helper()
	var starts []int
	for i := 0; i < len(plan); {
		w := entries[plan[i]]
		if i+len(w) > len(plan) || !slices.Equal(plan[i:i+len(w)], w) {
			t.Fatalf("plan %v: at %d, want shard %s's entry %v", plan, i, plan[i], w)
		}
		starts = append(starts, i)
		i += len(w)
	}
	return starts
}

// recordingPlanner is a Planner that records the plans a Loader announces
// and its advances through them.
type recordingPlanner struct {
	mu       sync.Mutex
	plans    [][]object.Object
	advances [][]int // per plan
}

func (p *recordingPlanner) Plan(_ context.Context, _ string, objs []object.Object) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.plans = append(p.plans, slices.Clone(objs))
	p.advances = append(p.advances, nil)
	return nil
}

func (p *recordingPlanner) AdvancePlan(_ context.Context, _ string, pos int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.plans) > 0 {
		p.advances[len(p.advances)-1] = append(p.advances[len(p.advances)-1], pos)
	}
	return nil
}

func (p *recordingPlanner) DropPlan(context.Context, string) error { return nil }
