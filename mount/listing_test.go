package mount

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// clock is a settable time source for FS.now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// flakyLister fails every listing while fail is set.
type flakyLister struct {
	Lister
	fail atomic.Bool
}

var errFlaky = errors.New("listing refused by the test")

func (l *flakyLister) List(ctx context.Context, bucket, prefix string) iter.Seq2[object.Attrs, error] {
	if l.fail.Load() {
		return func(yield func(object.Attrs, error) bool) { yield(object.Attrs{}, errFlaky) }
	}
	return l.Lister.List(ctx, bucket, prefix)
}

// names returns the names in dir, read with readdir (which the kernel does
// not cache).
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("readdir %s: %v", dir, err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestListingTTL adds an object to the bucket: it shows once the listing
// has expired. A failing listing then keeps the previous one in service.
func TestListingTTL(t *testing.T) {
	e := newEnv(t, emulator.Options{Objects: []fakestorage.Object{obj("data", "a", []byte("a"))}}, fetch.Config{})
	clk := &clock{t: time.Unix(1e9, 0)}
	lister := &flakyLister{Lister: e.src}
	cfg := e.config(Root{Bucket: "data"})
	cfg.Source, cfg.ListTTL = lister, time.Hour
	srv, mp := e.mount(t, cfg, func(f *FS) { f.now = clk.now })
	dir := filepath.Join(mp, "data")

	if got := names(t, dir); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("names = %q; want [a]", got)
	}
	if _, err := e.emu.Put("data", "b", []byte("b")); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Hour - time.Second)
	if got := names(t, dir); !slices.Equal(got, []string{"a"}) {
		t.Errorf("names before the TTL = %q; want [a]", got)
	}
	clk.advance(time.Second)
	if got := names(t, dir); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("names after the TTL = %q; want [a b]", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "b")); err != nil || string(b) != "b" {
		t.Errorf("read b: %q, %v", b, err)
	}

	lister.fail.Store(true)
	clk.advance(time.Hour)
	if got := names(t, dir); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("names while listing fails = %q; want the previous [a b]", got)
	}
	if st := srv.Stats(); st.Listings != 2 || st.ListErrors != 1 {
		t.Errorf("Listings = %d, ListErrors = %d; want 2 and 1", st.Listings, st.ListErrors)
	}
	if n := e.logs.count("listing failed", "bucket", "data"); n != 1 {
		t.Errorf("listing failure logged %d times; want 1", n)
	}
}

// TestFirstListingFails checks that a bucket that cannot be listed gives EIO,
// and works as soon as listing does.
func TestFirstListingFails(t *testing.T) {
	e := newEnv(t, emulator.Options{Objects: []fakestorage.Object{obj("data", "a", []byte("a"))}}, fetch.Config{})
	lister := &flakyLister{Lister: e.src}
	lister.fail.Store(true)
	cfg := e.config(Root{Bucket: "data"}, Root{Bucket: "missing"})
	cfg.Source = lister
	_, mp := e.mount(t, cfg, nil)
	if _, err := os.ReadDir(filepath.Join(mp, "data")); !errors.Is(err, syscall.EIO) {
		t.Errorf("readdir while listing fails: %v; want EIO", err)
	}
	lister.fail.Store(false)
	if got := names(t, filepath.Join(mp, "data")); !slices.Equal(got, []string{"a"}) {
		t.Errorf("names = %q; want [a]", got)
	}
	if _, err := os.ReadDir(filepath.Join(mp, "missing")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("readdir of a bucket that does not exist: %v; want ENOENT", err)
	}
}

