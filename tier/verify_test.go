package tier

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// behindWatcher runs fn on a hard link to the data file at p in the
// tier's temp directory, which the cache does not watch, and restores the
// file's modification time after: the file keeps its inode and mtime, so
// only its size or bytes tell (as with bit rot).
func behindWatcher(t testing.TB, p string, fn func(link string) error) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(filepath.Dir(filepath.Dir(p)), tmpName, "behind-watcher-test")
	if err := os.Link(p, link); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(link)
	if err := fn(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(link, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// holdWatcher blocks c's watcher until the returned release is called (or
// the test ends): it writes a foreign file into dir, one of the watched
// data directories, and holds the watcher in its hook for that file's
// event. Events that arrive meanwhile queue behind it, so a test can change
// files and verify them before the watcher looks; the hold is released
// before the cache closes.
func holdWatcher(t testing.TB, c *Cache, dir string) (release func()) {
	t.Helper()
	gate := filepath.Join(dir, "hold-watcher-gate")
	entered, gateOpen := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	old := c.hooks.Load()
	h := &testHooks{}
	if old != nil {
		*h = *old
	}
	prev := h.watched
	h.watched = func(path string, dropped bool) {
		if path == gate {
			once.Do(func() {
				close(entered)
				<-gateOpen
			})
		}
		if prev != nil {
			prev(path, dropped)
		}
	}
	c.hooks.Store(h)
	release = func() { releaseOnce.Do(func() { close(gateOpen); c.hooks.Store(old) }) }
	t.Cleanup(release) // before the cache's Close, registered earlier
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(hookWait):
		t.Fatal("the watcher never handled the gate file's event")
	}
	return release
}

// flipByte flips the byte at off of the data file at p behind the cache's
// back (see behindWatcher).
func flipByte(t testing.TB, p string, off int64) {
	t.Helper()
	behindWatcher(t, p, func(link string) error {
		f, err := os.OpenFile(link, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, off); err != nil {
			return err
		}
		b[0] ^= 0xff
		_, err = f.WriteAt(b, off)
		return err
	})
}

// readAll returns the bytes of h.
func readAll(t testing.TB, h *Handle) []byte {
	t.Helper()
	b := make([]byte, h.Size())
	if _, err := h.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// verifyEnv is a two-tier cache over the GCS emulator (objects with
// CRC32Cs) with objects a, b and c cached, a also in shm.
type verifyEnv struct {
	env  *gcsEnv
	c    *Cache
	data map[string][]byte
}

func newVerifyEnv(t *testing.T) *verifyEnv {
	t.Helper()
	env := newGCSEnv(t)
	cfg := env.config(t.TempDir())
	cfg.ShmDir, cfg.PromoteHits = shmDir(t), -1
	v := &verifyEnv{env: env, c: openCache(t, cfg), data: make(map[string][]byte)}
	for i, name := range []string{"a", "b", "c"} {
		v.data[name] = pattern(i+1, 300<<10+i)
		env.put(t, name, v.data[name])
		openRead(t, v.c, obj("bkt", name), v.data[name])
	}
	if n, err := v.c.PromoteObjects(context.Background(), []object.Object{obj("bkt", "a")}); err != nil || n != 1 {
		t.Fatalf("PromoteObjects(a) = %d, %v; want 1, nil", n, err)
	}
	return v
}

// path returns the file of name's copy in tier k.
func (v *verifyEnv) path(t testing.TB, name string, k Kind) string {
	t.Helper()
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	e := v.c.entryLocked(indexKey("bkt", name))
	if e == nil {
		t.Fatalf("%s is not cached", name)
	}
	if k == Shm {
		e = e.hot
	}
	return e.st.path(e.id)
}

func TestVerifyDropsCorruptCopies(t *testing.T) {
	v := newVerifyEnv(t)
	c, ctx := v.c, context.Background()
	release := holdWatcher(t, c, filepath.Dir(v.path(t, "b", Disk)))
	defer release()
	flipByte(t, v.path(t, "a", Shm), 1000)
	flipByte(t, v.path(t, "b", Disk), 200<<10)
	calls := v.env.dl.calls.Load()

	res, err := c.Verify(ctx, VerifyOptions{})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	size := int64(2*len(v.data["a"]) + len(v.data["b"]) + len(v.data["c"]))
	if res.Objects != 3 || res.Copies != 4 || res.Verified != 2 || res.Corrupt != 2 || res.Bytes != size ||
		res.Unverifiable != 0 || res.Damaged != 0 || res.Skipped != 0 {
		t.Errorf("Verify = %+v; want 3 objects, 4 copies, 2 verified, 2 corrupt, %d bytes", res.Verify, size)
	}
	if len(res.Dropped) != 2 || res.Dropped[0].Object.Name != "a" || res.Dropped[0].Tier != Shm ||
		res.Dropped[1].Object.Name != "b" || res.Dropped[1].Tier != Disk {
		t.Errorf("Dropped = %+v; want a's shm copy, b's disk copy", res.Dropped)
	}
	base, shm := statsOf(c)
	if base.Corrupt != 1 || shm.Corrupt != 1 || base.Verified != 2 || shm.Verified != 0 ||
		base.VerifiedBytes+shm.VerifiedBytes != size || shm.VerifiedBytes != int64(len(v.data["a"])) {
		t.Errorf("stats: disk %+v, shm %+v; want one corrupt copy each, 2 verified on disk", base, shm)
	}
	checkInvariants(t, c)

	// a is served from its intact disk copy, b fetched again.
	if e, _ := c.Lookup("bkt", "a"); e.Tier != Disk {
		t.Errorf("a's tier after Verify = %s; want disk", e.Tier)
	}
	for _, name := range []string{"a", "b", "c"} {
		openRead(t, c, obj("bkt", name), v.data[name])
	}
	if got := v.env.dl.calls.Load() - calls; got != 1 {
		t.Errorf("downloads after Verify = %d; want 1 (b)", got)
	}
	res, err = c.Verify(ctx, VerifyOptions{})
	if err != nil || res.Corrupt != 0 || res.Verified != 3 {
		t.Errorf("second Verify = %+v, %v; want 3 verified, none corrupt", res.Verify, err)
	}
	checkInvariants(t, c)
}

func TestVerifyDoomsCopyInUse(t *testing.T) {
	v := newVerifyEnv(t)
	c, ctx := v.c, context.Background()
	h, err := c.Open(ctx, obj("bkt", "b"))
	if err != nil {
		t.Fatal(err)
	}
	p := h.Path()
	release := holdWatcher(t, c, filepath.Dir(p))
	defer release()
	flipByte(t, p, 5)
	res, err := c.Verify(ctx, VerifyOptions{Bucket: "bkt", Prefix: "b"})
	if err != nil || res.Objects != 1 || res.Corrupt != 1 {
		t.Fatalf("Verify(b) = %+v, %v; want 1 object, 1 corrupt", res.Verify, err)
	}
	if !h.Stale() {
		t.Error("handle on the corrupt copy is not stale")
	}
	// The reader keeps its file (and sees what it holds); it is pending.
	if got := readAll(t, h); bytes.Equal(got, v.data["b"]) || len(got) != len(v.data["b"]) {
		t.Error("handle on the dropped copy does not read its own (corrupt) file")
	}
	if base, _ := statsOf(c); base.PendingBytes == 0 {
		t.Error("no bytes pending deletion while the doomed copy is in use")
	}
	// A new Open (even of that exact generation) refetches intact bytes.
	gen := h.Attrs().Generation
	h2, err := c.Open(ctx, object.Object{Bucket: "bkt", Name: "b", Generation: gen})
	if err != nil {
		t.Fatal(err)
	}
	checkHandle(t, h2, v.data["b"])
	h2.Close()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	openRead(t, c, obj("bkt", "b"), v.data["b"])
	checkInvariants(t, c)
	if base, _ := statsOf(c); base.PendingBytes != 0 {
		t.Errorf("pending bytes after the last close = %d; want 0", base.PendingBytes)
	}
}

// TestVerifyDirSource: a source without CRC32Cs (a Dir) gets the CRC32C of
// each copy's bytes as filled recorded, so Verify catches a byte flipped
// later, and a truncated file is dropped as damaged.
func TestVerifyDirSource(t *testing.T) {
	e := newDirEnv(t)
	c := openCache(t, e.config(t.TempDir(), 0))
	data := pattern(7, 5000)
	e.put(t, "bkt", "x", data)
	e.put(t, "other", "y", data)
	openRead(t, c, obj("bkt", "x"), data)
	openRead(t, c, obj("other", "y"), data)
	res, err := c.Verify(context.Background(), VerifyOptions{Bucket: "bkt"})
	if err != nil || res.Objects != 1 || res.Unverifiable != 0 || res.Verified != 1 || res.Bytes != 5000 {
		t.Errorf("Verify(bkt) = %+v, %v; want 1 object verified, 5000 bytes", res.Verify, err)
	}
	if en, ok := c.Lookup("bkt", "x"); !ok || !en.Attrs.HasCRC32C || en.Attrs.CRC32C != crc32.Checksum(data, castagnoli) {
		t.Errorf("Lookup(bkt/x) = %+v; want the CRC32C of its bytes recorded", en.Attrs)
	}
	pathOf := func(bucket, name string) string {
		c.mu.Lock()
		defer c.mu.Unlock()
		x := c.entryLocked(indexKey(bucket, name))
		return x.st.path(x.id)
	}
	flipByte(t, pathOf("bkt", "x"), 100)
	res, err = c.Verify(context.Background(), VerifyOptions{Bucket: "bkt"})
	if err != nil || res.Corrupt != 1 || len(res.Dropped) != 1 {
		t.Errorf("Verify(bkt) after a flipped byte = %+v, %v; want 1 corrupt, dropped", res, err)
	}
	if base, _ := statsOf(c); base.Corrupt != 1 {
		t.Errorf("Corrupt = %d; want 1", base.Corrupt)
	}
	openRead(t, c, obj("bkt", "x"), data)
	// A file truncated behind the cache's back is dropped as damaged.
	p := pathOf("other", "y")
	release := holdWatcher(t, c, filepath.Dir(p))
	defer release()
	behindWatcher(t, p, func(link string) error { return os.Truncate(link, 10) })
	res, err = c.Verify(context.Background(), VerifyOptions{Bucket: "other"})
	if err != nil || res.Objects != 1 || res.Damaged != 1 || len(res.Dropped) != 1 {
		t.Errorf("Verify(other) = %+v, %v; want 1 object, 1 damaged", res, err)
	}
	if _, ok := c.Lookup("other", "y"); ok {
		t.Error("truncated copy still cached after Verify")
	}
	openRead(t, c, obj("other", "y"), data)
}

func TestVerifyStopsWithContext(t *testing.T) {
	v := newVerifyEnv(t)
	if _, err := v.c.Verify(context.Background(), VerifyOptions{Rate: -1}); err == nil {
		t.Error("Verify(rate -1) = nil error; want an error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := v.c.Verify(ctx, VerifyOptions{Progress: func(stats.Verify) { cancel() }})
	if !errors.Is(err, context.Canceled) || res.Objects != 1 {
		t.Errorf("Verify cancelled after one object = %+v, %v; want 1 object, context.Canceled", res.Verify, err)
	}
}

func TestPacer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const mib = 1 << 20
	p := newPacer(4*mib, t0)
	// Starting empty, each MiB at 4 MiB/s is owed a quarter second.
	steps := []struct {
		at   time.Duration
		n    int64
		want time.Duration
	}{
		{0, mib, 250 * time.Millisecond},
		{250 * time.Millisecond, mib, 250 * time.Millisecond},
		{500 * time.Millisecond, mib, 250 * time.Millisecond},
		// Caught up late: a second's worth at most is banked.
		{10 * time.Second, 4 * mib, 0},
		{10 * time.Second, mib, 250 * time.Millisecond},
		{10*time.Second + 250*time.Millisecond, 0, 0},
	}
	for i, s := range steps {
		if got := p.take(t0.Add(s.at), s.n); got != s.want {
			t.Errorf("step %d: take(%v, %d) = %v; want %v", i, s.at, s.n, got, s.want)
		}
	}
	if got := newPacer(0, t0).take(t0, 1<<40); got != 0 {
		t.Errorf("unlimited take = %v; want 0", got)
	}
	// A rate below one read's size still lets one read through per burst.
	p = newPacer(1000, t0)
	if got := p.take(t0.Add(time.Hour), mib); got != 0 {
		t.Errorf("slow pacer after an hour: take(1 MiB) = %v; want 0", got)
	}
}

// TestVerifyFrozenSparesRefetchedCopy: Verify reads a frozen object through
// a stand-in for its record. If the object is evicted (its region punched)
// and filled again at the same generation during the read, the read sees
// the evicted copy's bytes, not the new copy's: the new copy is not
// dropped for them, and nothing is counted corrupt.
func TestVerifyFrozenSparesRefetchedCopy(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	ctx := context.Background()
	const n = 8
	for i := range n {
		env.put(t, "bkt", string(rune('a'+i)), pattern(i, 200<<10))
	}
	cfg := env.coldConfig(dir, 64<<20, 1)
	reading, resume := make(chan struct{}), make(chan struct{})
	cfg.hooks.verifying = func(key string) {
		if key == indexKey("bkt", "a") {
			close(reading)
			<-resume
		}
	}
	c := openCache(t, cfg)
	for i := range n {
		openRead(t, c, obj("bkt", string(rune('a'+i))), pattern(i, 200<<10))
	}
	if err := flushAll(c); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.trimWarmLocked()
	_, frozen := c.coldRecordLocked(indexKey("bkt", "a"))
	c.mu.Unlock()
	if !frozen {
		t.Fatal("a is not frozen")
	}
	done := make(chan VerifyResult)
	go func() {
		res, err := c.Verify(ctx, VerifyOptions{Bucket: "bkt", Prefix: "a"})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-reading
	if res, err := c.Evict(ctx, "bkt", "a"); err != nil || res.Evicted != 1 {
		t.Fatalf("Evict = %+v, %v", res, err)
	}
	openRead(t, c, obj("bkt", "a"), pattern(0, 200<<10)) // filled again, same generation
	close(resume)
	res := <-done
	if res.Corrupt != 0 {
		t.Errorf("Verify counted %d copies corrupt: %+v", res.Corrupt, res.Dropped)
	}
	if _, ok := c.Lookup("bkt", "a"); !ok {
		t.Error("the new copy of a was dropped for the evicted copy's bytes")
	}
	checkInvariants(t, c)
}
