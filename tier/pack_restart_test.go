package tier

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// copyTree copies directory src to dst (cp -a).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v %s", src, dst, err, out)
	}
}

// replaceIndex puts the index copied to snap back in place of dir's.
func replaceIndex(t *testing.T, dir, snap string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(dir, indexName)); err != nil {
		t.Fatal(err)
	}
	copyTree(t, snap, filepath.Join(dir, indexName))
}

// twoPacked puts two objects of 100 KiB, a and b, for a packing cache in
// a new directory: b keeps their segment when a leaves.
func twoPacked(t *testing.T) (env *dirEnv, dir string, a, b []byte) {
	t.Helper()
	env, dir = newDirEnv(t), t.TempDir()
	a, b = pattern(1, 100<<10), pattern(2, 100<<10)
	env.put(t, "bkt", "a", a)
	env.put(t, "bkt", "b", b)
	return env, dir, a, b
}

// TestPackedPunchAfterDeletion: an evicted packed object's region is
// punched only after its record's deletion is in the index and synced. The
// index as it stands when the punch starts (copied there, as a power loss
// at that moment would leave it) no longer names the object, so a restart
// with it never serves the punched region (zeros).
func TestPackedPunchAfterDeletion(t *testing.T) {
	env, dir, a, b := twoPacked(t)
	ctx := context.Background()
	snap := filepath.Join(t.TempDir(), "index")
	cfg := env.packConfig(dir, 64<<20)
	punched := 0
	cfg.hooks = &testHooks{punching: func(n int) {
		if punched == 0 {
			copyTree(t, filepath.Join(dir, indexName), snap)
		}
		punched += n
	}}
	c, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	openRead(t, c, obj("bkt", "a"), a)
	openRead(t, c, obj("bkt", "b"), b)
	if err := flushAll(c); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, dataName, segName, segFiles(t, dir)[0])
	before := blocksAt(t, seg)
	if res, err := c.Evict(ctx, "bkt", "a"); err != nil || res.Evicted != 1 {
		t.Fatalf("Evict = %+v, %v", res, err)
	}
	if punched != 1 {
		t.Fatalf("Evict returned with %d regions punched; want 1", punched)
	}
	if after := blocksAt(t, seg); after > before-int64(len(a)) {
		t.Errorf("segment holds %d bytes after the eviction; %d before", after, before)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	replaceIndex(t, dir, snap)
	c = openCache(t, env.packConfig(dir, 64<<20))
	if h, err := c.Open(ctx, obj("bkt", "a"), CachedOnly()); err == nil {
		got := make([]byte, len(a))
		h.ReadAt(got, 0)
		h.Close()
		t.Fatalf("the evicted object is served after a restart with the index of its punch (same bytes: %v)",
			bytes.Equal(got, a))
	}
	openRead(t, c, obj("bkt", "b"), b, CachedOnly())
	checkInvariants(t, c)
}

// TestPackedHandleReadableAcrossReopen: a packed object evicted while a
// handle holds it keeps its bytes for that handle through Close and the
// next Open (as a client's mapping keeps them across a daemon restart): the
// next start does not punch space it cannot know unused. That space counts
// in the budget until the segment goes.
func TestPackedHandleReadableAcrossReopen(t *testing.T) {
	env, dir, a, b := twoPacked(t)
	ctx := context.Background()
	c, err := Open(ctx, env.packConfig(dir, 64<<20))
	if err != nil {
		t.Fatal(err)
	}
	openRead(t, c, obj("bkt", "b"), b)
	h, err := c.Open(ctx, obj("bkt", "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if res, err := c.Evict(ctx, "bkt", "a"); err != nil || res.Pending != 1 {
		t.Fatalf("Evict = %+v, %v", res, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = openCache(t, env.packConfig(dir, 64<<20))
	checkHandle(t, h, a)
	st := c.Stats().Base()
	if region := roundUp(int64(len(b)), c.segs.align); st.UsedBytes < 2*region {
		t.Errorf("UsedBytes = %d; want b's and the held region's, %d", st.UsedBytes, 2*region)
	}
	checkInvariants(t, c)
	// The segment's last object leaves: the file goes, and its dead space
	// with it.
	if res, err := c.Evict(ctx, "bkt", "b"); err != nil || res.Evicted != 1 {
		t.Fatalf("Evict = %+v, %v", res, err)
	}
	if st := c.Stats().Base(); st.UsedBytes != 0 {
		t.Errorf("UsedBytes = %d after the last object left; want 0", st.UsedBytes)
	}
	if segs := segFiles(t, dir); len(segs) != 0 {
		t.Errorf("segments left: %v", segs)
	}
	checkHandle(t, h, a) // a deleted file keeps its bytes
	checkInvariants(t, c)
}

// TestSegmentNumbersPastRecords: a segment removed while a record naming it
// survived (its deletion lost) is never numbered again: the next segment
// is numbered past every record, so a stale record cannot name a new
// segment's bytes.
func TestSegmentNumbersPastRecords(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		env.put(t, "bkt", n, pattern(len(n), 100<<10))
	}
	for _, n := range []string{"a", "b"} { // a start each: a segment each
		c := openCache(t, env.packConfig(dir, 64<<20))
		openRead(t, c, obj("bkt", n), pattern(1, 100<<10))
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	segs := segFiles(t, dir)
	if len(segs) != 2 {
		t.Fatalf("segments = %v; want two", segs)
	}
	last := segs[len(segs)-1]
	if err := os.Remove(filepath.Join(dir, dataName, segName, last)); err != nil {
		t.Fatal(err)
	}
	c := openCache(t, env.packConfig(dir, 64<<20))
	openRead(t, c, obj("bkt", "c"), pattern(1, 100<<10))
	if err := flushAll(c); err != nil {
		t.Fatal(err)
	}
	segs = segFiles(t, dir)
	if slices.Contains(segs, last) || len(segs) != 2 {
		t.Errorf("segments = %v; the removed %s numbered again", segs, last)
	}
}

// TestSegmentSealedFullFreesTail: a segment sealed because it is full
// frees the space allocated ahead past its last object, as one sealed at
// Close does, and a fill already placed in it allocates no further.
func TestSegmentSealedFullFreesTail(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	c := openCache(t, env.packConfig(dir, 64<<20))
	const size = 900 << 10
	c.segs.max = 6 << 20
	for i := range 7 { // the seventh does not fit: the first segment is sealed
		name := string(rune('a' + i))
		env.put(t, "bkt", name, pattern(i, size))
		openRead(t, c, obj("bkt", name), pattern(i, size))
	}
	if err := flushAll(c); err != nil {
		t.Fatal(err)
	}
	segs := segFiles(t, dir)
	if len(segs) != 2 {
		t.Fatalf("segments = %v; want two", segs)
	}
	objs := 6 * roundUp(size, c.segs.align)
	if got := blocksAt(t, filepath.Join(dir, dataName, segName, segs[0])); got > objs {
		t.Errorf("sealed segment has %d bytes allocated; its objects take %d", got, objs)
	}
}