// TestNewGenerationNewInode replaces an object after it was looked up but
// before it was opened: the open of the listed generation fails with ESTALE
// inside the kernel, which looks the name up again and opens the new
// generation, a new inode.
func TestNewGenerationNewInode(t *testing.T) {
	e := newEnv(t, emulator.Options{Objects: []fakestorage.Object{obj("data", "x", []byte("old"))}}, fetch.Config{})
	srv, mp := e.mount(t, e.config(Root{Bucket: "data"}), nil) // ListTTL forever
	path := filepath.Join(mp, "data", "x")
	before := inode(t, path)
	gen, err := e.emu.Put("data", "x", []byte("new!"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, []byte("new!")) {
		t.Fatalf("read after replace: %q, %v; want the new generation", got, err)
	}
	after := inode(t, path)
	if after == before || after != fileIno("data", "x", gen) {
		t.Errorf("inode %d → %d; want a new one, %d", before, after, fileIno("data", "x", gen))
	}
	if st := srv.Stats(); st.Listings != 2 {
		t.Errorf("Listings = %d; want 2", st.Listings)
	}
}

// TestOpenGoneGeneration opens a listed generation that the cache finds
// gone (not found, or replaced between its stat and its download): the
// open fails with ESTALE, for the kernel to look the name up again, and
// the bucket is listed again at that lookup. (Through a mount, only the
// first is reachable with the emulator: TestNewGenerationNewInode.)
func TestOpenGoneGeneration(t *testing.T) {
	ctx := context.Background()
	x := object.Attrs{Object: object.Object{Bucket: "b", Name: "x", Generation: 1}, Size: 1}
	for _, gone := range []error{
		fmt.Errorf("tier: open: %w", object.ErrNotFound),
		fmt.Errorf("read: %w: %w", object.ErrGenerationChanged, object.ErrNotFound),
		fmt.Errorf("read: served generation 2: %w", object.ErrGenerationChanged),
	} {
		lister := newCountingLister(&bucketLister{buckets: map[string][]object.Attrs{"b": {x}}})
		f, err := New(Config{Cache: fakeCache{err: gone}, Source: lister, Roots: []Root{{Bucket: "b"}}, ListTTL: -1})
		if err != nil {
			t.Fatal(err)
		}
		b := f.buckets["b"]
		for range 2 {
			if _, err := f.listing(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		if _, en := f.openHandle(ctx, b, x); en != syscall.ESTALE {
			t.Errorf("open failing with %q: %v; want ESTALE", gone, en)
		}
		if _, err := f.listing(ctx, b); err != nil {
			t.Fatal(err)
		}
		if n := lister.count("b"); n != 2 {
			t.Errorf("open failing with %q: bucket listed %d times; want 2 (again after the open)", gone, n)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// inode returns path's inode number.
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// heldLister is a Lister whose next listing, once armed, reads the bucket
// and then holds its objects back until released: a listing that read an
// object before it changed and ends after the change.
type heldLister struct {
	Lister
	armed       atomic.Bool
	started     chan struct{} // closed when the held listing has read the bucket
	release     chan struct{}
	releaseOnce sync.Once
}

func newHeldLister(l Lister) *heldLister {
	return &heldLister{Lister: l, started: make(chan struct{}), release: make(chan struct{})}
}

func (l *heldLister) List(ctx context.Context, bucket, prefix string) iter.Seq2[object.Attrs, error] {
	if !l.armed.CompareAndSwap(true, false) {
		return l.Lister.List(ctx, bucket, prefix)
	}
	return func(yield func(object.Attrs, error) bool) {
		var as []object.Attrs
		for a, err := range l.Lister.List(ctx, bucket, prefix) {
			if err != nil {
				yield(object.Attrs{}, err)
				return
			}
			as = append(as, a)
		}
		close(l.started)
		select {
		case <-l.release:
		case <-ctx.Done():
			yield(object.Attrs{}, ctx.Err())
			return
		}
		for _, a := range as {
			if !yield(a, nil) {
				return
			}
		}
	}
}

// open lets the held listing end.
func (l *heldLister) open() { l.releaseOnce.Do(func() { close(l.release) }) }

// hangBound bounds waits that only a hang exceeds.
const hangBound = 10 * time.Second

// TestInvalidationOutlivesEarlierListing replaces an object while a
// listing that read its old generation is in flight, then reads the object
// through a name the kernel still maps to the old generation: the open
// fails with ESTALE and the kernel's one retry must find the new
// generation, whether the earlier listing ends before the retry's lookup
// (it must not undo the invalidation) or after it (the lookup must not
// wait for that listing and take its result).
func TestInvalidationOutlivesEarlierListing(t *testing.T) {
	for _, tc := range []struct {
		name       string
		endsBefore bool // the earlier listing ends before the retry's lookup
	}{{"listing-ends-first", true}, {"retry-first", false}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []fakestorage.Object{obj("data", "x", []byte("old")), obj("data", "y", []byte("y"))}
			e := newEnv(t, emulator.Options{Objects: objs}, fetch.Config{})
			clk := &clock{t: time.Unix(1e9, 0)}
			lister := newHeldLister(e.src)
			earlierDone := make(chan error, 1)
			var stale sync.Once
			var f *FS
			cfg := e.config(Root{Bucket: "data"})
			cfg.Source, cfg.ListTTL = lister, time.Hour
			_, mp := e.mount(t, cfg, func(g *FS) {
				f, g.now = g, clk.now
				g.openDone = func(_ object.Object, en syscall.Errno) {
					if en != syscall.ESTALE || !tc.endsBefore {
						return
					}
					stale.Do(func() { // before the ESTALE reaches the kernel
						lister.open()
						select {
						case <-earlierDone:
						case <-time.After(hangBound):
							t.Error("the earlier listing did not end once released")
						}
					})
				}
			})
			dir := filepath.Join(mp, "data")
			inode(t, filepath.Join(dir, "x")) // the kernel maps x to x#1 for the hour

			clk.advance(time.Hour)
			lister.armed.Store(true)
			var wg sync.WaitGroup
			defer wg.Wait()
			defer lister.open()
			wg.Go(func() { // its lookup lists the bucket again, which reads x#1 and is held
				_, err := os.Stat(filepath.Join(dir, "y"))
				earlierDone <- err
			})
			select {
			case <-lister.started:
			case <-time.After(hangBound):
				t.Fatal("the earlier listing did not start")
			}
			gen, err := e.emu.Put("data", "x", []byte("new!"))
			if err != nil {
				t.Fatal(err)
			}

			read := make(chan error, 1)
			wg.Go(func() {
				got, err := os.ReadFile(filepath.Join(dir, "x"))
				if err == nil && string(got) != "new!" {
					err = fmt.Errorf("read %q; want the new generation", got)
				}
				read <- err
			})
			select {
			case err := <-read:
				if err != nil {
					t.Errorf("read after the replace: %v", err)
				}
			case <-time.After(hangBound):
				lister.open()
				t.Errorf("read after the replace waited for the listing that began before the invalidation: %v", <-read)
			}
			lister.open()
			if !tc.endsBefore {
				if err := <-earlierDone; err != nil {
					t.Errorf("stat y in the earlier listing: %v", err)
				}
			}
			l, err := f.listing(context.Background(), f.buckets["data"])
			if err != nil {
				t.Fatal(err)
			}
			if a, _ := l.dirs[""].find("x"); a.attrs.Generation != gen {
				t.Errorf("listing after both ended has x#%d; want x#%d", a.attrs.Generation, gen)
			}
		})
	}
}
