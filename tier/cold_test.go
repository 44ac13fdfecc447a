package tier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestColdSetModel runs random adds, removes, lookups and compactions
// against a map and checks the set agrees after every step, including the
// order of its records (freezing order).
func TestColdSetModel(t *testing.T) {
	cs := newColdSet()
	defer cs.release()
	rng := rand.New(rand.NewPCG(1, 2))
	model := map[string]string{}
	// The expected order: front (added as oldest, newest of those first)
	// reversed, then back; a key removed and added again counts at its
	// last add (its value).
	type added struct{ key, val string }
	var front, back []added
	key := func(i int) string {
		return fmt.Sprintf("bkt\x00%0*d", 1+i%300, i) // lengths up to 300 bytes
	}
	evacuated := 0
	for step := range 300000 {
		i := rng.IntN(20000)
		k := key(i)
		switch op := rng.IntN(10); {
		case op < 5:
			if _, ok := model[k]; ok {
				continue
			}
			v := fmt.Sprintf("val-%d-%d", i, step)
			oldest := op == 0
			if _, err := cs.addAt([]byte(k), []byte(v), oldest); err != nil {
				t.Fatal(err)
			}
			model[k] = v
			if oldest {
				front = append(front, added{k, v})
			} else {
				back = append(back, added{k, v})
			}
		case op < 9:
			pos, ok := cs.findString(k)
			_, want := model[k]
			if ok != want {
				t.Fatalf("step %d: find(%q) = %v; want %v", step, k, ok, want)
			}
			if ok {
				if _, gk, gv := cs.parse(pos); string(gk) != k || string(gv) != model[k] {
					t.Fatalf("step %d: record at %d is %q=%q; want %q=%q", step, pos, gk, gv, k, model[k])
				}
				if rng.IntN(2) == 0 {
					cs.remove(pos)
					delete(model, k)
				}
			}
		default:
			free := len(cs.free)
			if err := cs.tidy(); err != nil {
				t.Fatal(err)
			}
			evacuated += len(cs.free) - free
		}
		if cs.len() != len(model) {
			t.Fatalf("step %d: len %d; want %d", step, cs.len(), len(model))
		}
	}
	if evacuated == 0 {
		t.Errorf("no chunk was evacuated: the test does not reach tidy's compaction")
	}
	if err := cs.tidy(); err != nil {
		t.Fatal(err)
	}
	for k, v := range model {
		pos, ok := cs.findString(k)
		if !ok {
			t.Fatalf("find(%q) after the run: not found", k)
		}
		if _, _, gv := cs.parse(pos); string(gv) != v {
			t.Errorf("find(%q) after the run: %q; want %q", k, gv, v)
		}
	}
	var got []string
	cs.each(func(_ uint64, k, v []byte) bool {
		if model[string(k)] != string(v) {
			t.Errorf("record %q=%q; want %q", k, v, model[string(k)])
		}
		got = append(got, string(k))
		return true
	})
	var want []string
	slices.Reverse(front)
	for _, a := range append(front, back...) {
		if model[a.key] == a.val {
			want = append(want, a.key)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("records are not in the order they were added")
	}
	if live := cs.arenaLive(); live > 0 && len(cs.chunks)-len(cs.free) > 1 && live*3 < (len(cs.chunks)-len(cs.free)-1)*coldChunk {
		t.Errorf("arena holds %d live bytes in %d mapped chunks; want at least a third live", live, len(cs.chunks)-len(cs.free))
	}
	if pos, ok := cs.oldest(); ok && len(want) > 0 {
		if _, k, _ := cs.parse(pos); string(k) != want[0] {
			t.Errorf("oldest is %q; want %q", k, want[0])
		}
	}
}

// arenaLive returns the live bytes in the arena.
func (cs *coldSet) arenaLive() int {
	n := 0
	for _, l := range cs.live {
		n += l
	}
	return n
}

// coldConfig is a packed config whose warm set holds at most n entries.
func (e *dirEnv) coldConfig(dir string, maxBytes int64, n int) Config {
	cfg := e.packConfig(dir, maxBytes)
	cfg.hooks = &testHooks{warmEntries: n}
	return cfg
}

// coldLen returns how many entries are frozen.
func coldLen(c *Cache) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, cs := range c.coldSets() {
		n += cs.len()
	}
	return n
}

