package tier

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

func TestPrefetchKeepsGoingPastFailures(t *testing.T) {
	env := newDirEnv(t)
	c := openCache(t, env.config(t.TempDir(), 1<<20))
	a := env.put(t, "bkt", "a", pattern(1, 1000))
	b := env.put(t, "bkt", "b", pattern(2, 2000))
	missing := object.Attrs{Object: object.Object{Bucket: "bkt", Name: "missing", Generation: 5}, Size: 10}
	live := object.Attrs{Object: obj("bkt", "b")} // generation 0: stat'ed first
	bad := object.Attrs{Object: obj("bkt", "")}
	var last Progress
	err := c.Prefetch(context.Background(), []object.Attrs{a, missing, bad, b, live}, object.Plan, func(p Progress) { last = p })
	if !errors.Is(err, object.ErrNotFound) || !errors.Is(err, object.ErrInvalidName) {
		t.Errorf("Prefetch = %v; want the joined ErrNotFound and ErrInvalidName", err)
	}
	if last.ObjectsDone != 5 || last.Failed != 2 || last.BytesFetched != 3000 {
		t.Errorf("progress = %+v; want 5 done, 2 failed, 3000 bytes fetched", last)
	}
	if got := cached(c); len(got) != 2 {
		t.Errorf("cached = %q; want a and b", got)
	}
	if err := c.Prefetch(context.Background(), nil, object.Plan, nil); err != nil {
		t.Errorf("Prefetch(nil) = %v", err)
	}
}

func TestPrefetchStopsWhenFull(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	size := blockSize(t, dir)
	cfg := env.config(dir, 2*size)
	cfg.PrefetchParallelism = 1
	c := openCache(t, cfg)
	ctx := context.Background()
	var objs []object.Attrs
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		objs = append(objs, env.put(t, "bkt", name, pattern(i, int(size))))
	}
	openRead(t, c, obj("bkt", "a"), pattern(0, int(size)))
	if _, err := c.Pin(ctx, "bkt", "a"); err != nil {
		t.Fatal(err)
	}
	h, err := c.Open(ctx, obj("bkt", "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var last Progress
	err = c.Prefetch(ctx, objs, object.Warm, func(p Progress) { last = p })
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Prefetch into a cache full of pinned and open entries = %v; want ErrNoSpace", err)
	}
	if last.ObjectsDone != 3 || last.Cached != 2 || last.Failed != 1 {
		t.Errorf("progress = %+v; want a stop after a, b (cached) and c (no space)", last)
	}
}

func TestPrefetchContextCancelled(t *testing.T) {
	env := newDirEnv(t)
	c := openCache(t, env.config(t.TempDir(), 1<<20))
	a := env.put(t, "bkt", "a", pattern(1, 1000))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Prefetch(ctx, []object.Attrs{a}, object.Warm, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Prefetch(cancelled) = %v; want context.Canceled", err)
	}
}

func TestDemandRaisesPrefetchUrgency(t *testing.T) {
	env := newDirEnv(t)
	c := openCache(t, env.config(t.TempDir(), 1<<20))
	a := env.put(t, "bkt", "obj", pattern(1, 1000))
	g := installGate(c, env.dl)
	urgency := make(chan *object.Urgency, 1)
	gated := env.dl.before
	env.dl.before = func(ctx context.Context, a object.Attrs, u *object.Urgency) error {
		urgency <- u
		return gated(ctx, a, u)
	}
	var wg sync.WaitGroup
	var perr error
	wg.Go(func() { perr = c.Prefetch(context.Background(), []object.Attrs{a}, object.Warm, nil) })
	u := <-urgency
	if got := u.Level(); got != object.Warm {
		t.Errorf("prefetch urgency = %v; want warm", got)
	}
	wg.Go(func() {
		h, err := c.Open(context.Background(), obj("bkt", "obj"))
		if err != nil {
			t.Errorf("Open: %v", err)
			return
		}
		h.Close()
	})
	g.await(t, 2)
	if got := u.Level(); got != object.Demand {
		t.Errorf("urgency after a demand joined = %v; want demand", got)
	}
	close(g.release)
	wg.Wait()
	if perr != nil {
		t.Errorf("Prefetch: %v", perr)
	}
	if n := env.dl.calls.Load(); n != 1 {
		t.Errorf("downloads = %d; want 1", n)
	}
}

