package mount

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/bench/testenv"
	"github.com/cacheagent/cacheagent/fetch"
)

// backingState is what a test checks of a mount's backing cache.
type backingState struct {
	registered, unregistered int64
	idle                     int
	idleBytes                int64
}

// state returns c's counters and idle list.
func (c *backings) state() backingState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return backingState{registered: c.registered.Load(), unregistered: c.unregistered.Load(),
		idle: c.idle.Len(), idleBytes: c.idleBytes}
}

// setMaxIdle bounds the idle backings to n.
func (c *backings) setMaxIdle(n int) {
	c.mu.Lock()
	c.maxIdle = n
	c.mu.Unlock()
}

// pendingBytes returns the cache's space held by copies that left it.
func (e *env) pendingBytes() int64 {
	var n int64
	for _, t := range e.cache.Stats().Tiers {
		n += t.PendingBytes
	}
	return n
}

// backingMount is a passthrough mount of small objects.
type backingMount struct {
	e    *env
	srv  *Server
	f    *FS
	mp   string
	objs []fakestorage.Object
}

// newBackingMount mounts count small objects ("data/f0" …) in passthrough
// mode; it skips where passthrough is unavailable.
func newBackingMount(t *testing.T, count int) *backingMount {
	t.Helper()
	var objs []fakestorage.Object
	for i := range count {
		objs = append(objs, obj("data", fmt.Sprintf("f%d", i), emulator.Pattern(uint64(i+1), 10<<10+i)))
	}
	e := newEnv(t, emulator.Options{Objects: objs}, fetch.Config{})
	var f *FS
	srv, mp := e.mount(t, e.config(Root{Bucket: "data"}), func(fs *FS) { f = fs })
	if !srv.Passthrough() {
		t.Skip("the kernel offers no passthrough here")
	}
	return &backingMount{e: e, srv: srv, f: f, mp: mp, objs: objs}
}

// readObj reads object o through the mount at mp and checks its bytes.
func readObj(t *testing.T, mp string, o fakestorage.Object) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(mp, o.BucketName, o.Name))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(o.Content) {
		t.Fatalf("%s: read %d bytes, not its %d", o.Name, len(got), len(o.Content))
	}
}

// TestBackingReuse checks that every open of a file, one after another or
// at once, uses the one backing registered at its first open, which stays
// registered once the file is closed.
func TestBackingReuse(t *testing.T) {
	m := newBackingMount(t, 1)
	f, mp, objs := m.f, m.mp, m.objs
	for range 3 {
		readObj(t, mp, objs[0])
	}
	p := filepath.Join(mp, "data", objs[0].Name)
	a, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(objs[0].Content)+1)
	for _, h := range []*os.File{a, b} {
		if n, err := h.ReadAt(buf, 0); n != len(objs[0].Content) || string(buf[:n]) != string(objs[0].Content) {
			t.Fatalf("read %d bytes (%v) through a shared backing", n, err)
		}
	}
	if st := f.backings.state(); st.registered != 1 || st.idle != 0 {
		t.Errorf("two files open after three opens: %+v; want 1 registration, none idle", st)
	}
	a.Close()
	b.Close()
	waitFor(t, "the backing idle", func() bool { return f.backings.state().idle == 1 })
	if st := f.backings.state(); st.registered != 1 || st.unregistered != 0 || st.idleBytes != int64(len(objs[0].Content)) {
		t.Errorf("after closing: %+v; want 1 registration, kept idle with its size", st)
	}
	if n := f.Stats().Reads; n != 0 {
		t.Errorf("this process served %d reads; the kernel should read the cached file", n)
	}
}

// TestBackingBound checks that idle backings beyond the bound are closed,
// least recently used first, and registered again at the next open.
func TestBackingBound(t *testing.T) {
	m := newBackingMount(t, 4)
	f, mp, objs := m.f, m.mp, m.objs
	f.backings.setMaxIdle(2)
	for _, o := range objs { // f0 and f1 leave for f2 and f3
		readObj(t, mp, o)
	}
	waitFor(t, "4 registrations, 2 closed", func() bool {
		st := f.backings.state()
		return st.registered == 4 && st.unregistered == 2 && st.idle == 2
	})
	readObj(t, mp, objs[3]) // reused
	readObj(t, mp, objs[0]) // registered again; f2 leaves
	waitFor(t, "5 registrations, 3 closed", func() bool {
		st := f.backings.state()
		return st.registered == 5 && st.unregistered == 3 && st.idle == 2
	})
}

