package mmapstore

import (
	"bufio"
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// env is a fetch.Dir source in a temp directory, a real downloader that
// counts its fetches and a real tier.Cache over them.
type env struct {
	dir   *cachetest.Dir
	dl    *cachetest.Downloader
	cache *tier.Cache
}

// newEnv returns an env whose cache has the given byte budget (0: default)
// and never revalidates on its own; tests pass tier.WithRevalidate to
// the cache's Opener when they want it to. It packs nothing: tests find
// their mappings in /proc/self/maps by file (TestPackedCache packs).
func newEnv(t testing.TB, maxBytes int64) *env {
	t.Helper()
	dir := cachetest.NewDir(t)
	dl := cachetest.NewDownloader(t, dir.Src)
	c := cachetest.Cache(t, dir.Src, dl, tier.Config{MaxBytes: maxBytes, PackBelow: -1})
	return &env{dir: dir, dl: dl, cache: c}
}

// put writes bucket "b", object name, with a fresh generation.
func (e *env) put(t testing.TB, name string, data []byte) object.Object {
	t.Helper()
	return e.dir.Put(t, "b", name, data)
}

// putFile copies testdata file src into the source as name.
func (e *env) putFile(t testing.TB, name, src string) ([]byte, object.Object) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	return b, e.put(t, name, b)
}

// fakeClock is a Store clock that tests advance by hand.
type fakeClock struct{ t atomic.Int64 }

func (c *fakeClock) now() time.Duration      { return time.Duration(c.t.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.t.Add(int64(d)) }

// newStore returns a Store over o with a fake clock, closed after the test,
// whose invariants are checked then.
func newStore[F File](t testing.TB, o Opener[F], cfg Config) (*Store, *fakeClock) {
	t.Helper()
	s := New(o, cfg)
	clk := new(fakeClock)
	s.now = clk.now
	t.Cleanup(func() {
		if err := s.checkInvariants(); err != nil {
			t.Errorf("invariants at cleanup: %v", err)
		}
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Store.Close: %v", err)
		}
	})
	return s, clk
}

// checkInvariants fails the test if the Store's bookkeeping is broken.
func checkInvariants(t testing.TB, s *Store) {
	t.Helper()
	if err := s.checkInvariants(); err != nil {
		t.Fatalf("invariants: %v", err)
	}
}

// acquire is Acquire that fails the test on error.
func acquire(t testing.TB, s *Store, o object.Object) Lease {
	t.Helper()
	l, err := s.Acquire(context.Background(), o)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", o, err)
	}
	return l
}

// release is Release that fails the test on error.
func release(t testing.TB, l Lease) {
	t.Helper()
	if err := l.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// mapsOf returns the lines of /proc/self/maps that map path (the kernel
// appends " (deleted)" once the file is unlinked).
func mapsOf(t testing.TB, path string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), path) {
			lines = append(lines, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// pathOf returns the file a valid lease maps.
func pathOf(l Lease) string { return l.m.file.Path() }

// pattern returns n deterministic bytes derived from seed.
func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// A tier handle is a File.
var _ File = (*tier.Handle)(nil)
