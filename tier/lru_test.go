package tier

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cacheagent/cacheagent/object"
)

// blockSize returns the block size of the filesystem holding dir.
func blockSize(t testing.TB, dir string) int64 {
	t.Helper()
	fsi, err := statFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	return fsi.blockSize
}

// cached returns the names cached in bkt, sorted.
func cached(c *Cache) []string {
	var out []string
	for _, e := range c.Entries("bkt", "") {
		out = append(out, e.Attrs.Name)
	}
	return out
}

func TestLRUEvictionOrder(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	size := 2 * blockSize(t, dir)
	c := openCache(t, env.config(dir, 3*size))
	data := map[string][]byte{}
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		data[name] = pattern(i, int(size))
		env.put(t, "bkt", name, data[name])
	}
	steps := []struct {
		open string
		want []string
	}{
		{"a", []string{"a"}},
		{"b", []string{"a", "b"}},
		{"c", []string{"a", "b", "c"}},
		{"a", []string{"a", "b", "c"}}, // hit: a becomes most recently used
		{"d", []string{"a", "c", "d"}}, // b is least recently used
		{"e", []string{"a", "d", "e"}},
		{"a", []string{"a", "d", "e"}},
		{"b", []string{"a", "b", "e"}},
	}
	for i, s := range steps {
		openRead(t, c, obj("bkt", s.open), data[s.open])
		if got := cached(c); !slices.Equal(got, s.want) {
			t.Fatalf("step %d (open %s): cached = %q; want %q", i, s.open, got, s.want)
		}
		if st := c.Stats().Base(); st.UsedBytes > st.MaxBytes {
			t.Fatalf("step %d: UsedBytes %d > MaxBytes %d", i, st.UsedBytes, st.MaxBytes)
		}
	}
	if st := c.Stats().Base(); st.Evictions != 3 {
		t.Errorf("Evictions = %d; want 3", st.Evictions)
	}
	if n := len(dataFiles(t, dir)); n != 3 {
		t.Errorf("data files = %d; want 3", n)
	}
	checkInvariants(t, c)
}

func TestPinnedAndInUseNeverEvicted(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	size := 2 * blockSize(t, dir)
	c := openCache(t, env.config(dir, 3*size))
	ctx := context.Background()
	data := map[string][]byte{}
	for i, name := range []string{"a", "b", "c", "d", "e", "f"} {
		data[name] = pattern(i, int(size))
		env.put(t, "bkt", name, data[name])
	}
	openRead(t, c, obj("bkt", "a"), data["a"])
	if n, err := c.Pin(ctx, "bkt", "a"); n != 1 || err != nil {
		t.Fatalf("Pin(a) = %d, %v; want 1, nil", n, err)
	}
	hb, err := c.Open(ctx, obj("bkt", "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	for _, name := range []string{"c", "d", "e"} {
		openRead(t, c, obj("bkt", name), data[name])
	}
	if got, want := cached(c), []string{"a", "b", "e"}; !slices.Equal(got, want) {
		t.Fatalf("cached = %q; want %q (pinned a and open b kept)", got, want)
	}
	he, err := c.Open(ctx, obj("bkt", "e"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Open(ctx, obj("bkt", "f"))
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Open(f) with everything pinned or in use = %v; want ErrNoSpace", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "pinned") || !strings.Contains(msg, "in use") {
		t.Errorf("error %q does not say what holds the space", msg)
	}
	if st := c.Stats().Base(); st.PinnedBytes != size || st.InUseBytes != 2*size || st.ReservedBytes != 0 {
		t.Errorf("Stats() = %+v; want %d pinned, %d in use, 0 reserved", st, size, 2*size)
	}
	checkHandle(t, hb, data["b"])
	checkHandle(t, he, data["e"])
	if err := he.Close(); err != nil {
		t.Fatal(err)
	}
	if err := he.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Handle.Close = %v; want ErrClosed", err)
	}
	openRead(t, c, obj("bkt", "f"), data["f"]) // evicts e, now unused
	if n, err := c.Unpin(ctx, "bkt", ""); n != 1 || err != nil {
		t.Fatalf("Unpin = %d, %v; want 1, nil", n, err)
	}
	openRead(t, c, obj("bkt", "c"), data["c"]) // a is now the least recently used
	if got, want := cached(c), []string{"b", "c", "f"}; !slices.Equal(got, want) {
		t.Fatalf("cached = %q; want %q", got, want)
	}
	checkInvariants(t, c)
}

func TestObjectLargerThanBudget(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	c := openCache(t, env.config(dir, 4096))
	env.put(t, "bkt", "big", pattern(1, 5000))
	_, err := c.Open(context.Background(), obj("bkt", "big"))
	if !errors.Is(err, ErrNoSpace) || errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Open(big) = %v; want ErrNoSpace (not ENOSPC)", err)
	}
	if files := dataFiles(t, dir); len(files) != 0 {
		t.Errorf("data files = %q; want none", files)
	}
	if st := c.Stats().Base(); st.ReservedBytes != 0 || st.UsedBytes != 0 {
		t.Errorf("Stats() = %+v; want nothing used or reserved", st)
	}
}