// TestBackingConcurrentOpens opens a few files from many goroutines while
// the bound of one idle backing keeps closing and registering them: every
// open of an inode must get the backing its other opens have (the kernel
// refuses another one while the inode is open), and every read its bytes.
func TestBackingConcurrentOpens(t *testing.T) {
	m := newBackingMount(t, 3)
	m.f.backings.setMaxIdle(1)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := range 40 {
				o := m.objs[(g+i)%len(m.objs)]
				got, err := os.ReadFile(filepath.Join(m.mp, o.BucketName, o.Name))
				if err == nil && string(got) != string(o.Content) {
					err = fmt.Errorf("%s: read %d bytes, not its %d", o.Name, len(got), len(o.Content))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitFor(t, "one backing idle", func() bool {
		st := m.f.backings.state()
		return st.idle == 1 && st.registered == st.unregistered+1
	})
	if n := m.f.Stats().OpenErrors; n != 0 {
		t.Errorf("%d opens failed", n)
	}
}

// TestBackingForget checks that a backing is closed when the kernel
// forgets the file's inode.
func TestBackingForget(t *testing.T) {
	m := newBackingMount(t, 1)
	f, mp, objs := m.f, m.mp, m.objs
	readObj(t, mp, objs[0])
	waitFor(t, "the backing idle", func() bool { return f.backings.state().idle == 1 })
	// Dropping the kernel's unused dentries and inodes sends FORGET.
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
		t.Skipf("cannot make the kernel forget inodes: %v", err)
	}
	waitFor(t, "the backing closed", func() bool {
		st := f.backings.state()
		return st.idle == 0 && st.unregistered == 1
	})
	readObj(t, mp, objs[0])
	if st := f.backings.state(); st.registered != 2 {
		t.Errorf("after the inode came back: %+v; want a second registration", st)
	}
}

// TestBackingEvicted checks that an idle backing holds an evicted copy's
// space only until the next sweep or open, and that the next open reads
// a fresh copy.
func TestBackingEvicted(t *testing.T) {
	m := newBackingMount(t, 2)
	e, f, mp, objs := m.e, m.f, m.mp, m.objs
	for _, o := range objs {
		readObj(t, mp, o)
	}
	waitFor(t, "both backings idle", func() bool { return f.backings.state().idle == 2 })
	if _, err := e.cache.Evict(context.Background(), "data", ""); err != nil {
		t.Fatal(err)
	}
	held := int64(len(objs[0].Content) + len(objs[1].Content))
	if n := e.pendingBytes(); n < held {
		t.Fatalf("pending bytes after evicting copies with idle backings: %d, want >= %d", n, held)
	}
	readObj(t, mp, objs[0]) // drops f0's stale backing, fetches again
	waitFor(t, "f0's new backing idle", func() bool { return f.backings.state().idle == 2 })
	if err := f.backings.sweep(); err != nil { // closes f1's
		t.Fatal(err)
	}
	if n := e.pendingBytes(); n != 0 {
		t.Errorf("pending bytes after an open and a sweep: %d, want 0", n)
	}
	if st := f.backings.state(); st.registered != 3 || st.unregistered != 2 || st.idle != 1 {
		t.Errorf("after eviction: %+v; want 3 registrations, 2 closed, 1 idle", st)
	}
}

// TestBackingClosedAtUnmount checks that the idle backings give their
// cache handles back when the mount ends.
func TestBackingClosedAtUnmount(t *testing.T) {
	m := newBackingMount(t, 2)
	e, f, mp, objs := m.e, m.f, m.mp, m.objs
	for _, o := range objs {
		readObj(t, mp, o)
	}
	waitFor(t, "both backings idle", func() bool { return f.backings.state().idle == 2 })
	if n := e.inUseBytes(); n == 0 {
		t.Fatal("no cache bytes in use with two idle backings")
	}
	if err := m.srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	m.srv.Wait()
	if n := e.inUseBytes(); n != 0 {
		t.Errorf("cache bytes in use after the unmount: %d, want 0", n)
	}
	if st := f.backings.state(); st.idle != 0 {
		t.Errorf("after the unmount: %+v; want none idle", st)
	}
}

// inUseBytes returns the cache's space with open handles.
func (e *env) inUseBytes() int64 {
	var n int64
	for _, t := range e.cache.Stats().Tiers {
		n += t.InUseBytes
	}
	return n
}

// waitFor polls cond until it holds, failing after a few seconds: a
// RELEASE or FORGET reaches the server after close(2) returns.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestIdleBackingsGiveWayWhenFull: idle backings hold at most an eighth of
// the cache's budget, and give their copies back when a new file finds the
// budget full (tier.Cache.OnNoSpace) rather than fail its open with ENOSPC.
func TestIdleBackingsGiveWayWhenFull(t *testing.T) {
	const size, budget = 64 << 10, 8 // files of the budget: idle ones hold one
	var objs []fakestorage.Object
	for i := range 2 * budget {
		objs = append(objs, obj("data", fmt.Sprintf("f%d", i), emulator.Pattern(uint64(i+1), size)))
	}
	e := newEnvBudget(t, t.TempDir(), emulator.Options{Objects: objs}, fetch.Config{}, budget*size)
	var f *FS
	srv, mp := e.mount(t, e.config(Root{Bucket: "data"}), func(fs *FS) { f = fs })
	if !srv.Passthrough() {
		testenv.Cannot(t, "the kernel offers no passthrough here")
	}
	idleBytes := func() int64 {
		f.backings.mu.Lock()
		defer f.backings.mu.Unlock()
		return f.backings.idleBytes
	}
	for _, o := range objs { // one after another: the idle ones stay within the share
		readObj(t, mp, o)
		if n := idleBytes(); n > budget*size/idleBudgetShare {
			t.Fatalf("%d bytes of idle backings; want at most an eighth of the budget", n)
		}
	}
	// budget-1 files held open and one idle fill the budget: the next open
	// needs the idle one's room.
	waitFor(t, "an idle backing", func() bool { return idleBytes() > 0 })
	for _, o := range objs[:budget-1] {
		fh, err := os.Open(filepath.Join(mp, o.BucketName, o.Name))
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
	}
	readObj(t, mp, objs[budget])
}
