package tier

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cacheagent/cacheagent/object"
)

// packConfig is config with small objects packed (below 1 MiB).
func (e *dirEnv) packConfig(dir string, maxBytes int64) Config {
	cfg := e.config(dir, maxBytes)
	cfg.PackBelow = 1 << 20
	return cfg
}

// packedSizes are sizes around the page and segment boundaries, and one
// object too large to pack.
var packedSizes = []int{1, 4095, 4096, 4097, 100 << 10, 1<<20 - 1, 1 << 20, 3 << 20}

// putSizes puts one object per packedSizes entry, seeded by its index,
// named p<i>, and returns their data.
func putSizes(t *testing.T, env *dirEnv) map[string][]byte {
	t.Helper()
	want := make(map[string][]byte)
	for i, n := range packedSizes {
		name := fmt.Sprintf("p%d", i)
		want[name] = pattern(i+1, n)
		env.put(t, "bkt", name, want[name])
	}
	return want
}

// segFiles lists the segment files of the cache in dir.
func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	return dirNames(t, filepath.Join(dir, dataName, segName))
}

// blocksAt returns the bytes allocated to the file at p.
func blocksAt(t *testing.T, p string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// TestPackedRoundTrip fills objects of sizes around the boundaries: those
// under PackBelow go to one segment, page-aligned, the others keep a file
// each; every one reads back exactly (ReadAt and the file at Offset), and
// a restart adopts them all with no download.
func TestPackedRoundTrip(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	want := putSizes(t, env)
	c := openCache(t, env.packConfig(dir, 64<<20))
	ctx := context.Background()
	check := func(c *Cache) {
		t.Helper()
		for name, data := range want {
			h, err := c.Open(ctx, obj("bkt", name))
			if err != nil {
				t.Fatal(err)
			}
			packed := len(data) < 1<<20
			if h.Packed() != packed || h.Offset()%4096 != 0 || (!packed && h.Offset() != 0) {
				t.Errorf("%s (%d bytes): Packed %v, Offset %d", name, len(data), h.Packed(), h.Offset())
			}
			got, err := io.ReadAll(io.NewSectionReader(h, 0, h.Size()+10)) // reads end at the object's end
			if err != nil || string(got) != string(data) {
				t.Errorf("%s: ReadAt gave %d bytes (err %v); want %d", name, len(got), err, len(data))
			}
			f, err := os.Open(h.Path())
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, len(data))
			if _, err := f.ReadAt(buf, h.Offset()); err != nil || string(buf) != string(data) {
				t.Errorf("%s: the bytes at Offset of Path differ (err %v)", name, err)
			}
			f.Close()
			h.Close()
		}
		checkInvariants(t, c)
	}
	check(c)
	if n := env.dl.calls.Load(); n != int64(len(want)) {
		t.Errorf("downloads = %d; want %d", n, len(want))
	}
	if segs := segFiles(t, dir); len(segs) != 1 {
		t.Errorf("segments = %v; want one", segs)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := openCache(t, env.packConfig(dir, 64<<20))
	check(c2)
	if n := env.dl.calls.Load(); n != int64(len(want)) {
		t.Errorf("downloads after the restart = %d; want %d (none)", n, len(want))
	}
	if st := c2.Stats().Base(); st.Entries != int64(len(want)) {
		t.Errorf("entries after the restart = %d; want %d", st.Entries, len(want))
	}
	// New objects go to a new segment: the old ones are sealed at start-up.
	env.put(t, "bkt", "new", pattern(99, 5000))
	openRead(t, c2, obj("bkt", "new"), pattern(99, 5000))
	if segs := segFiles(t, dir); len(segs) != 2 {
		t.Errorf("segments after a fill following the restart = %v; want two", segs)
	}
}

// TestSegmentAllocatedAhead: the active segment's space is allocated a
// chunk ahead of its objects, and what is left past the last object is
// freed when Close seals it.
func TestSegmentAllocatedAhead(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	c := openCache(t, env.packConfig(dir, 64<<20))
	var want int64
	for i := range 3 {
		name := fmt.Sprintf("a%d", i)
		env.put(t, "bkt", name, pattern(i, 10000))
		openRead(t, c, obj("bkt", name), pattern(i, 10000))
		want += roundUp(10000, c.segs.align)
	}
	segs := segFiles(t, dir)
	if len(segs) != 1 {
		t.Fatalf("segments = %v; want one", segs)
	}
	p := filepath.Join(dir, dataName, segName, segs[0])
	if got := blocksAt(t, p); got < segmentChunk {
		t.Fatalf("the segment has %d bytes allocated; want a chunk ahead, %d", got, segmentChunk)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := blocksAt(t, p); got != want {
		t.Errorf("after Close the segment has %d bytes allocated; want %d (its objects')", got, want)
	}
	c2 := openCache(t, env.packConfig(dir, 64<<20))
	for i := range 3 {
		openRead(t, c2, obj("bkt", fmt.Sprintf("a%d", i)), pattern(i, 10000))
	}
	if n := env.dl.calls.Load(); n != 3 {
		t.Errorf("downloads = %d; want 3 (none after the restart)", n)
	}
}

// TestPackedEvictionPunchesHoles evicts packed objects while a reader holds
// one open: their blocks leave the segment at once, the held one stays
// readable until its handle closes, and a sealed segment left empty is
// deleted.
func TestPackedEvictionPunchesHoles(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	const size = 64 << 10
	c := openCache(t, env.packConfig(dir, 20*size)) // 20 objects fit
	c.segs.mu.Lock()
	c.segs.max = 8 * size // a segment holds 8
	c.segs.mu.Unlock()
	ctx := context.Background()
	put := func(i int) object.Object {
		name := fmt.Sprintf("o%03d", i)
		env.put(t, "bkt", name, pattern(i, size))
		return obj("bkt", name)
	}
	held, err := c.Open(ctx, put(0))
	if err != nil {
		t.Fatal(err)
	}
	first := held.Path()
	for i := 1; i < 16; i++ {
		openRead(t, c, put(i), pattern(i, size))
	}
	before := blocksAt(t, first)
	for i := 16; i < 40; i++ { // evicts o001..o019 and more, never o000 (in use)
		openRead(t, c, put(i), pattern(i, size))
	}
	if _, err := c.Evict(ctx, "bkt", "o000"); err != nil { // in use: it waits for its handle
		t.Fatal(err)
	}
	if got, err := io.ReadAll(io.NewSectionReader(held, 0, size)); err != nil || string(got) != string(pattern(0, size)) {
		t.Errorf("the held object changed under its reader (err %v)", err)
	}
	if after := blocksAt(t, first); after > before-6*size {
		t.Errorf("first segment holds %d bytes after evicting 7 of its 8 objects; had %d", after, before)
	}
	st := c.Stats().Base()
	if st.UsedBytes > 20*size || st.Evictions < 19 {
		t.Errorf("Stats = %+v; want at most 20 objects' blocks used and 19 or more evictions", st)
	}
	checkInvariants(t, c)
	// o000 was evicted while held: the last Close frees it, and the first
	// segment, sealed and now empty, goes.
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(first); !os.IsNotExist(err) {
		t.Errorf("the first segment, with every object evicted, still exists (err %v)", err)
	}
	checkInvariants(t, c)
	checkIndexMatchesFiles(t, c)
}

// TestPackedVerifyFindsFlippedByte flips one byte inside a segment: Verify
// drops that object alone, and the next Open fetches it again.
func TestPackedVerifyFindsFlippedByte(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	c := openCache(t, env.packConfig(dir, 64<<20))
	ctx := context.Background()
	for i := range 4 {
		name := fmt.Sprintf("v%d", i)
		env.put(t, "bkt", name, pattern(i, 30000))
		openRead(t, c, obj("bkt", name), pattern(i, 30000))
	}
	h, err := c.Open(ctx, obj("bkt", "v2"))
	if err != nil {
		t.Fatal(err)
	}
	p, off := h.Path(), h.Offset()
	h.Close()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	f.ReadAt(b, off+12345)
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off+12345); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res, err := c.Verify(ctx, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Corrupt != 1 || res.Verified != 3 || len(res.Dropped) != 1 || res.Dropped[0].Object.Name != "v2" {
		t.Errorf("Verify = %+v; want v2 alone corrupt", res)
	}
	calls := env.dl.calls.Load()
	openRead(t, c, obj("bkt", "v2"), pattern(2, 30000))
	if env.dl.calls.Load() != calls+1 {
		t.Error("the corrupt packed object was not fetched again")
	}
	checkInvariants(t, c)
}

// TestPackedPromoteToShm promotes packed objects to the shm tier (a file of
// their own there) and serves them from it.
func TestPackedPromoteToShm(t *testing.T) {
	env := newDirEnv(t)
	dir, shm := t.TempDir(), shmDir(t)
	cfg := env.packConfig(dir, 64<<20)
	cfg.ShmDir, cfg.ShmMaxBytes = shm, 64<<20
	c := openCache(t, cfg)
	ctx := context.Background()
	for i := range 3 {
		name := fmt.Sprintf("s%d", i)
		env.put(t, "bkt", name, pattern(i, 50000))
		openRead(t, c, obj("bkt", name), pattern(i, 50000))
	}
	if n, err := c.Promote(ctx, "bkt", ""); err != nil || n != 3 {
		t.Fatalf("Promote = %d, %v; want 3", n, err)
	}
	for i := range 3 {
		h, err := c.Open(ctx, obj("bkt", fmt.Sprintf("s%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(io.NewSectionReader(h, 0, h.Size()))
		if h.Tier() != Shm || h.Packed() || h.Offset() != 0 || string(got) != string(pattern(i, 50000)) {
			t.Errorf("s%d: tier %s, packed %v, offset %d, bytes equal %v", i, h.Tier(), h.Packed(), h.Offset(),
				string(got) == string(pattern(i, 50000)))
		}
		h.Close()
	}
	res, err := c.Verify(ctx, VerifyOptions{})
	if err != nil || res.Corrupt != 0 {
		t.Errorf("Verify = %+v, %v; want nothing corrupt", res, err)
	}
	checkInvariants(t, c)
}

func TestSegmentNames(t *testing.T) {
	for _, num := range []uint64{0, 1, 0xabc, 1<<64 - 1} {
		name := filepath.Base(segPath("/x", num))
		if got, ok := parseSegName(name); !ok || got != num {
			t.Errorf("parseSegName(%q) = %d, %v; want %d", name, got, ok, num)
		}
	}
	for _, bad := range []string{"", ".seg", "0000000000000001", "000000000000001.seg", "00000000000000001.seg",
		"000000000000000A.seg", "000000000000000g.seg", "0000000000000001.seg.tmp", "../0000000000000001.seg"} {
		if _, ok := parseSegName(bad); ok {
			t.Errorf("parseSegName(%q) = ok; want rejected", bad)
		}
	}
}

func FuzzParseSegName(f *testing.F) {
	f.Add("0000000000000001.seg")
	f.Add("ffffffffffffffff.seg")
	f.Fuzz(func(t *testing.T, name string) {
		num, ok := parseSegName(name)
		if ok && filepath.Base(segPath("/x", num)) != name {
			t.Fatalf("parseSegName(%q) = %d, but segment %d is named %q", name, num, num, filepath.Base(segPath("/x", num)))
		}
	})
}

// TestPackedAndFilesInOnePlan announces a plan of small (packed) and large
// (a file each) objects: the planner fetches them all, and each reads back
// from where it is.
func TestPackedAndFilesInOnePlan(t *testing.T) {
	env := newDirEnv(t)
	c := openCache(t, env.packConfig(t.TempDir(), 64<<20))
	hooks := planHooks(c)
	ctx := context.Background()
	var plan []object.Object
	sizes := map[string]int{}
	for i := range 8 {
		name := fmt.Sprintf("m%d", i)
		sizes[name] = 20 << 10
		if i%3 == 0 {
			sizes[name] = 2 << 20
		}
		env.put(t, "bkt", name, pattern(i, sizes[name]))
		plan = append(plan, obj("bkt", name))
	}
	if err := c.Plan(ctx, "p", plan); err != nil {
		t.Fatal(err)
	}
	hooks.awaitIdle(t)
	calls := env.dl.calls.Load()
	packed := 0
	for i, o := range plan {
		h, err := c.Open(ctx, o, CachedOnly())
		if err != nil {
			t.Fatalf("%s not fetched by the planner: %v", o.Name, err)
		}
		got, _ := io.ReadAll(io.NewSectionReader(h, 0, h.Size()))
		if string(got) != string(pattern(i, sizes[o.Name])) || h.Packed() != (sizes[o.Name] < 1<<20) {
			t.Errorf("%s: %d bytes, packed %v", o.Name, len(got), h.Packed())
		}
		if h.Packed() {
			packed++
		}
		h.Close()
	}
	if packed != 5 || env.dl.calls.Load() != calls {
		t.Errorf("%d packed of 8 (want 5), %d downloads while reading (want 0)", packed, env.dl.calls.Load()-calls)
	}
	checkInvariants(t, c)
}