func TestPrefetchTwiceTheBudgetStaysWithin(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	const n, perObj = 32, 64 << 10
	budget := int64(n / 2 * perObj)
	cfg := env.config(dir, budget)
	cfg.PrefetchParallelism = 8
	c := openCache(t, cfg)
	var objs []object.Attrs
	for i := range n {
		objs = append(objs, env.put(t, "bkt", fmt.Sprintf("shard-%02d", i), pattern(i, perObj)))
	}
	var calls int
	var over []string
	var last Progress
	var mu sync.Mutex // Prefetch promises serial calls; the mutex lets -race check it
	progress := func(p Progress) {
		if !mu.TryLock() {
			t.Errorf("progress called concurrently")
			return
		}
		defer mu.Unlock()
		calls++
		last = p
		if st := c.Stats().Base(); st.UsedBytes+st.ReservedBytes > st.MaxBytes {
			over = append(over, fmt.Sprintf("used %d + reserved %d > %d", st.UsedBytes, st.ReservedBytes, st.MaxBytes))
		}
	}
	if err := c.Prefetch(context.Background(), objs, object.Warm, progress); err != nil {
		t.Fatalf("Prefetch: %v", err)
	}
	if len(over) > 0 {
		t.Errorf("budget exceeded during Prefetch: %q", over)
	}
	// A directory walk is not atomic (a fill may delete a victim and create
	// its temp file between two reads), so the files are measured at rest.
	if got := onDisk(t, dir); got > budget {
		t.Errorf("%d bytes on disk > budget %d", got, budget)
	}
	want := Progress{Objects: n, Bytes: n * perObj, ObjectsDone: n, BytesDone: n * perObj, BytesFetched: n * perObj}
	if last != want || calls != n+1 {
		t.Errorf("last progress = %+v after %d calls; want %+v after %d", last, calls, want, n+1)
	}
	st := c.Stats().Base()
	if st.Entries != n/2 || st.Evictions != n/2 || st.UsedBytes != budget {
		t.Errorf("Stats() = %+v; want %d entries, %d evictions, %d used", st, n/2, n/2, budget)
	}
	// Prefetching what is cached fetches nothing.
	var again []object.Attrs
	for _, e := range c.Entries("bkt", "") {
		again = append(again, e.Attrs)
	}
	if err := c.Prefetch(context.Background(), again, object.Warm, progress); err != nil {
		t.Fatalf("Prefetch: %v", err)
	}
	if last.Cached != n/2 || last.BytesFetched != 0 {
		t.Errorf("second Prefetch: %+v; want %d cached, 0 fetched", last, n/2)
	}
	checkInvariants(t, c)
}

// onDisk returns the blocks occupied by the cache's data files, temp files
// included.
func onDisk(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(filepath.Join(dir, dataName), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			t.Fatal(err)
		}
		n += blocksOf(fi)
		return nil
	})
	return n
}

