package tier

import (
	"context"
	"sync"
	"testing"

	"github.com/cacheagent/cacheagent/object"
)

// indexRecord returns the index record of bucket/name, if there is one.
func indexRecord(t *testing.T, c *Cache, bucket, name string) (record, bool) {
	t.Helper()
	var rec record
	found := false
	want := indexKey(bucket, name)
	if err := c.idx.scan(func(key, val []byte) {
		if string(key) == want {
			r, err := decodeRecord(val)
			if err != nil {
				t.Errorf("record of %s: %v", want, err)
			}
			rec, found = r, true
		}
	}); err != nil {
		t.Fatal(err)
	}
	return rec, found
}

// openHeldPacker opens a packing cache in dir whose packer stops before
// each group's fdatasync: entered gets the group's size, and nothing is
// synced until release is called (the test's cleanup calls it too, before
// the cache closes). cfg is the cache's Config, hooks included.
func openHeldPacker(t *testing.T, env *dirEnv, dir string) (c *Cache, cfg Config, entered <-chan int, release func()) {
	t.Helper()
	groups, held := make(chan int, 16), make(chan struct{})
	cfg = env.packConfig(dir, 64<<20)
	cfg.hooks = &testHooks{syncing: func(n int) {
		groups <- n
		<-held
	}}
	c = openCache(t, cfg)
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(release) // runs before openCache's Close
	return c, cfg, groups, release
}

// TestPackedServedBeforeDurable: a packed object is read as soon as it is
// written, while the packer's fdatasync is held back; until the packer
// has synced it, nothing writes its record (not the flusher, not a pin:
// a crash then leaves it uncached, never a record naming unsynced
// bytes), and it is not frozen. Once synced, its record holds the pin set
// meanwhile, and a restart adopts it with no download.
func TestPackedServedBeforeDurable(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	data := pattern(7, 100<<10)
	env.put(t, "bkt", "a", data)
	c, cfg, entered, release := openHeldPacker(t, env, dir)
	openRead(t, c, obj("bkt", "a"), data) // served: the packer has not synced it
	if n := <-entered; n != 1 {
		t.Fatalf("the packer syncs a group of %d; want 1", n)
	}
	ctx := context.Background()
	if n, err := c.Pin(ctx, "bkt", "a"); err != nil || n != 1 {
		t.Fatalf("Pin = %d, %v; want 1", n, err)
	}
	if err := c.flushAccess(); err != nil {
		t.Fatal(err)
	}
	if _, ok := indexRecord(t, c, "bkt", "a"); ok {
		t.Fatal("a record was written before the segment was synced")
	}
	if got := coldLen(c); got != 0 {
		t.Errorf("%d entries frozen before they were synced", got)
	}
	openRead(t, c, obj("bkt", "a"), data)
	release()
	if err := flushAll(c); err != nil {
		t.Fatal(err)
	}
	rec, ok := indexRecord(t, c, "bkt", "a")
	if !ok || !rec.packed || !rec.pinned || rec.size != int64(len(data)) {
		t.Fatalf("record after the sync = %+v, %v; want packed, pinned, %d bytes", rec, ok, len(data))
	}
	checkInvariants(t, c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	fetched := env.dl.calls.Load()
	cfg.hooks = nil
	c2 := openCache(t, cfg)
	openRead(t, c2, obj("bkt", "a"), data)
	if en, ok := c2.Lookup("bkt", "a"); !ok || !en.Pinned {
		t.Errorf("after restart Lookup = %+v, %v; want pinned", en, ok)
	}
	if got := env.dl.calls.Load() - fetched; got != 0 {
		t.Errorf("%d downloads after restart; want 0", got)
	}
}

// TestPackedDroppedBeforeDurable: objects evicted or replaced by a newer
// generation while the packer's sync is held back get no record from it;
// the newer generation does, and the space and segments balance.
func TestPackedDroppedBeforeDurable(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	env.put(t, "bkt", "gone", pattern(1, 50<<10))
	env.put(t, "bkt", "old", pattern(2, 60<<10))
	c, _, entered, release := openHeldPacker(t, env, dir)
	openRead(t, c, obj("bkt", "gone"), pattern(1, 50<<10))
	<-entered // the packer holds "gone"; "old" waits behind it
	openRead(t, c, obj("bkt", "old"), pattern(2, 60<<10))
	ctx := context.Background()
	if res, err := c.Evict(ctx, "bkt", "gone"); err != nil || res.Evicted != 1 {
		t.Fatalf("Evict = %+v, %v; want 1 evicted", res, err)
	}
	newer := pattern(3, 70<<10)
	a := env.put(t, "bkt", "old", newer)
	openRead(t, c, object.Object{Bucket: "bkt", Name: "old", Generation: a.Generation}, newer)
	release()
	if err := flushAll(c); err != nil {
		t.Fatal(err)
	}
	if _, ok := indexRecord(t, c, "bkt", "gone"); ok {
		t.Error("an object evicted before its sync has a record")
	}
	if rec, ok := indexRecord(t, c, "bkt", "old"); !ok || rec.gen != a.Generation || rec.size != int64(len(newer)) {
		t.Errorf("record of the replaced object = %+v, %v; want generation %d, %d bytes", rec, ok, a.Generation, len(newer))
	}
	checkInvariants(t, c)
}
