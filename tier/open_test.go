package tier

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// gcsEnv is the in-process GCS emulator with a real GCS source and downloader.
type gcsEnv struct {
	srv *emulator.Server
	src *fetch.GCS
	dl  *countingDownloader
}

func newGCSEnv(t testing.TB) *gcsEnv {
	t.Helper()
	srv, err := emulator.Start(emulator.Options{Buckets: []string{"bkt"}})
	if err != nil {
		t.Fatalf("emulator.Start: %v", err)
	}
	t.Cleanup(srv.Close)
	src, err := fetch.NewGCS(context.Background(), fetch.GCSConfig{Endpoint: srv.Endpoint()})
	if err != nil {
		t.Fatalf("fetch.NewGCS: %v", err)
	}
	t.Cleanup(func() { src.Close() })
	return &gcsEnv{srv: srv, src: src, dl: newDownloader(t, src)}
}

func (e *gcsEnv) put(t testing.TB, name string, data []byte) int64 {
	t.Helper()
	gen, err := e.srv.Put("bkt", name, data)
	if err != nil {
		t.Fatalf("Put(%s): %v", name, err)
	}
	return gen
}

// delete deletes bkt/name through the emulator's JSON API.
func (e *gcsEnv) delete(t testing.TB, name string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, e.srv.Endpoint()+"b/bkt/o/"+url.PathEscape(name), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE %s: %s", name, resp.Status)
	}
}

func (e *gcsEnv) config(dir string) Config {
	return Config{Dir: dir, MaxBytes: 64 << 20, Source: e.src, Downloader: e.dl, Revalidate: time.Hour, PackBelow: -1}
}

func TestRevalidation(t *testing.T) {
	env := newGCSEnv(t)
	dir := t.TempDir()
	c := openCache(t, env.config(dir))
	ctx := context.Background()
	v1, v2 := pattern(1, 10000), pattern(2, 12000)
	gen1 := env.put(t, "obj", v1)
	openRead(t, c, obj("bkt", "obj"), v1)
	h1, err := c.Open(ctx, obj("bkt", "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer h1.Close()

	if h1.Stale() {
		t.Errorf("Stale() of the live generation's handle = true; want false")
	}
	gen2 := env.put(t, "obj", v2)
	// Checked less than Revalidate ago: the old generation is served.
	if a := openRead(t, c, obj("bkt", "obj"), v1); a.Generation != gen1 {
		t.Errorf("generation = %d; want the cached %d", a.Generation, gen1)
	}
	if st := c.Stats().Base(); st.Revalidations != 0 || env.dl.calls.Load() != 1 {
		t.Errorf("revalidations, downloads = %d, %d; want 0, 1", st.Revalidations, env.dl.calls.Load())
	}
	// Past the revalidation interval: the new generation replaces it.
	if a := openRead(t, c, obj("bkt", "obj"), v2, WithRevalidate(time.Nanosecond)); a.Generation != gen2 {
		t.Errorf("generation = %d; want the new %d", a.Generation, gen2)
	}
	if e, _ := c.Lookup("bkt", "obj"); e.Attrs.Generation != gen2 {
		t.Errorf("Lookup generation = %d; want %d", e.Attrs.Generation, gen2)
	}
	// The old file lives while h1 uses it, and goes with it.
	if !h1.Stale() {
		t.Errorf("Stale() of the replaced generation's handle = false; want true")
	}
	checkHandle(t, h1, v1)
	if _, err := os.Stat(h1.Path()); err != nil {
		t.Errorf("old generation's file while open: %v", err)
	}
	if err := h1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h1.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old generation's file after its last handle closed: %v; want it gone", err)
	}
	if n := len(dataFiles(t, dir)); n != 1 {
		t.Errorf("data files = %d; want 1", n)
	}
	// Same generation: confirmed without a download.
	before := c.Stats().Base()
	openRead(t, c, obj("bkt", "obj"), v2, WithRevalidate(0))
	after := c.Stats().Base()
	if after.Revalidations != before.Revalidations+1 || after.Fills != before.Fills {
		t.Errorf("revalidation of an unchanged object: %+v -> %+v; want one more revalidation, no fill", before, after)
	}
	checkInvariants(t, c)
}

func TestRevalidateDeletedObject(t *testing.T) {
	env := newGCSEnv(t)
	dir := t.TempDir()
	c := openCache(t, env.config(dir))
	env.put(t, "obj", pattern(1, 100))
	openRead(t, c, obj("bkt", "obj"), pattern(1, 100))
	env.delete(t, "obj")
	openRead(t, c, obj("bkt", "obj"), pattern(1, 100)) // not yet revalidated
	_, err := c.Open(context.Background(), obj("bkt", "obj"), WithRevalidate(0))
	if !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("Open(deleted) = %v; want object.ErrNotFound", err)
	}
	if _, ok := c.Lookup("bkt", "obj"); ok {
		t.Errorf("entry of a deleted object still cached")
	}
	if files := dataFiles(t, dir); len(files) != 0 {
		t.Errorf("data files = %q; want none", files)
	}
	checkInvariants(t, c)
}