// TestPrefetchWindow: PrefetchWindow keeps at most window downloads in
// flight.
func TestPrefetchWindow(t *testing.T) {
	env := newDirEnv(t)
	c := openCache(t, env.config(t.TempDir(), 1<<20))
	var objs []object.Attrs
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		objs = append(objs, env.put(t, "bkt", name, pattern(i, 1000)))
	}
	g := installGate(c, env.dl)
	var cur, most atomic.Int32
	gated := env.dl.before
	env.dl.before = func(ctx context.Context, a object.Attrs, u *object.Urgency) error {
		n := cur.Add(1)
		defer cur.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		return gated(ctx, a, u)
	}
	var wg sync.WaitGroup
	var perr error
	wg.Go(func() { perr = c.PrefetchWindow(context.Background(), objs, object.Warm, 2, nil) })
	<-g.arrived
	<-g.arrived // two in flight, held at the gate
	close(g.release)
	wg.Wait()
	if perr != nil {
		t.Fatalf("PrefetchWindow = %v", perr)
	}
	if got := most.Load(); got != 2 {
		t.Errorf("at most %d downloads in flight; want 2", got)
	}
	for _, a := range objs {
		if _, ok := c.Lookup(a.Bucket, a.Name); !ok {
			t.Errorf("%s not cached", a.Name)
		}
	}
}

// TestSetPrefetchParallelism: a Prefetch started after the change keeps
// at most the new count of downloads in flight.
func TestSetPrefetchParallelism(t *testing.T) {
	env := newDirEnv(t)
	c := openCache(t, env.config(t.TempDir(), 1<<20))
	if got := c.PrefetchParallelism(); got != DefaultPrefetchParallelism {
		t.Fatalf("PrefetchParallelism = %d; want the default %d", got, DefaultPrefetchParallelism)
	}
	c.SetPrefetchParallelism(0)
	if got := c.PrefetchParallelism(); got != 1 {
		t.Fatalf("PrefetchParallelism after setting 0 = %d; want 1 (the least)", got)
	}
	var objs []object.Attrs
	for i, name := range []string{"a", "b", "c", "d"} {
		objs = append(objs, env.put(t, "bkt", name, pattern(i, 1000)))
	}
	var cur, most atomic.Int32
	env.dl.before = func(ctx context.Context, a object.Attrs, u *object.Urgency) error {
		n := cur.Add(1)
		defer cur.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond) // long enough for a second download to overlap, were it started
		return nil
	}
	if err := c.Prefetch(context.Background(), objs, object.Warm, nil); err != nil {
		t.Fatalf("Prefetch = %v", err)
	}
	if got := most.Load(); got != 1 {
		t.Errorf("at most %d downloads in flight; want 1", got)
	}
}

// TestPrefetchSeq prefetches objects as a listing yields them: the first is
// cached before the listing goes on, the totals grow while Listing is true,
// and an error that ends the listing is returned after the objects listed
// before it are cached.
func TestPrefetchSeq(t *testing.T) {
	env := newDirEnv(t)
	c := openCache(t, env.config(t.TempDir(), 1<<20))
	a := env.put(t, "bkt", "a", pattern(1, 1000))
	b := env.put(t, "bkt", "b", pattern(2, 2000))
	errList := errors.New("listing broke")
	firstDone := make(chan struct{}, 1)
	var seen []Progress
	progress := func(p Progress) {
		seen = append(seen, p)
		if p.ObjectsDone == 1 {
			select {
			case firstDone <- struct{}{}:
			default:
			}
		}
	}
	listing := func(yield func(object.Attrs, error) bool) {
		if !yield(a, nil) {
			return
		}
		select { // the listing goes on only once a is cached
		case <-firstDone:
		case <-time.After(10 * time.Second):
			t.Error("a was not prefetched while the listing went on")
		}
		if !yield(b, nil) {
			return
		}
		yield(object.Attrs{}, errList)
	}
	err := c.PrefetchSeq(context.Background(), listing, object.Warm, 0, progress)
	if !errors.Is(err, errList) {
		t.Errorf("PrefetchSeq = %v; want the listing's error", err)
	}
	if got := cached(c); len(got) != 2 {
		t.Errorf("cached = %q; want a and b", got)
	}
	if len(seen) == 0 || !seen[0].Listing || seen[0].Objects != 0 {
		t.Fatalf("first progress = %+v; want listing, no objects yet", seen)
	}
	grew := false
	for _, p := range seen {
		grew = grew || (p.Listing && p.Objects == 1 && p.ObjectsDone == 1)
	}
	last := seen[len(seen)-1]
	if !grew || last.Listing || last.Objects != 2 || last.Bytes != 3000 || last.ObjectsDone != 2 || last.BytesFetched != 3000 {
		t.Errorf("progress = %+v; want a done while listing, then 2 objects, 3000 bytes, listing over", seen)
	}
}

