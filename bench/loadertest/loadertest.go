// Package loadertest holds what the tests of the loader's formats share: a
// cache over a directory source with a Store over it, checked at the end of
// the test for leases still held and loader goroutines still running, and
// helpers to open and drain Loaders.
package loadertest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/tier"
)

// Bucket is the bucket the tests' objects are put in.
const Bucket = "b"

// Env is objects in a fetch.Dir source, a real downloader and tier.Cache
// over it, and an mmapstore.Store over the cache.
type Env struct {
	Dir   *cachetest.Dir
	Cache *tier.Cache
	Store *mmapstore.Store
}

// New returns an empty Env whose Store is checked, at the end of the test
// (after every Loader opened with Open closed), for leases outstanding
// and for loader goroutines left running.
func New(t testing.TB) *Env {
	t.Helper()
	d := cachetest.NewDir(t)
	c := cachetest.Cache(t, d.Src, cachetest.NewDownloader(t, d.Src), tier.Config{})
	s := mmapstore.New(c.Opener(), mmapstore.Config{MaxIdleMappings: -1, Revalidate: -1})
	cachetest.CloseAtEnd(t, "Store", s, mmapstore.ErrClosed)
	t.Cleanup(func() { // runs first: every Loader of the test is closed by now
		CheckNoGoroutines(t, nil)
		if n := s.Stats().Leases; n != 0 {
			t.Errorf("%d leases outstanding after every Loader closed", n)
		}
	})
	return &Env{Dir: d, Cache: c, Store: s}
}

// Source returns the Loader Source over the Env's Store.
func (e *Env) Source() loader.Source { return loader.FromStore(e.Store) }

// LoaderEnv returns what building a dataset in the Env reads through:
// the directory source, the Store for whole shards, and formats.
func (e *Env) LoaderEnv(formats ...loader.Format) loader.Env {
	return loader.Env{Source: e.Dir.Src, Records: e.Source(), Formats: formats}
}

// PutTree copies the files under local into the bucket under prefix.
func (e *Env) PutTree(t testing.TB, local, prefix string) {
	t.Helper()
	ents, err := os.ReadDir(local)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		b, err := os.ReadFile(filepath.Join(local, ent.Name()))
		if err != nil {
			t.Fatal(err)
		}
		e.Dir.Put(t, Bucket, prefix+ent.Name(), b)
	}
}

// Open returns a Loader of cfg over src, closed at the end of the test,
// which then checks that none of its goroutines is left.
func Open(t testing.TB, src loader.Source, cfg loader.Config) *loader.Loader {
	t.Helper()
	l, err := loader.New(src, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		CheckNoGoroutines(t, l)
	})
	return l
}

// Drain reads every batch of l, calling check on each before releasing
// it, and returns how many there were.
func Drain(t testing.TB, l *loader.Loader, check func(b *loader.Batch)) int {
	t.Helper()
	n := 0
	for {
		b, err := l.Next(context.Background())
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("Next after %d batches: %v", n, err)
		}
		check(b)
		b.Release()
		n++
	}
}

// FirstError returns the first error Next returns from a Loader of cfg
// over src (io.EOF if every batch reads), or New's.
func FirstError(src loader.Source, cfg loader.Config) error {
	l, err := loader.New(src, cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	for {
		b, err := l.Next(context.Background())
		if err != nil {
			return err
		}
		b.Release()
	}
}

// CheckNoGoroutines fails if a goroutine of l (one whose stack has a
// method call on l) is alive; nil l means any Loader's. Close waits for
// all of them, so none may be left after it.
func CheckNoGoroutines(t testing.TB, l *loader.Loader) {
	t.Helper()
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "cacheagent/loader.(*Loader)") {
			continue
		}
		if l == nil || strings.Contains(g, fmt.Sprintf("(%p", l)) {
			t.Errorf("goroutine left after Close:\n%s", g)
		}
	}
}