// flakySource fails Stat while fail is set.
type flakySource struct {
	object.Source
	fail atomic.Bool
}

var errFlaky = errors.New("flaky: service unavailable")

func (f *flakySource) Stat(ctx context.Context, o object.Object) (object.Attrs, error) {
	if f.fail.Load() {
		return object.Attrs{}, errFlaky
	}
	return f.Source.Stat(ctx, o)
}

// syncBuffer is a bytes.Buffer safe for concurrent writes (a log sink).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRevalidateStatFailsServesCached(t *testing.T) {
	env := newDirEnv(t)
	src := &flakySource{Source: env.src}
	var logs syncBuffer
	cfg := env.config(t.TempDir(), 1<<20)
	cfg.Source = src
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c := openCache(t, cfg)
	env.put(t, "bkt", "obj", pattern(1, 100))
	openRead(t, c, obj("bkt", "obj"), pattern(1, 100))
	src.fail.Store(true)
	openRead(t, c, obj("bkt", "obj"), pattern(1, 100), WithRevalidate(0))
	if !bytes.Contains([]byte(logs.String()), []byte("level=WARN")) {
		t.Errorf("no warning logged for the failed revalidation; logs:\n%s", logs.String())
	}
	// A miss cannot be served without the source.
	if _, err := c.Open(context.Background(), obj("bkt", "other")); !errors.Is(err, errFlaky) {
		t.Errorf("Open(miss) with a failing source = %v; want %v", err, errFlaky)
	}
}

// gate blocks the downloads of env.dl until release is closed, reports
// joins to the cache's fills on joined, and each download it holds on
// arrived.
type gate struct {
	release chan struct{}
	joined  chan int
	arrived chan string
}

func installGate(c *Cache, dl *countingDownloader) *gate {
	g := &gate{release: make(chan struct{}), joined: make(chan int, 100), arrived: make(chan string, 100)}
	dl.before = func(ctx context.Context, a object.Attrs, _ *object.Urgency) error {
		select {
		case g.arrived <- a.Name:
		default:
		}
		select {
		case <-g.release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.onJoin = func(n int) { g.joined <- n }
	return g
}

// await returns once n callers wait on one fill.
func (g *gate) await(t testing.TB, n int) {
	t.Helper()
	for got := range g.joined {
		if got >= n {
			return
		}
	}
}

func TestConcurrentOpensShareOneDownload(t *testing.T) {
	env := newGCSEnv(t)
	c := openCache(t, env.config(t.TempDir()))
	data := pattern(7, 200<<10)
	env.put(t, "cold", data)
	g := installGate(c, env.dl)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			h, err := c.Open(context.Background(), obj("bkt", "cold"))
			if err != nil {
				errs[i] = err
				return
			}
			defer h.Close()
			got := make([]byte, len(data))
			if _, err := h.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
				errs[i] = errors.New("wrong bytes")
			}
		})
	}
	g.await(t, n)
	close(g.release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open #%d: %v", i, err)
		}
	}
	if calls, gets := env.dl.calls.Load(), env.srv.MediaGETs(); calls != 1 || gets != 1 {
		t.Errorf("downloads, media GETs = %d, %d; want 1, 1", calls, gets)
	}
	if st := c.Stats().Base(); st.Fills != 1 {
		t.Errorf("Fills = %d; want 1", st.Fills)
	}
	checkInvariants(t, c)
}

