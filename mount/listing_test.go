package mount

import (
	"bytes"
	"context"
	"errors"
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

// inode returns path's inode number.
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
