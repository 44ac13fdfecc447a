package tier

import (
	"context"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// TestHoldAndAdopt: held bytes count in the budget (fills evict around
// them, never them), a hold that does not fit is ErrNoSpace with nothing
// evicted, and an adopted file is the cached copy of its generation,
// served with no download.
func TestHoldAndAdopt(t *testing.T) {
	ctx := context.Background()
	e := newDirEnv(t)
	const size = 64 << 10
	dir := t.TempDir()
	c := openCache(t, e.config(filepath.Join(dir, "cache"), 4*size))
	for i := range 3 {
		a := e.put(t, "b", "d/"+string(rune('a'+i)), pattern(i, size))
		openRead(t, c, a.Object, pattern(i, size))
	}
	h, err := c.Hold(ctx, 2*size, obj("b", "ck/"))
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	base, _ := statsOf(c)
	if base.DirtyBytes != 2*size || base.UsedBytes+base.DirtyBytes > base.MaxBytes || base.Evictions != 1 {
		t.Fatalf("after Hold: %+v; want 2 objects' dirty bytes, one eviction", base)
	}
	// More than the budget minus what is held: ErrNoSpace, nothing evicted.
	if _, err := c.Hold(ctx, 3*size, obj("b", "ck2/")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a second Hold = %v; want ErrNoSpace", err)
	}
	if b2, _ := statsOf(c); b2.Evictions != 1 {
		t.Fatalf("a failed Hold evicted: %+v", b2)
	}
	// A fill evicts the other copies, never the held bytes.
	a := e.put(t, "b", "d/z", pattern(9, size))
	openRead(t, c, a.Object, pattern(9, size))
	if b2, _ := statsOf(c); b2.DirtyBytes != 2*size || b2.UsedBytes+b2.DirtyBytes > b2.MaxBytes {
		t.Fatalf("after a fill: %+v", b2)
	}
	checkInvariants(t, c)

	// Adopt a file of the cache's filesystem as the copy of a generation.
	data := pattern(7, size)
	src := filepath.Join(dir, "cache", "staged")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ck := e.put(t, "b", "ck/model.pt", data) // the generation "uploaded"
	ck.CRC32C, ck.HasCRC32C = crc32.Checksum(data, castagnoli), true
	fetched := e.dl.calls.Load()
	if err := c.Adopt(ctx, ck, src, h); err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if _, err := os.Stat(src); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the adopted file is still at its path: %v", err)
	}
	openRead(t, c, ck.Object, data)
	if n := e.dl.calls.Load(); n != fetched {
		t.Errorf("reading the adopted copy downloaded %d times", n-fetched)
	}
	if h.Bytes() != size {
		t.Errorf("after adopting one object the hold keeps %d bytes; want %d", h.Bytes(), size)
	}
	h.Release()
	h.Release()
	b3, _ := statsOf(c)
	if b3.DirtyBytes != 0 {
		t.Errorf("after Release: %d dirty bytes", b3.DirtyBytes)
	}
	checkInvariants(t, c)
	// A file of the wrong size is refused and left where it was.
	bad := filepath.Join(dir, "cache", "bad")
	if err := os.WriteFile(bad, data[:10], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Adopt(ctx, ck, bad, nil); err == nil {
		t.Error("Adopt of a file of the wrong size succeeded")
	}
	if _, err := os.Stat(bad); err != nil {
		t.Errorf("a refused file was moved: %v", err)
	}
}

// TestAdoptOfCachedGeneration: adopting a file of a generation a reader
// cached first removes the file and leaves the cached copy in place (it is
// not renamed over the copy's file, which dropping the copy it replaced
// would then delete); the next Open is a hit.
func TestAdoptOfCachedGeneration(t *testing.T) {
	ctx := context.Background()
	e := newDirEnv(t)
	dir := t.TempDir()
	c := openCache(t, e.config(filepath.Join(dir, "cache"), 1<<20))
	data := pattern(7, 64<<10)
	a := e.put(t, "b", "ck/model.pt", data)
	openRead(t, c, a.Object, data) // a reader cached this generation
	a.CRC32C, a.HasCRC32C = crc32.Checksum(data, castagnoli), true
	staged := filepath.Join(dir, "cache", "staged")
	if err := os.WriteFile(staged, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Adopt(ctx, a, staged, nil); err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if _, err := os.Stat(staged); !os.IsNotExist(err) {
		t.Errorf("the file to adopt is still there: %v", err)
	}
	if _, err := os.Stat(c.base.path(idOf(a.Bucket, a.Name, a.Generation))); err != nil {
		t.Errorf("after Adopt the cached copy's file is gone: %v", err)
	}
	calls := e.dl.calls.Load()
	openRead(t, c, a.Object, data)
	if n := e.dl.calls.Load() - calls; n != 0 {
		t.Errorf("Open after Adopt downloaded %d times; want 0", n)
	}
	checkInvariants(t, c)
}