func TestEvictEntriesLookup(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	c := openCache(t, env.config(dir, 1<<20))
	ctx := context.Background()
	for i, name := range []string{"p/b", "q/c", "p/a", "p/d"} {
		env.put(t, "bkt", name, pattern(i, 100))
		openRead(t, c, obj("bkt", name), pattern(i, 100))
	}
	if got, want := cached(c), []string{"p/a", "p/b", "p/d", "q/c"}; !slices.Equal(got, want) {
		t.Fatalf("Entries = %q; want %q (sorted)", got, want)
	}
	if _, err := c.Pin(ctx, "bkt", "p/d"); err != nil {
		t.Fatal(err)
	}
	h, err := c.Open(ctx, obj("bkt", "p/b"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	e, ok := c.Lookup("bkt", "p/b")
	if !ok || !e.InUse || e.Tier != "disk" || e.Attrs.Size != 100 || e.LastAccess.IsZero() {
		t.Errorf("Lookup(p/b) = %+v, %v; want an in-use disk entry of 100 bytes", e, ok)
	}
	res, err := c.Evict(ctx, "bkt", "p/")
	if want := (EvictResult{Evicted: 1, Pending: 1, Skipped: 1}); res != want || err != nil {
		t.Fatalf("Evict(p/) = %+v, %v; want %+v (p/a evicted, p/b in use, p/d pinned), nil", res, err, want)
	}
	if got, want := cached(c), []string{"p/d", "q/c"}; !slices.Equal(got, want) {
		t.Errorf("Entries after Evict = %q; want %q", got, want)
	}
	if _, ok := c.Lookup("bkt", "p/a"); ok {
		t.Errorf("Lookup(p/a) found an evicted entry")
	}
	if n := len(dataFiles(t, dir)); n != 3 { // p/b's file waits for its handle
		t.Errorf("data files = %d; want 3", n)
	}
	if got := c.Entries("other", ""); len(got) != 0 {
		t.Errorf("Entries(other) = %v; want none", got)
	}
	checkInvariants(t, c)
}

func TestSetMaxBytes(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	size := blockSize(t, dir)
	c := openCache(t, env.config(dir, 10*size))
	ctx := context.Background()
	for i, name := range []string{"a", "b", "c", "d"} {
		env.put(t, "bkt", name, pattern(i, int(size)))
		openRead(t, c, obj("bkt", name), pattern(i, int(size)))
	}
	if _, err := c.Pin(ctx, "bkt", "d"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetMaxBytes(ctx, 2*size); err != nil {
		t.Fatalf("SetMaxBytes: %v", err)
	}
	if got, want := cached(c), []string{"c", "d"}; !slices.Equal(got, want) {
		t.Errorf("cached = %q; want %q", got, want)
	}
	err := c.SetMaxBytes(ctx, size/2)
	if !errors.Is(err, ErrNoSpace) {
		t.Errorf("SetMaxBytes below the pinned bytes = %v; want ErrNoSpace", err)
	}
	if st := c.Stats().Base(); st.MaxBytes != size/2 || st.UsedBytes != size {
		t.Errorf("Stats() = %+v; want max %d, used %d (the pinned entry)", st, size/2, size)
	}
	if err := c.SetMaxBytes(ctx, -1); err == nil {
		t.Errorf("SetMaxBytes(-1) = nil; want an error")
	}
	checkInvariants(t, c)
}

func TestSetShmMaxBytes(t *testing.T) {
	e := newDirEnv(t)
	cfg := e.shmConfig(t.TempDir(), shmDir(t), 0, 4*objSize)
	cfg.PromoteHits = -1
	c := openCache(t, cfg)
	ctx := context.Background()
	o := e.putObjects(t, "a", "b", "c")
	touch(t, c, o...)
	if n, err := c.PromoteObjects(ctx, o); n != 3 || err != nil {
		t.Fatalf("PromoteObjects = %d, %v", n, err)
	}
	touch(t, c, o[1], o[2]) // a is the least recently used
	h, err := c.Open(ctx, o[2])
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetShmMaxBytes(ctx, 2*objSize); err != nil {
		t.Fatalf("SetShmMaxBytes: %v", err)
	}
	if got := []Kind{tierOf(c, "bkt", "a"), tierOf(c, "bkt", "b"), tierOf(c, "bkt", "c")}; got[0] != Disk || got[1] != Shm || got[2] != Shm {
		t.Errorf("tiers of a, b, c = %v; want a demoted to disk", got)
	}
	err = c.SetShmMaxBytes(ctx, objSize/2)
	if !errors.Is(err, ErrNoSpace) {
		t.Errorf("SetShmMaxBytes below the in-use copy = %v; want ErrNoSpace", err)
	}
	if _, st := statsOf(c); st.MaxBytes != objSize/2 || tierOf(c, "bkt", "c") != Shm || tierOf(c, "bkt", "b") != Disk {
		t.Errorf("after shrinking below c's in-use copy: %+v, b in %s, c in %s; want b demoted, c kept",
			st, tierOf(c, "bkt", "b"), tierOf(c, "bkt", "c"))
	}
	h.Close()
	if err := c.SetShmMaxBytes(ctx, -1); err == nil {
		t.Errorf("SetShmMaxBytes(-1) = nil; want an error")
	}
	if err := c.SetShmMaxBytes(ctx, 0); err != nil {
		t.Errorf("SetShmMaxBytes(0) (the default share) = %v", err)
	}
	if _, ok := c.Lookup("bkt", "a"); !ok {
		t.Errorf("a demoted out of the cache; want it kept on disk")
	}
	checkInvariants(t, c)
}

// TestNoSpaceWait: with the budget in use and another fill in progress, an
// Open would wait for that fill to end; with NoSpaceWait (a peer's
// request) it fails at once with ErrNoSpace instead.
func TestNoSpaceWait(t *testing.T) {
	env := newDirEnv(t)
	const size = 8192
	c := openCache(t, env.config(t.TempDir(), 2*size))
	ctx := context.Background()
	for i, name := range []string{"a", "b", "c"} {
		env.put(t, "bkt", name, pattern(i, size))
	}
	ha, err := c.Open(ctx, obj("bkt", "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Close()
	g := installGate(c, env.dl)
	filled := make(chan error, 1)
	go func() {
		h, err := c.Open(ctx, obj("bkt", "b"))
		if err == nil {
			h.Close()
		}
		filled <- err
	}()
	// b's fill holds the rest of the budget once its download waits at the
	// gate (joining the fill comes before its reservation, which may wait
	// while a's fill ends).
	if name := <-g.arrived; name != "b" {
		t.Fatalf("download of %q at the gate; want b", name)
	}
	if _, err := c.Open(ctx, obj("bkt", "c"), NoSpaceWait()); !errors.Is(err, ErrNoSpace) {
		t.Errorf("Open(c, NoSpaceWait) while b fills = %v; want ErrNoSpace", err)
	}
	close(g.release)
	if err := <-filled; err != nil {
		t.Fatalf("Open(b) = %v", err)
	}
	openRead(t, c, obj("bkt", "c"), pattern(2, size)) // b is closed: evicted for c
	checkInvariants(t, c)
}
