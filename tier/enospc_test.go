package tier

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/cacheagent/cacheagent/object"
	"golang.org/x/sys/unix"
)

// mountTmpfs mounts a tmpfs of the given size (like "8m") on a new
// directory and unmounts it after the test (after later cleanups, such as
// closing a cache inside it). Without the privilege to mount it skips the
// test, unless $CI is "true".
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount tmpfs: %v", err)
		}
		t.Skipf("mount tmpfs: %v (needs root)", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// TestFilesystemFull fills a filesystem smaller than the budget, with
// objects in a file each and packed into segments: eviction makes room, a
// fill with everything held fails cleanly, and a restart finds the index
// consistent with the files.
func TestFilesystemFull(t *testing.T) {
	for _, tc := range []struct {
		name      string
		packBelow int64
		size, n   int
	}{{"files", -1, 1 << 20, 12}, {"packed", 1 << 20, 512 << 10, 24}} {
		t.Run(tc.name, func(t *testing.T) { testFilesystemFull(t, tc.packBelow, tc.size, tc.n) })
	}
}

func testFilesystemFull(t *testing.T, packBelow int64, size, n int) {
	mnt := mountTmpfs(t, "8m")
	env := newDirEnv(t)
	dir := filepath.Join(mnt, "cache")
	cfg := env.config(dir, 64<<20) // budget far above the filesystem
	cfg.PackBelow = packBelow
	c := openCache(t, cfg)
	ctx := context.Background()
	for i := range n {
		name := fmt.Sprintf("o%02d", i)
		env.put(t, "bkt", name, pattern(i, size))
		openRead(t, c, obj("bkt", name), pattern(i, size))
	}
	st := c.Stats().Base()
	if st.Evictions == 0 || st.Entries+st.Evictions != int64(n) {
		t.Errorf("Stats() = %+v; want evictions to have made room for all %d objects", st, n)
	}
	checkIndexMatchesFiles(t, c)

	// With every cached object open nothing can be evicted.
	var hs []*Handle
	for _, e := range c.Entries("bkt", "") {
		h, err := c.Open(ctx, e.Attrs.Object)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	env.put(t, "bkt", "more", pattern(99, size))
	_, err := c.Open(ctx, obj("bkt", "more"))
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Open with a full filesystem = %v; want ErrNoSpace and ENOSPC", err)
	}
	for _, h := range hs {
		h.Close()
	}
	// An object larger than the filesystem fails cleanly, evicting nothing.
	env.put(t, "bkt", "huge", pattern(100, 10<<20))
	before := c.Entries("bkt", "")
	_, err = c.Open(ctx, obj("bkt", "huge"))
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Open(huge) = %v; want ErrNoSpace and ENOSPC", err)
	}
	if after := c.Entries("bkt", ""); !reflect.DeepEqual(after, before) {
		t.Errorf("a hopeless fill evicted entries")
	}
	if st := c.Stats().Base(); st.ReservedBytes != 0 {
		t.Errorf("ReservedBytes = %d after failed fills; want 0", st.ReservedBytes)
	}
	checkIndexMatchesFiles(t, c)
	checkInvariants(t, c)

	// The index on the full filesystem is consistent after a restart.
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c2 := openCache(t, cfg)
	if after := c2.Entries("bkt", ""); len(after) != len(before) {
		t.Errorf("entries after restart = %d; want %d", len(after), len(before))
	}
	checkIndexMatchesFiles(t, c2)
}

// checkIndexMatchesFiles checks that the data files are exactly the cached
// entries' and that no temp file is left.
func checkIndexMatchesFiles(t *testing.T, c *Cache) {
	t.Helper()
	want := map[string]bool{}
	c.mu.Lock()
	for _, e := range c.entries {
		want[rel(t, c.base.lay.root, e.path())] = true // a packed object's: its segment
	}
	for _, cs := range c.coldSets() {
		cs.each(func(_ uint64, _, v []byte) bool {
			r, _ := decodeRecord(v)
			want[rel(t, c.base.lay.root, c.segs.get(r.seg).path)] = true
			return true
		})
	}
	c.mu.Unlock()
	c.segs.mu.Lock()
	if c.segs.active != nil { // it may hold nothing live
		want[rel(t, c.base.lay.root, c.segs.active.path)] = true
	}
	c.segs.mu.Unlock()
	got := map[string]bool{}
	for _, f := range dataFiles(t, c.base.lay.root) {
		got[f] = true
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("data files %v; want the entries' %v", got, want)
	}
}

func TestDownloadENOSPCRetriedOnce(t *testing.T) {
	tests := []struct {
		name     string
		failures int64 // downloads that fail with ENOSPC
		wantErr  bool
	}{
		{"transient", 1, false},
		{"persistent", 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newDirEnv(t)
			c := openCache(t, env.config(t.TempDir(), 1<<20))
			env.put(t, "bkt", "old", pattern(1, 5000))
			openRead(t, c, obj("bkt", "old"), pattern(1, 5000))
			env.put(t, "bkt", "obj", pattern(2, 5000))
			var n int64
			env.dl.before = func(ctx context.Context, a object.Attrs, u *object.Urgency) error {
				if a.Name == "obj" && n < tt.failures {
					n++
					return fmt.Errorf("write: %w", syscall.ENOSPC)
				}
				return nil
			}
			h, err := c.Open(context.Background(), obj("bkt", "obj"))
			if tt.wantErr {
				if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("Open = %v; want ErrNoSpace and ENOSPC", err)
				}
			} else {
				if err != nil {
					t.Fatalf("Open = %v; want success after one retry", err)
				}
				checkHandle(t, h, pattern(2, 5000))
				h.Close()
			}
			if got := env.dl.calls.Load(); got != 3 {
				t.Errorf("downloads = %d; want 3 (old, obj, obj again)", got)
			}
			checkIndexMatchesFiles(t, c)
			checkInvariants(t, c)
		})
	}
}

// TestOnNoSpaceReclaims: a budget full of copies in use fails a fill with
// ErrNoSpace, unless a callback registered with OnNoSpace releases one of
// them; it is called once per fill, and not after it is removed.
func TestOnNoSpaceReclaims(t *testing.T) {
	e := newDirEnv(t)
	o := e.putObjects(t, "a", "b", "c", "d")
	c := openCache(t, e.config(t.TempDir(), 2*objSize))
	ctx := context.Background()
	ha, err := c.Open(ctx, o[0])
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Close()
	hb, err := c.Open(ctx, o[1])
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	remove := c.OnNoSpace(func() {
		calls++
		if hb != nil {
			hb.Close()
			hb = nil
		}
	})
	hc, err := c.Open(ctx, o[2])
	if err != nil {
		t.Fatalf("Open(c) with b held idle: %v; want b released for it", err)
	}
	defer hc.Close()
	if calls != 1 {
		t.Errorf("%d calls; want 1", calls)
	}
	remove()
	if _, err := c.Open(ctx, o[3]); !errors.Is(err, ErrNoSpace) || calls != 1 {
		t.Errorf("Open(d) with a and c in use: %v after %d calls; want ErrNoSpace, no call", err, calls)
	}
	checkInvariants(t, c)
}