// TestFrozenEntriesServeAndRestart fills packed objects into a cache whose
// warm set holds 4: the rest freeze; every object reads back exactly,
// Lookup, Entries, Stats and Verify see them all, a restart adopts them all
// frozen with no download, and the accounting holds throughout.
func TestFrozenEntriesServeAndRestart(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	const n = 60
	want := map[string][]byte{}
	for i := range n {
		name := fmt.Sprintf("f%03d", i)
		want[name] = pattern(i, 1000+i*997)
		env.put(t, "bkt", name, want[name])
	}
	ctx := context.Background()
	check := func(c *Cache) {
		t.Helper()
		if got := len(c.Entries("bkt", "")); got != n {
			t.Errorf("Entries = %d; want %d", got, n)
		}
		if st := c.Stats().Base(); st.Entries != n {
			t.Errorf("Stats().Entries = %d; want %d", st.Entries, n)
		}
		if en, ok := c.Lookup("bkt", "f000"); !ok || en.Attrs.Size != 1000 || en.Attrs.Name != "f000" {
			t.Errorf("Lookup(f000) = %+v, %v", en, ok)
		}
		res, err := c.Verify(ctx, VerifyOptions{})
		if err != nil || res.Objects != n || res.Verified != n {
			t.Errorf("Verify = %+v, %v; want %d objects verified", res.Verify, err, n)
		}
		for name, data := range want {
			openRead(t, c, obj("bkt", name), data)
		}
		checkInvariants(t, c)
	}
	c := openCache(t, env.coldConfig(dir, 64<<20, 4))
	for name, data := range want {
		openRead(t, c, obj("bkt", name), data)
	}
	if err := flushAll(c); err != nil { // clean entries freeze
		t.Fatal(err)
	}
	if got := coldLen(c); got < n-8 {
		t.Fatalf("%d entries frozen; want most of %d", got, n)
	}
	check(c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	fetched := env.dl.calls.Load()
	c2 := openCache(t, env.coldConfig(dir, 64<<20, 4))
	if got := coldLen(c2); got != n {
		t.Errorf("%d entries frozen after restart; want all %d", got, n)
	}
	check(c2)
	if got := env.dl.calls.Load(); got != fetched {
		t.Errorf("%d downloads after restart; want 0", got-fetched)
	}
	// Verify reads frozen objects without thawing them, and drops one
	// whose bytes changed behind the cache's back.
	if err := flushAll(c2); err != nil { // what check read freezes again
		t.Fatal(err)
	}
	before := coldLen(c2)
	var victim string // a frozen object (up to the warm set's 4 are not)
	var f *entry
	c2.mu.Lock()
	for i := 0; i < n && f == nil; i++ {
		victim = fmt.Sprintf("f%03d", i)
		f = c2.frozenStandInLocked(indexKey("bkt", victim))
	}
	c2.mu.Unlock()
	if f == nil {
		t.Fatal("no object is frozen")
	}
	en, _ := c2.Lookup("bkt", victim)
	flipByte(t, f.path(), f.rec.off+int64(en.Attrs.Size)/2)
	res, err := c2.Verify(context.Background(), VerifyOptions{})
	if err != nil || res.Corrupt != 1 || res.Verified != n-1 {
		t.Errorf("Verify after a flip = %+v, %v; want 1 corrupt", res.Verify, err)
	}
	if _, ok := c2.Lookup("bkt", victim); ok {
		t.Errorf("the corrupt object is still cached")
	}
	if got := coldLen(c2); got != before-1 {
		t.Errorf("%d entries frozen after Verify; want %d (only the corrupt one thawed, to be dropped)", got, before-1)
	}
	openRead(t, c2, obj("bkt", victim), want[victim]) // fetched again
	checkInvariants(t, c2)
}

// TestFrozenEvictionOrder checks that eviction takes the least recently
// used objects whether frozen or warm: with room for 10 objects, reading 20
// (each frozen soon after) leaves the last 10 read, and a frozen object
// used again is kept over older ones.
func TestFrozenEvictionOrder(t *testing.T) {
	env := newDirEnv(t)
	const size = 64 << 10
	for i := range 30 {
		env.put(t, "bkt", fmt.Sprintf("o%02d", i), pattern(i, size))
	}
	c := openCache(t, env.coldConfig(t.TempDir(), 10*size, 2))
	read := func(i int) {
		t.Helper()
		openRead(t, c, obj("bkt", fmt.Sprintf("o%02d", i)), pattern(i, size))
		if err := flushAll(c); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		read(i)
	}
	read(0) // o00 is now the most recently used
	for i := 10; i < 19; i++ {
		read(i)
	}
	var got []string
	for _, en := range c.Entries("bkt", "") {
		got = append(got, en.Attrs.Name)
	}
	want := []string{"o00", "o10", "o11", "o12", "o13", "o14", "o15", "o16", "o17", "o18"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("cached %v; want %v", got, want)
	}
	if coldLen(c) == 0 {
		t.Errorf("nothing was frozen")
	}
	checkInvariants(t, c)
}

// TestFrozenConcurrentUse opens, evicts, pins, unpins and verifies packed objects
// from many goroutines with a warm set of 1, so that entries freeze and
// thaw under every operation; every read is exact and the accounting holds.
// Run with -race.
func TestFrozenConcurrentUse(t *testing.T) {
	env := newDirEnv(t)
	const n, size = 40, 20 << 10
	for i := range n {
		env.put(t, "bkt", fmt.Sprintf("c%02d", i), pattern(i, size))
	}
	c := openCache(t, env.coldConfig(t.TempDir(), 30*size, 1)) // pins (even objects only) leave room for 10 more
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for range 150 {
				i := rng.IntN(n)
				name := fmt.Sprintf("c%02d", i)
				switch rng.IntN(10) {
				case 0:
					c.Evict(ctx, "bkt", name)
				case 1:
					if _, err := c.Verify(ctx, VerifyOptions{Bucket: "bkt", Prefix: name}); err != nil {
						t.Error(err)
					}
				case 2:
					c.flushAccess()
				case 3:
					if i%2 == 1 {
						continue
					}
					if _, err := c.Pin(ctx, "bkt", name); err != nil {
						t.Error(err)
					}
				case 4:
					if _, err := c.Unpin(ctx, "bkt", name); err != nil {
						t.Error(err)
					}
				default:
					h, err := c.Open(ctx, obj("bkt", name))
					if err != nil {
						t.Error(err)
						continue
					}
					checkHandle(t, h, pattern(i, size))
					h.Close()
				}
			}
		})
	}
	wg.Wait()
	checkInvariants(t, c)
}

