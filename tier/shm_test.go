package tier

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// queued reports whether bucket/name's promotion is queued or running.
func queued(c *Cache, bucket, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entryLocked(indexKey(bucket, name))
	return e != nil && e.promoting
}

func TestPromoteAfterHits(t *testing.T) {
	env := newGCSEnv(t)
	shm := shmDir(t)
	cfg := env.config(t.TempDir())
	cfg.ShmDir = shm
	c := openCache(t, cfg)
	hooks := installHooks(c, nil)
	data := pattern(1, 300<<10)
	gen := env.put(t, "obj", data)
	o := obj("bkt", "obj")

	h1 := openHandle(t, c, o, data, Disk) // a miss: the first Open
	defer h1.Close()
	gets := env.srv.MediaGETs()
	if queued(c, "bkt", "obj") {
		t.Fatalf("promotion queued after one Open; want it after %d", DefaultPromoteHits)
	}
	h2 := openHandle(t, c, o, data, Disk) // the second Open queues it, without waiting
	h2.Close()
	if err := hooks.awaitPromoted(t, "bkt", "obj"); err != nil {
		t.Fatalf("background promotion: %v", err)
	}
	if got := tierOf(c, "bkt", "obj"); got != Shm {
		t.Fatalf("tier after promotion = %s; want shm", got)
	}
	if !h1.Stale() {
		t.Errorf("disk handle not stale after promotion; mmapstore would never re-map onto shm")
	}
	checkHandle(t, h1, data) // a stale handle stays readable
	h3 := openHandle(t, c, o, data, Shm)
	defer h3.Close()
	if want := shmPath(c, "bkt", "obj", gen); h3.Path() != want || !strings.HasPrefix(want, shm+"/") {
		t.Errorf("Path() = %s; want %s", h3.Path(), want)
	}
	if h3.Stale() {
		t.Errorf("fresh shm handle is stale")
	}
	all := c.Stats()
	st, sh := statsOf(c)
	if sh.Promotions != 1 || sh.Entries != 1 || sh.Hits != 1 || all.Hits() != 2 || all.Misses() != 1 {
		t.Errorf("Stats() = %+v; want 1 promotion, 1 shm entry, 1 shm hit of 2 hits, 1 miss", all)
	}
	if st.Hits != 1 || sh.Misses != 2 || sh.HitRatio != 1.0/3 {
		t.Errorf("hits by tier: disk %d, shm %d of %d; want 1, 1 of 3", st.Hits, sh.Hits, sh.Hits+sh.Misses)
	}
	if want := roundUp(int64(len(data)), c.hot.bsize); sh.UsedBytes != want || sh.InUseBytes != want {
		t.Errorf("shm UsedBytes, InUseBytes = %d, %d; want %d", sh.UsedBytes, sh.InUseBytes, want)
	}
	if calls, after := env.dl.calls.Load(), env.srv.MediaGETs(); calls != 1 || after != gets {
		t.Errorf("downloads, media GETs = %d, %d; want 1, %d (promotion reads the disk copy)", calls, after, gets)
	}
	checkInvariants(t, c)
}

func TestShmDefaults(t *testing.T) {
	env := newDirEnv(t)
	cfg := env.config(t.TempDir(), 0)
	cfg.ShmDir = shmDir(t)
	c := openCache(t, cfg)
	fsi, err := statFS(cfg.ShmDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, sh := statsOf(c); sh.MaxBytes != budgetOf(fsi, 0.25) {
		t.Errorf("shm MaxBytes = %d; want a quarter of %d", sh.MaxBytes, fsi.size)
	}
	// The shm directory is locked too.
	other := env.config(t.TempDir(), 0)
	other.ShmDir = cfg.ShmDir
	if _, err := Open(context.Background(), other); !errors.Is(err, ErrLocked) {
		t.Errorf("second cache on the same shm dir = %v; want ErrLocked", err)
	}
}

func TestPromoteWindow(t *testing.T) {
	const window = 10 * time.Minute
	tests := []struct {
		name  string
		hits  int
		opens []time.Duration // since the first
		want  int             // index of the Open that promotes; -1: none
	}{
		{"two within the window", 2, []time.Duration{0, 9 * time.Minute}, 1},
		{"two apart", 2, []time.Duration{0, 11 * time.Minute}, -1},
		{"a new window starts", 2, []time.Duration{0, 11 * time.Minute, 12 * time.Minute}, 2},
		{"three, window restarted", 3, []time.Duration{0, 5 * time.Minute, 11 * time.Minute, 12 * time.Minute, 13 * time.Minute}, 4},
		{"one", 1, []time.Duration{0}, 0},
		{"disabled", -1, []time.Duration{0, 0, 0}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e entry
			base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
			got := -1
			for i, d := range tt.opens {
				if e.countOpen(base+int64(d), tt.hits, window) {
					got = i
					break
				}
			}
			if got != tt.want {
				t.Errorf("promoting Open = %d; want %d", got, tt.want)
			}
		})
	}
}