// TestPrefetchSeqStopsListing stops asking the listing for more once the
// prefetch has stopped (its context ended).
func TestPrefetchSeqStopsListing(t *testing.T) {
	env := newDirEnv(t)
	c := openCache(t, env.config(t.TempDir(), 1<<20))
	a := env.put(t, "bkt", "a", pattern(1, 1000))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	asked := 0
	listing := func(yield func(object.Attrs, error) bool) {
		for range 100_000 {
			asked++
			if asked == 10 {
				cancel()
			}
			if !yield(a, nil) {
				return
			}
		}
	}
	if err := c.PrefetchSeq(ctx, listing, object.Warm, 0, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("PrefetchSeq(cancelled while listing) = %v; want context.Canceled", err)
	}
	if asked > 10 {
		t.Errorf("the listing was asked for %d objects; want it stopped at the cancel (10)", asked)
	}
}

// TestPrefetchSeqStopsAtClose stops a listing when the cache is closed,
// even one of objects already cached (no fill to fail): Close does not wait
// for the listing's end.
func TestPrefetchSeqStopsAtClose(t *testing.T) {
	env := newDirEnv(t)
	c, err := Open(context.Background(), env.config(t.TempDir(), 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	a := env.put(t, "bkt", "a", pattern(1, 1000))
	closed := make(chan error, 1)
	asked := 0
	listing := func(yield func(object.Attrs, error) bool) {
		for range 2_000_000 {
			if asked++; asked == 10 {
				go func() { closed <- c.Close() }()
			}
			if !yield(a, nil) {
				return
			}
		}
	}
	if err := c.PrefetchSeq(context.Background(), listing, object.Warm, 0, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("PrefetchSeq(closed while listing) = %v; want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close = %v", err)
	}
	if asked == 2_000_000 {
		t.Error("the listing went on to its end after Close")
	}
}

// TestPrefetchAbandonsItsFill cancels a prefetch whose worker runs a small
// object's fill that an Open has joined: the prefetch returns at once, and
// the Open, whose caller still waits, fills the object again.
func TestPrefetchAbandonsItsFill(t *testing.T) {
	env := newDirEnv(t)
	cfg := env.config(t.TempDir(), 1<<20)
	cfg.PackBelow = 0 // the default: small objects packed
	c := openCache(t, cfg)
	want := pattern(3, 1000)
	a := env.put(t, "bkt", "obj", want)
	if !c.packs(a) {
		t.Fatal("a 1000-byte object is not packed; the test needs a fill run on the prefetch's goroutine")
	}
	g := installGate(c, env.dl)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	perr := make(chan error, 1)
	go func() { perr <- c.Prefetch(ctx, []object.Attrs{a}, object.Warm, nil) }()
	<-g.arrived
	var wg sync.WaitGroup
	wg.Go(func() { openRead(t, c, obj("bkt", "obj"), want) })
	g.await(t, 2)
	cancel()
	select {
	case err := <-perr:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Prefetch cancelled = %v; want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled prefetch still waits for the fill it ran")
	}
	<-g.arrived // the Open's own fill
	close(g.release)
	wg.Wait()
	if n := env.dl.calls.Load(); n != 2 {
		t.Errorf("downloads = %d; want 2 (the abandoned one, the Open's)", n)
	}
	checkInvariants(t, c)
}