func TestCancelledWaiterDoesNotFailOthers(t *testing.T) {
	env := newDirEnv(t)
	c := openCache(t, env.config(t.TempDir(), 1<<20))
	data := pattern(3, 50000)
	env.put(t, "bkt", "obj", data)
	g := installGate(c, env.dl)

	actx, cancel := context.WithCancel(context.Background())
	aErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		h, err := c.Open(actx, obj("bkt", "obj"))
		if err == nil {
			h.Close()
		}
		aErr <- err
	})
	var bErr error
	wg.Go(func() {
		h, err := c.Open(context.Background(), obj("bkt", "obj"))
		if err != nil {
			bErr = err
			return
		}
		defer h.Close()
		checkHandle(t, h, data)
	})
	g.await(t, 2)
	cancel()
	if err := <-aErr; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Open = %v; want context.Canceled", err)
	}
	close(g.release)
	wg.Wait()
	if bErr != nil {
		t.Errorf("other Open = %v; want success", bErr)
	}
	if n := env.dl.calls.Load(); n != 1 {
		t.Errorf("downloads = %d; want 1", n)
	}
}

func TestGenerationChangedDuringDownload(t *testing.T) {
	env := newDirEnv(t)
	c := openCache(t, env.config(t.TempDir(), 1<<20))
	v1, v2 := pattern(1, 40000), pattern(2, 30000)
	env.put(t, "bkt", "obj", v1)
	var once sync.Once
	env.dl.before = func(context.Context, object.Attrs, *object.Urgency) error {
		once.Do(func() { env.put(t, "bkt", "obj", v2) }) // overwritten mid-download
		return nil
	}
	openRead(t, c, obj("bkt", "obj"), v2)
	if n := env.dl.calls.Load(); n != 2 {
		t.Errorf("downloads = %d; want 2 (the first failed with a changed generation)", n)
	}
	if files := dataFiles(t, c.base.lay.root); len(files) != 1 {
		t.Errorf("data files = %q; want 1", files)
	}
	checkInvariants(t, c)
}

func TestCloseWaitsForFills(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	c, err := Open(context.Background(), env.config(dir, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	env.put(t, "bkt", "obj", pattern(1, 1000))
	g := installGate(c, env.dl)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := c.Open(ctx, obj("bkt", "obj")); !errors.Is(err, context.Canceled) {
			t.Errorf("Open = %v; want context.Canceled", err)
		}
	})
	g.await(t, 1)
	cancel() // the caller leaves; its fill keeps running
	wg.Wait()
	if err := c.Close(); err != nil { // cancels the gated fill and waits for it
		t.Fatalf("Close: %v", err)
	}
	if files := dataFiles(t, dir); len(files) != 0 {
		t.Errorf("files after Close = %q; want none", files)
	}
}

// TestOpenCachedOnly serves cached copies and answers ErrNotCached for
// the rest without downloading.
func TestOpenCachedOnly(t *testing.T) {
	e := newDirEnv(t)
	c := openCache(t, e.config(t.TempDir(), 4*objSize))
	o := e.putObjects(t, "a", "b")
	touch(t, c, o[0])
	fills := c.Stats().Base().Fills
	h, err := c.Open(context.Background(), o[0], CachedOnly())
	if err != nil {
		t.Fatalf("Open(a, CachedOnly) = %v; want the cached copy", err)
	}
	h.Close()
	if _, err := c.Open(context.Background(), o[1], CachedOnly()); !errors.Is(err, ErrNotCached) {
		t.Errorf("Open(b, CachedOnly) = %v; want ErrNotCached", err)
	}
	if got := c.Stats().Base().Fills; got != fills {
		t.Errorf("fills went from %d to %d; want no download", fills, got)
	}
}