func TestPromoteDemotePinHot(t *testing.T) {
	env := newDirEnv(t)
	cfg := env.shmConfig(t.TempDir(), shmDir(t), 64<<20, 64<<20)
	cfg.PromoteHits = -1 // explicit promotion only
	c := openCache(t, cfg)
	ctx := context.Background()
	data := map[string][]byte{}
	for i, name := range []string{"p/a", "p/b", "q/c"} {
		data[name] = pattern(i, 10000+i)
		env.put(t, "bkt", name, data[name])
		openRead(t, c, obj("bkt", name), data[name])
	}
	tiers := func() []string {
		var out []string
		for _, e := range c.Entries("bkt", "") {
			out = append(out, e.Attrs.Name+":"+string(e.Tier))
		}
		return out
	}
	expect := func(step string, n int, err error, wantN int, want ...string) {
		t.Helper()
		if err != nil || n != wantN {
			t.Fatalf("%s = %d, %v; want %d, nil", step, n, err, wantN)
		}
		if got := tiers(); !slices.Equal(got, want) {
			t.Fatalf("after %s: tiers %q; want %q", step, got, want)
		}
	}
	n, err := c.Promote(ctx, "bkt", "p/")
	expect("Promote(p/)", n, err, 2, "p/a:shm", "p/b:shm", "q/c:disk")
	n, err = c.Promote(ctx, "bkt", "p/")
	expect("Promote(p/) again", n, err, 0, "p/a:shm", "p/b:shm", "q/c:disk")
	res, err := c.Demote(ctx, "bkt", "p/a")
	expect("Demote(p/a)", res.Evicted, err, 1, "p/a:disk", "p/b:shm", "q/c:disk")
	if files := shmFiles(t, c.hot.lay.root); len(files) != 1 {
		t.Errorf("shm files after Demote = %q; want 1", files)
	}
	n, err = c.PinHot(ctx, "bkt", "p/")
	expect("PinHot(p/)", n, err, 2, "p/a:shm", "p/b:shm", "q/c:disk")
	if e, _ := c.Lookup("bkt", "p/a"); !e.Pinned || !e.PinnedHot || e.ShmBlocks == 0 {
		t.Errorf("Lookup(p/a) = %+v; want pinned, pinned hot, with shm blocks", e)
	}
	res, err = c.Demote(ctx, "bkt", "p/")
	expect("Demote(p/) of hot pins", res.Skipped, err, 2, "p/a:shm", "p/b:shm", "q/c:disk")
	if _, sh := statsOf(c); sh.PinnedBytes != sh.UsedBytes || sh.PinnedBytes == 0 {
		t.Errorf("shm PinnedBytes = %d; want all of UsedBytes %d", sh.PinnedBytes, sh.UsedBytes)
	}
	n, err = c.Unpin(ctx, "bkt", "p/")
	expect("Unpin(p/)", n, err, 2, "p/a:shm", "p/b:shm", "q/c:disk")
	res, err = c.Demote(ctx, "bkt", "")
	expect("Demote(all)", res.Evicted, err, 2, "p/a:disk", "p/b:disk", "q/c:disk")
	_, sh := statsOf(c)
	if sh.Promotions != 3 || sh.Evictions != 3 || sh.UsedBytes != 0 || sh.PinnedBytes != 0 {
		t.Errorf("shm stats = %+v; want 3 promotions, 3 demotions, nothing left in shm", sh)
	}
	for name, want := range data {
		openRead(t, c, obj("bkt", name), want)
	}
	checkInvariants(t, c)

}

func TestNoShmTier(t *testing.T) {
	env := newDirEnv(t)
	ctx := context.Background()
	disk := openCache(t, env.config(t.TempDir(), 1<<20))
	if _, err := disk.Promote(ctx, "bkt", ""); !errors.Is(err, ErrNoShm) {
		t.Errorf("Promote without a shm tier = %v; want ErrNoShm", err)
	}
	if _, err := disk.PinHot(ctx, "bkt", ""); !errors.Is(err, ErrNoShm) {
		t.Errorf("PinHot without a shm tier = %v; want ErrNoShm", err)
	}
	if _, err := disk.Demote(ctx, "bkt", ""); !errors.Is(err, ErrNoShm) {
		t.Errorf("Demote without a shm tier = %v; want ErrNoShm", err)
	}
}

