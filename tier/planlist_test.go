package tier

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// listingSource counts a source's Stat and List calls; stale, if set,
// is what List yields instead of listing.
type listingSource struct {
	object.Source
	mu           sync.Mutex
	stats, lists int
	stale        []object.Attrs
}

func (s *listingSource) Stat(ctx context.Context, o object.Object) (object.Attrs, error) {
	s.mu.Lock()
	s.stats++
	s.mu.Unlock()
	return s.Source.Stat(ctx, o)
}

func (s *listingSource) List(ctx context.Context, bucket, prefix string) iter.Seq2[object.Attrs, error] {
	s.mu.Lock()
	s.lists++
	stale := s.stale
	s.mu.Unlock()
	if stale == nil {
		return s.Source.List(ctx, bucket, prefix)
	}
	return func(yield func(object.Attrs, error) bool) {
		for _, a := range stale {
			if !yield(a, nil) {
				return
			}
		}
	}
}

func (s *listingSource) counts() (stats, lists int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats, s.lists
}

// TestPlannerListsDirectories plans two directories of many objects and
// one of a few, shuffled: the planner lists each of the two once and
// fetches their objects without a Stat each; the few are stat'ed.
func TestPlannerListsDirectories(t *testing.T) {
	e := newDirEnv(t)
	var names []string
	for _, d := range []string{"cls-a/", "cls-b/"} {
		for i := range 3 * planListMin {
			names = append(names, fmt.Sprintf("%s%02d", d, i))
		}
	}
	few := []string{"few/0", "few/1"} // fewer than planListMin
	names = append(names, few...)
	objs := e.putObjects(t, names...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(objs), func(i, j int) { objs[i], objs[j] = objs[j], objs[i] })
	src := &listingSource{Source: e.src}
	cfg := e.config(t.TempDir(), int64(3*len(objs))*objSize) // the lookahead holds half the budget
	cfg.Source = src
	c := openCache(t, cfg)
	hooks := planHooks(c)
	fastLink(c) // the whole plan within the lookahead
	if err := c.Plan(context.Background(), "p", objs); err != nil {
		t.Fatal(err)
	}
	hooks.awaitIdle(t)
	for _, n := range names {
		if _, ok := c.Lookup("bkt", n); !ok {
			t.Errorf("%s not cached", n)
		}
	}
	st := c.PlanStats()
	stats, lists := src.counts()
	if lists != 2 || st.Listings != 2 || st.Listed != int64(len(names)-len(few)) || stats != len(few) {
		t.Errorf("%d listings (stats: %d), %d objects fetched by their listing, %d Stat calls; want 2, 2, %d, %d",
			lists, st.Listings, st.Listed, stats, len(names)-len(few), len(few))
	}
	checkInvariants(t, c)
}

// TestPlannerListedGenerationGone: objects replaced after their listing
// are fetched at their live generation, with the live bytes.
func TestPlannerListedGenerationGone(t *testing.T) {
	e := newDirEnv(t)
	var names []string
	for i := range planListMin {
		names = append(names, fmt.Sprintf("d/%d", i))
	}
	var old []object.Attrs
	for i, n := range names {
		old = append(old, e.put(t, "bkt", n, pattern(i+1, objSize)))
	}
	live := make(map[string][]byte)
	for i, n := range names {
		live[n] = pattern(100+i, objSize)
		e.put(t, "bkt", n, live[n])
	}
	src := &listingSource{Source: e.src, stale: old}
	cfg := e.config(t.TempDir(), 0)
	cfg.Source = src
	c := openCache(t, cfg)
	hooks := planHooks(c)
	var objs []object.Object
	for _, n := range names {
		objs = append(objs, obj("bkt", n))
	}
	if err := c.Plan(context.Background(), "p", objs); err != nil {
		t.Fatal(err)
	}
	hooks.awaitIdle(t)
	for _, n := range names {
		ent, ok := c.Lookup("bkt", n)
		if !ok {
			t.Errorf("%s not cached", n)
			continue
		}
		h, err := c.Open(context.Background(), ent.Attrs.Object)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(h.Path())
		h.Close()
		if err != nil || !bytes.Equal(got, live[n]) {
			t.Errorf("%s: cached bytes are not the live generation's (%v)", n, err)
		}
	}
	checkInvariants(t, c)
}

// gatedSource is a source whose listings count themselves and wait for
// open to close before yielding anything.
type gatedSource struct {
	object.Source
	open  chan struct{}
	lists chan string // each listing's prefix, as it starts
}

func (s *gatedSource) List(ctx context.Context, bucket, prefix string) iter.Seq2[object.Attrs, error] {
	return func(yield func(object.Attrs, error) bool) {
		s.lists <- prefix
		select {
		case <-s.open:
		case <-ctx.Done():
			yield(object.Attrs{}, ctx.Err())
			return
		}
		for a, err := range s.Source.List(ctx, bucket, prefix) {
			if !yield(a, err) {
				return
			}
		}
	}
}

// TestPlannerListsAheadOfSizes plans objects of four directories,
// alternating: while no size is known the planner fetches two objects at
// a time, but lists the directories of all it will fetch next at once,
// not one listing's round trip after another.
func TestPlannerListsAheadOfSizes(t *testing.T) {
	e := newDirEnv(t)
	var names []string
	for i := range 4 * planListMin {
		names = append(names, fmt.Sprintf("cls-%d/%02d", i%4, i))
	}
	objs := e.putObjects(t, names...)
	src := &gatedSource{Source: e.src, open: make(chan struct{}), lists: make(chan string, 4)}
	cfg := e.config(t.TempDir(), int64(3*len(objs))*objSize)
	cfg.Source = src
	c := openCache(t, cfg)
	hooks := planHooks(c)
	fastLink(c) // once sizes are known, the whole plan within the lookahead
	if err := c.Plan(context.Background(), "p", objs); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for range 4 { // all four start while none has yielded a size
		select {
		case dir := <-src.lists:
			listed[dir] = true
		case <-time.After(5 * time.Second): // a hang, not a timing: the listings wait for each other
			t.Fatalf("listed %v, and no more while the listings wait; want the four directories at once", listed)
		}
	}
	close(src.open)
	hooks.awaitIdle(t)
	if len(listed) != 4 {
		t.Errorf("listed %v; want the four directories", listed)
	}
	for _, n := range names {
		if _, ok := c.Lookup("bkt", n); !ok {
			t.Errorf("%s not prefetched", n)
		}
	}
}