// TestFrozenPinned pins packed objects in a cache whose warm set holds 2:
// pinned entries freeze too (into the pinned cold set), eviction under
// pressure never takes them, a restart adopts them frozen and pinned, and
// Unpin makes them evictable again.
func TestFrozenPinned(t *testing.T) {
	env := newDirEnv(t)
	const size = 64 << 10
	put := func(prefix string, n int) {
		for i := range n {
			env.put(t, "bkt", fmt.Sprintf("%s/%02d", prefix, i), pattern(i, size))
		}
	}
	put("pin", 10)
	put("free", 30)
	dir := t.TempDir()
	oldBatch := bulkBatch
	t.Cleanup(func() { bulkBatch = oldBatch }) // after the caches close: cleanups run last first

	bulkBatch = 3 // Pin, Unpin and Evict go in several batches
	ctx := context.Background()
	readAllOf := func(c *Cache, prefix string, n int) {
		t.Helper()
		for i := range n {
			openRead(t, c, obj("bkt", fmt.Sprintf("%s/%02d", prefix, i)), pattern(i, size))
		}
		if err := flushAll(c); err != nil {
			t.Fatal(err)
		}
	}
	pinnedFrozen := func(c *Cache) int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.pinnedCold.len()
	}
	checkPinned := func(c *Cache) {
		t.Helper()
		for i := range 10 {
			if en, ok := c.Lookup("bkt", fmt.Sprintf("pin/%02d", i)); !ok || !en.Pinned {
				t.Errorf("pin/%02d: cached %v, pinned %v", i, ok, en.Pinned)
			}
		}
		if st := c.Stats().Base(); st.PinnedBytes != 10*size {
			t.Errorf("PinnedBytes = %d; want %d", st.PinnedBytes, 10*size)
		}
		checkInvariants(t, c)
	}
	c := openCache(t, env.coldConfig(dir, 20*size, 2))
	readAllOf(c, "pin", 10)
	if n, err := c.Pin(ctx, "bkt", "pin/"); err != nil || n != 10 {
		t.Fatalf("Pin = %d, %v", n, err)
	}
	readAllOf(c, "free", 30) // twice the room left: the free objects evict each other
	if got := pinnedFrozen(c); got < 8 {
		t.Errorf("%d pinned entries frozen; want most of 10", got)
	}
	checkPinned(c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := openCache(t, env.coldConfig(dir, 20*size, 2))
	if got := pinnedFrozen(c2); got != 10 {
		t.Errorf("%d pinned entries frozen after restart; want 10", got)
	}
	checkPinned(c2)
	if n, err := c2.Unpin(ctx, "bkt", "pin/"); err != nil || n != 10 {
		t.Fatalf("Unpin = %d, %v", n, err)
	}
	readAllOf(c2, "free", 30) // now newer than every pin/ object: those go first
	for i := range 10 {
		if _, ok := c2.Lookup("bkt", fmt.Sprintf("pin/%02d", i)); ok {
			t.Errorf("pin/%02d is still cached after Unpin and a budget's worth of newer reads", i)
		}
	}
	before := len(c2.Entries("bkt", "free/"))
	if res, err := c2.Evict(ctx, "bkt", "free/"); err != nil || res.Evicted != before || before < 10 {
		t.Errorf("Evict(free/) = %+v, %v; want %d evicted", res, err, before)
	}
	if n := len(c2.Entries("bkt", "")); n != 0 {
		t.Errorf("%d entries left after evicting everything", n)
	}
	checkInvariants(t, c2)
}