func TestShmOnly(t *testing.T) {
	env := newDirEnv(t)
	shm := shmDir(t)
	cfg := env.config("", 0)
	cfg.ShmDir = shm
	c, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(5, 200<<10)
	env.put(t, "bkt", "obj", data)
	h := openHandle(t, c, obj("bkt", "obj"), data, Shm)
	if !strings.HasPrefix(h.Path(), filepath.Join(shm, dataName)+"/") {
		t.Errorf("Path() = %s; want a file under %s/data", h.Path(), shm)
	}
	h.Close()
	if fi, err := os.Stat(filepath.Join(shm, indexName)); err != nil || !fi.IsDir() {
		t.Errorf("index in %s/index: %v", shm, err)
	}
	fsi, err := statFS(shm)
	if err != nil {
		t.Fatal(err)
	}
	all := c.Stats()
	st := all.Base()
	_, hasHot := all.Shm()
	if st.Name != string(Shm) || st.Entries != 1 || st.MaxBytes != budgetOf(fsi, 0.25) || hasHot {
		t.Errorf("Stats() = %+v; want tier shm, 1 entry, a quarter of the tmpfs, no hot tier", st)
	}
	if e, _ := c.Lookup("bkt", "obj"); e.Tier != Shm {
		t.Errorf("Entry.Tier = %s; want shm", e.Tier)
	}
	ctx := context.Background()
	if n, err := c.Promote(ctx, "bkt", ""); n != 0 || err != nil {
		t.Errorf("Promote in shm-only mode = %d, %v; want 0, nil", n, err)
	}
	if n, err := c.PinHot(ctx, "bkt", ""); n != 1 || err != nil {
		t.Errorf("PinHot in shm-only mode = %d, %v; want 1 (a pin), nil", n, err)
	}
	if res, err := c.Demote(ctx, "bkt", ""); res != (EvictResult{}) || err != nil {
		t.Errorf("Demote in shm-only mode = %+v, %v; want nothing, nil", res, err)
	}
	checkInvariants(t, c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := openCache(t, cfg) // survives a restart (not a reboot)
	openRead(t, c2, obj("bkt", "obj"), data)
	if n := env.dl.calls.Load(); n != 1 {
		t.Errorf("downloads = %d; want 1", n)
	}
}

func TestShmRestartReadopts(t *testing.T) {
	env := newDirEnv(t)
	dir, shm := t.TempDir(), shmDir(t)
	cfg := env.shmConfig(dir, shm, 64<<20, 64<<20)
	cfg.PromoteHits = -1
	c, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := map[string][]byte{}
	gens := map[string]int64{}
	for i, name := range []string{"keep", "short", "lost", "cold", "hot"} {
		data[name] = pattern(i, 20000+i)
		gens[name] = env.put(t, "bkt", name, data[name]).Generation
		openRead(t, c, obj("bkt", name), data[name])
	}
	for _, name := range []string{"keep", "short", "lost"} {
		if n, err := c.Promote(ctx, "bkt", name); n != 1 || err != nil {
			t.Fatalf("Promote(%s) = %d, %v", name, n, err)
		}
	}
	if _, err := c.PinHot(ctx, "bkt", "hot"); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Damage the shm tier while the cache is closed.
	if err := os.Truncate(shmPath(c, "bkt", "short", gens["short"]), 100); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(shmPath(c, "bkt", "lost", gens["lost"])); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, shmPath(c, "bkt", "cold", gens["cold"]), data["cold"]) // right size, but not promoted
	mustWrite(t, shmPath(c, "bkt", "gone", 1), []byte("orphan"))
	mustWrite(t, filepath.Join(shm, dataName, tmpName, "1.tmp"), []byte("half"))

	c2 := openCache(t, cfg)
	want := []string{"cold:disk", "hot:shm", "keep:shm", "lost:disk", "short:disk"}
	var got []string
	for _, e := range c2.Entries("bkt", "") {
		got = append(got, e.Attrs.Name+":"+string(e.Tier))
	}
	if !slices.Equal(got, want) {
		t.Errorf("tiers after restart = %q; want %q", got, want)
	}
	wantFiles := []string{rel(t, shm, shmPath(c2, "bkt", "hot", gens["hot"])), rel(t, shm, shmPath(c2, "bkt", "keep", gens["keep"]))}
	if files := dataFiles(t, shm); !slices.Equal(sorted(files), sorted(wantFiles)) {
		t.Errorf("shm files after restart = %q; want %q", files, wantFiles)
	}
	for name, b := range data {
		openRead(t, c2, obj("bkt", name), b)
	}
	if _, st := statsOf(c2); st.Promotions != 0 || env.dl.calls.Load() != 5 {
		t.Errorf("promotions, downloads = %d, %d; want 0, 5 (all adopted)", st.Promotions, env.dl.calls.Load())
	}
	checkInvariants(t, c2)
}

