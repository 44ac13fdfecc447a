package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// countingDownloader wraps the real downloader, counting Fetch calls and
// running an optional hook first (to gate or sabotage a download).
type countingDownloader struct {
	dl     Downloader
	calls  atomic.Int64
	before func(ctx context.Context, a object.Attrs, u *object.Urgency) error // set before use
}

func (d *countingDownloader) Fetch(ctx context.Context, a object.Attrs, dst io.WriterAt, u *object.Urgency) error {
	d.calls.Add(1)
	if d.before != nil {
		if err := d.before(ctx, a, u); err != nil {
			return err
		}
	}
	return d.dl.Fetch(ctx, a, dst, u)
}

// newDownloader returns a real fetch.Downloader over src with fast retries.
func newDownloader(t testing.TB, src object.Source) *countingDownloader {
	t.Helper()
	dl, err := fetch.NewDownloader(src, fetch.Config{SliceSize: 256 << 10, Connections: 16, MaxAttempts: 2,
		BackoffInitial: time.Millisecond, BackoffMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("fetch.NewDownloader: %v", err)
	}
	return &countingDownloader{dl: dl}
}

// dirEnv is a fetch.Dir source in a temp directory with a real downloader.
type dirEnv struct {
	root string
	src  *fetch.Dir
	dl   *countingDownloader
	gen  int64 // last generation (mtime) handed out
}

func newDirEnv(t testing.TB) *dirEnv {
	t.Helper()
	root := t.TempDir()
	src, err := fetch.NewDir(root)
	if err != nil {
		t.Fatalf("fetch.NewDir: %v", err)
	}
	t.Cleanup(func() { src.Close() })
	return &dirEnv{root: root, src: src, dl: newDownloader(t, src), gen: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()}
}

// put writes bucket/name (replacing it atomically) with a fresh, distinct
// generation and returns its attributes.
func (e *dirEnv) put(t testing.TB, bucket, name string, data []byte) object.Attrs {
	t.Helper()
	p := filepath.Join(e.root, bucket, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := p + ".new"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	e.gen += int64(time.Second)
	mt := time.Unix(0, e.gen)
	if err := os.Chtimes(tmp, mt, mt); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	a, err := e.src.Stat(context.Background(), object.Object{Bucket: bucket, Name: name})
	if err != nil {
		t.Fatalf("Stat(%s/%s): %v", bucket, name, err)
	}
	return a
}

// config returns a Config over the env for cache directory dir. Nothing is
// packed: these tests look at the file each object has of its own (see
// packConfig for segments).
func (e *dirEnv) config(dir string, maxBytes int64) Config {
	return Config{Dir: dir, MaxBytes: maxBytes, Source: e.src, Downloader: e.dl, Revalidate: -1, PackBelow: -1}
}

// openCache opens a cache and closes it after the test.
func openCache(t testing.TB, cfg Config) *Cache {
	t.Helper()
	c, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open(%s): %v", cfg.Dir, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// checkInvariants fails the test if the cache's accounting is inconsistent.
func checkInvariants(t testing.TB, c *Cache) {
	t.Helper()
	c.mu.Lock()
	err := c.checkInvariantsLocked()
	c.mu.Unlock()
	if err != nil {
		t.Errorf("invariants: %v", err)
	}
}

// openRead opens o through the cache, checks its bytes and closes it.
func openRead(t testing.TB, c *Cache, o object.Object, want []byte, opts ...OpenOption) object.Attrs {
	t.Helper()
	h, err := c.Open(context.Background(), o, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", o, err)
	}
	defer h.Close()
	checkHandle(t, h, want)
	return h.Attrs()
}

// checkHandle checks that h holds exactly want.
func checkHandle(t testing.TB, h *Handle, want []byte) {
	t.Helper()
	if h.Size() != int64(len(want)) {
		t.Fatalf("%s: Size() = %d; want %d", h.Attrs().Object, h.Size(), len(want))
	}
	got := make([]byte, len(want))
	if _, err := h.ReadAt(got, 0); err != nil && !(errors.Is(err, io.EOF) && len(want) == 0) {
		t.Fatalf("%s: ReadAt: %v", h.Attrs().Object, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: bytes differ from the source's", h.Attrs().Object)
	}
}

// pattern returns n deterministic bytes for seed.
func pattern(seed, n int) []byte { return emulator.Pattern(uint64(seed), n) }

// obj names bucket/name at the live generation.
func obj(bucket, name string) object.Object { return object.Object{Bucket: bucket, Name: name} }

// dataFiles lists the files under dir/data (relative paths), temp files too.
func dataFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(dir, dataName), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// memSource is an in-memory object.Source that accepts any name, for names
// the real sources refuse. Safe for concurrent use.
type memSource struct {
	mu   sync.Mutex
	objs map[string]memObject // by index key
	gen  int64
}

type memObject struct {
	data []byte
	gen  int64
}

func newMemSource() *memSource { return &memSource{objs: make(map[string]memObject)} }

func (m *memSource) put(bucket, name string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	m.objs[indexKey(bucket, name)] = memObject{data: data, gen: m.gen}
}

func (m *memSource) Stat(_ context.Context, o object.Object) (object.Attrs, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.objs[indexKey(o.Bucket, o.Name)]
	if !ok || (o.Generation != 0 && o.Generation != v.gen) {
		return object.Attrs{}, object.ErrNotFound
	}
	return object.Attrs{Object: object.Object{Bucket: o.Bucket, Name: o.Name, Generation: v.gen},
		Size: int64(len(v.data))}, nil
}

func (m *memSource) List(_ context.Context, bucket, prefix string) iter.Seq2[object.Attrs, error] {
	return func(yield func(object.Attrs, error) bool) {}
}

func (m *memSource) NewRangeReader(_ context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.objs[indexKey(o.Bucket, o.Name)]
	if !ok {
		return nil, object.ErrNotFound
	}
	if v.gen != o.Generation {
		return nil, object.ErrGenerationChanged
	}
	end := min(off+n, int64(len(v.data)))
	return io.NopCloser(bytes.NewReader(v.data[off:end])), nil
}

// snapshot lists every path under dir with its size, except under skip.
func snapshot(t testing.TB, dir, skip string) map[string]int64 {
	t.Helper()
	out := make(map[string]int64)
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = fi.Size()
		if !d.IsDir() {
			out[p] = fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// hasPrefixAny reports whether s starts with any of prefixes.
func hasPrefixAny(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// newDirEnvLogger is the logger tests give badger when they open an index
// directly.
func newDirEnvLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// statsOf returns c's base tier's figures and its shm tier's (zero
// without one).
func statsOf(c *Cache) (base, shm stats.Tier) {
	s := c.Stats()
	shm, _ = s.Shm()
	return s.Base(), shm
}

// flushAll waits until the packer has made every packed fill durable
// (their records written), then writes the access times the flusher
// would: every clean entry is then freezable, as after a quiet while.
func flushAll(c *Cache) error {
	for deadline := time.Now().Add(time.Minute); c.segs.inFlight() > 0; {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d packed fills still not durable after a minute", c.segs.inFlight())
		}
		time.Sleep(time.Millisecond)
	}
	return c.flushAccess()
}