// TestWarmSetAsksForFlush opens more packed objects than the warm set and
// its slack hold, without a flush: the trims ask the flusher for one well
// before its 15 s tick, after which the entries freeze.
func TestWarmSetAsksForFlush(t *testing.T) {
	oldSlack := warmSlack
	t.Cleanup(func() { warmSlack = oldSlack }) // after the cache closes: cleanups run last first
	warmSlack = 4
	env := newDirEnv(t)
	const n = 30
	for i := range n {
		env.put(t, "bkt", fmt.Sprintf("w%02d", i), pattern(i, 1000))
	}
	c := openCache(t, env.coldConfig(t.TempDir(), 64<<20, 2))
	for i := range n {
		openRead(t, c, obj("bkt", fmt.Sprintf("w%02d", i)), pattern(i, 1000))
	}
	deadline := time.Now().Add(accessFlushInterval / 2)
	for coldLen(c) < n-2-warmSlack && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		c.mu.Lock()
		c.trimWarmLocked() // as the next use would
		c.mu.Unlock()
	}
	if got := coldLen(c); got < n-2-warmSlack {
		t.Errorf("%d entries frozen %v after the opens; want at least %d (an early flush)", got,
			accessFlushInterval/2, n-2-warmSlack)
	}
	checkInvariants(t, c)
}