func TestShmRebootRestoresHotPins(t *testing.T) {
	env := newDirEnv(t)
	dir, shm := t.TempDir(), shmDir(t)
	cfg := env.shmConfig(dir, shm, 64<<20, 64<<20)
	cfg.PromoteHits = -1
	c := openCache(t, cfg)
	ctx := context.Background()
	for i, name := range []string{"cold", "hot", "warm"} {
		env.put(t, "bkt", name, pattern(i, 20000+i))
		openRead(t, c, obj("bkt", name), pattern(i, 20000+i))
	}
	if _, err := c.Promote(ctx, "bkt", "warm"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PinHot(ctx, "bkt", "hot"); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// A reboot clears the tmpfs: everything is on disk again, and the hot
	// pin is promoted again in the background.
	if err := os.RemoveAll(shm); err != nil {
		t.Fatal(err)
	}
	hooks, h := newHooks(nil, nil)
	cfg.hooks = h
	c2 := openCache(t, cfg)
	if err := hooks.awaitPromoted(t, "bkt", "hot"); err != nil {
		t.Fatalf("restoring the hot pin: %v", err)
	}
	var got []string
	for _, e := range c2.Entries("bkt", "") {
		got = append(got, e.Attrs.Name+":"+string(e.Tier))
	}
	if want := []string{"cold:disk", "hot:shm", "warm:disk"}; !slices.Equal(got, want) {
		t.Errorf("tiers after a reboot = %q; want %q", got, want)
	}
	if n := env.dl.calls.Load(); n != 3 {
		t.Errorf("downloads = %d; want 3", n)
	}
	checkInvariants(t, c2)
}

// sorted returns a sorted copy of s.
func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestShmBudgetNeverEvictsInUse(t *testing.T) {
	env := newDirEnv(t)
	const size = 64 << 10
	cfg := env.shmConfig(t.TempDir(), shmDir(t), 64<<20, 2*size)
	cfg.PromoteHits = -1
	c := openCache(t, cfg)
	ctx := context.Background()
	data := map[string][]byte{}
	for i, name := range []string{"a", "b", "c", "d"} {
		data[name] = pattern(i, size)
		env.put(t, "bkt", name, data[name])
		openRead(t, c, obj("bkt", name), data[name])
	}
	promote := func(name string, want int) error {
		t.Helper()
		n, err := c.Promote(ctx, "bkt", name)
		if n != want {
			t.Fatalf("Promote(%s) = %d, %v; want %d", name, n, err, want)
		}
		return err
	}
	promote("a", 1)
	promote("b", 1)
	ha := openHandle(t, c, obj("bkt", "a"), data["a"], Shm) // a in use
	promote("c", 1)                                         // demotes b, the unused one
	if got := []Kind{tierOf(c, "bkt", "a"), tierOf(c, "bkt", "b"), tierOf(c, "bkt", "c")}; !slices.Equal(got, []Kind{Shm, Disk, Shm}) {
		t.Fatalf("tiers of a, b, c = %q; want shm, disk, shm", got)
	}
	hc := openHandle(t, c, obj("bkt", "c"), data["c"], Shm)
	defer hc.Close()
	if err := promote("d", 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Promote(d) with every shm copy in use = %v; want ErrNoSpace", err)
	}
	_, sh := statsOf(c)
	if sh.PromotionsSkipped != 1 || sh.InUseBytes != 2*size || sh.UsedBytes > sh.MaxBytes {
		t.Errorf("shm stats = %+v; want 1 skipped promotion, %d bytes in use, within budget", sh, 2*size)
	}
	openRead(t, c, obj("bkt", "d"), data["d"]) // served from disk
	ha.Close()
	promote("d", 1) // a is free now, and least recently used
	if tierOf(c, "bkt", "a") != Disk || tierOf(c, "bkt", "d") != Shm {
		t.Errorf("after a was closed: a %s, d %s; want disk, shm", tierOf(c, "bkt", "a"), tierOf(c, "bkt", "d"))
	}
	checkInvariants(t, c)
}

func TestShmFullSkipsPromotion(t *testing.T) {
	mnt := mountTmpfs(t, "4m")
	env := newDirEnv(t)
	shm := filepath.Join(mnt, "shm")
	c := openCache(t, env.shmConfig(t.TempDir(), shm, 64<<20, 64<<20)) // budget far above the tmpfs
	const size = 1 << 20
	filler := filepath.Join(mnt, "filler")
	// Someone else fills the tmpfs while the promotion runs.
	hooks := installHooks(c, func(ctx context.Context, key string) error {
		if _, err := os.Stat(filler); err == nil {
			return nil
		}
		var st unix.Statfs_t
		if err := unix.Statfs(mnt, &st); err != nil {
			return err
		}
		return os.WriteFile(filler, make([]byte, int64(st.Bavail)*st.Bsize-size-size/2), 0o644)
	})
	ctx := context.Background()
	a, b := pattern(1, size), pattern(2, size)
	env.put(t, "bkt", "a", a)
	env.put(t, "bkt", "b", b)
	openRead(t, c, obj("bkt", "a"), a)
	n, err := c.Promote(ctx, "bkt", "a")
	if n != 0 || !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Promote with the tmpfs full = %d, %v; want 0, ErrNoSpace and ENOSPC", n, err)
	}
	// Served from disk. This second Open queues a background promotion,
	// which is skipped the same way.
	h := openHandle(t, c, obj("bkt", "a"), a, Disk)
	h.Close()
	if err := hooks.awaitPromoted(t, "bkt", "a"); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("background promotion with the tmpfs full = %v; want ErrNoSpace", err)
	}
	openRead(t, c, obj("bkt", "b"), b)
	openRead(t, c, obj("bkt", "b"), b)
	if err := hooks.awaitPromoted(t, "bkt", "b"); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("background promotion with the tmpfs full = %v; want ErrNoSpace", err)
	}
	if files := tempFiles(t, shm); len(files) != 0 {
		t.Errorf("temp files left in shm: %q", files)
	}
	if files := shmFiles(t, shm); len(files) != 0 {
		t.Errorf("shm files = %q; want none", files)
	}
	_, sh := statsOf(c)
	if sh.PromotionsSkipped != 3 || sh.UsedBytes != 0 || sh.ReservedBytes != 0 {
		t.Errorf("shm stats = %+v; want 3 skipped promotions, nothing used or reserved in shm", sh)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c.hooks.Store(nil)
	if n, err := c.Promote(ctx, "bkt", ""); n != 2 || err != nil {
		t.Errorf("Promote with room again = %d, %v; want 2, nil", n, err)
	}
	checkInvariants(t, c)
}

