// Package cachetest builds the real parts that the tests of several
// packages run on: the GCS emulator, a local-directory source that hands out
// fresh generations, and a downloader and tier.Cache in a temporary
// directory, each closed when the test ends. It is for tests only; the
// packages below tier (fetch, tier itself) keep their own, since importing
// this one would be an import cycle.
package cachetest

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// Emulator starts the in-process GCS emulator with opts and closes it when
// the test ends.
func Emulator(t testing.TB, opts emulator.Options) *emulator.Server {
	t.Helper()
	s, err := emulator.Start(opts)
	if err != nil {
		t.Fatalf("emulator.Start: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Dir is a fetch.Dir source over a temporary directory laid out as
// <Root>/<bucket>/<name>, whose objects Put writes with fresh generations.
type Dir struct {
	Root string
	Src  *fetch.Dir
	gen  int64 // last generation (mtime) handed out
}

// NewDir returns an empty Dir, closed when the test ends.
func NewDir(t testing.TB) *Dir {
	t.Helper()
	root := t.TempDir()
	src, err := fetch.NewDir(root)
	if err != nil {
		t.Fatalf("fetch.NewDir: %v", err)
	}
	t.Cleanup(func() { src.Close() })
	return &Dir{Root: root, Src: src, gen: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()}
}

// Put writes bucket/name (replacing it atomically) with a fresh, distinct
// generation and returns the object, unpinned.
func (d *Dir) Put(t testing.TB, bucket, name string, data []byte) object.Object {
	t.Helper()
	p := filepath.Join(d.Root, bucket, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := p + ".new"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	d.gen += int64(time.Second)
	mt := time.Unix(0, d.gen)
	if err := os.Chtimes(tmp, mt, mt); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	return object.Object{Bucket: bucket, Name: name}
}

// Downloader is a real fetch.Downloader with settings for tests (1 MiB
// slices, 4 connections, two attempts with millisecond backoff) that
// counts its Fetch calls.
type Downloader struct {
	*fetch.Downloader
	calls atomic.Int64
}

// NewDownloader returns a Downloader over src.
func NewDownloader(t testing.TB, src object.Source) *Downloader {
	t.Helper()
	dl, err := fetch.NewDownloader(src, fetch.Config{SliceSize: 1 << 20, Connections: 4, MaxAttempts: 2,
		BackoffInitial: time.Millisecond, BackoffMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("fetch.NewDownloader: %v", err)
	}
	return &Downloader{Downloader: dl}
}

// Fetch counts the call and fetches.
func (d *Downloader) Fetch(ctx context.Context, a object.Attrs, dst io.WriterAt, u *object.Urgency) error {
	d.calls.Add(1)
	return d.Downloader.Fetch(ctx, a, dst, u)
}

// Calls returns the number of Fetch calls so far.
func (d *Downloader) Calls() int64 { return d.calls.Load() }

// Cache opens a tier.Cache over src, filled through dl, in a temporary
// directory, and closes it when the test ends. cfg supplies everything
// else (budgets, an shm directory); its Dir, Source and Downloader are set
// here, and a zero Revalidate means never (tests that want revalidation
// ask for it).
func Cache(t testing.TB, src object.Source, dl tier.Downloader, cfg tier.Config) *tier.Cache {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(t.TempDir(), "cache")
	}
	if cfg.Revalidate == 0 {
		cfg.Revalidate = -1
	}
	cfg.Source, cfg.Downloader = src, dl
	c, err := tier.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("tier.Open: %v", err)
	}
	CloseAtEnd(t, "tier.Cache", c, tier.ErrClosed)
	return c
}

// CloseAtEnd closes c when the test ends, reporting an error unless it
// matches one of ignore (an ErrClosed of a test that closed c itself).
func CloseAtEnd(t testing.TB, what string, c io.Closer, ignore ...error) {
	t.Cleanup(func() {
		err := c.Close()
		for _, e := range ignore {
			if errors.Is(err, e) {
				return
			}
		}
		if err != nil {
			t.Errorf("%s Close: %v", what, err)
		}
	})
}

// Goroutines reports, as test errors, every goroutine other than the
// caller's whose stack mentions one of owners (e.g.
// "cacheagent/loader.(*Loader)"): what a Close should have ended.
func Goroutines(t testing.TB, owners ...string) {
	t.Helper()
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n")[1:] { // the first is the caller's
		for _, owner := range owners {
			if strings.Contains(g, owner) {
				t.Errorf("goroutine left after Close:\n%s", g)
				break
			}
		}
	}
}

// FlipByte flips the byte at off of the tier data file at p the way bit
// rot would, unseen by the cache: the write goes through a hard link in the
// tier's temp directory (<root>/data/tmp, which the cache's watcher does
// not watch), and the file keeps its inode, size and modification time.
func FlipByte(t testing.TB, p string, off int64) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(filepath.Dir(filepath.Dir(p)), "tmp", "flip-byte-test")
	if err := os.Link(p, link); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(link)
	f, err := os.OpenFile(link, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	_, err = f.ReadAt(b, off)
	if err == nil {
		b[0] ^= 0xff
		_, err = f.WriteAt(b, off)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(link, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}