// TestDamagedShmCopyNotAdoptedAfterCrash: a shm copy written to behind the
// cache's back is dropped while a reader holds it, so its file stays; the
// record's in-shm flag is cleared at once, not at the next flush, so a
// crash before that flush (emulated: the pending flush is discarded before
// Close) does not have the next start adopt the damaged file and serve it
// (a start checks a shm file's size only).
func TestDamagedShmCopyNotAdoptedAfterCrash(t *testing.T) {
	env := newDirEnv(t)
	shm := shmDir(t)
	dir := t.TempDir()
	cfg := env.shmConfig(dir, shm, 64<<20, 64<<20)
	c, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	hooks := installHooks(c, nil)
	data := pattern(1, 100<<10)
	a := env.put(t, "bkt", "obj", data)
	o := obj("bkt", "obj")
	promoteByHits(t, c, hooks, "obj", data)
	if err := c.flushAccess(); err != nil { // the periodic flush: the record says inShm
		t.Fatal(err)
	}
	h := openHandle(t, c, o, data, Shm) // a reader maps the shm copy
	p := shmPath(c, "bkt", "obj", a.Generation)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("garbage!"), 0); err != nil { // same size, other bytes
		t.Fatal(err)
	}
	f.Close()
	hooks.awaitDrop(t, p)
	// Crash before the next flush: the cleared in-shm flag is never written.
	c.mu.Lock()
	for _, e := range c.dirty {
		e.dirty = false
	}
	c.dirty = nil
	c.mu.Unlock()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	c2 := openCache(t, cfg)
	h2, err := c2.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	got := make([]byte, len(data))
	if _, err := h2.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("after restart the damaged shm copy is served (tier %s)", h2.Tier())
	}
}
