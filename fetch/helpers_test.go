package fetch

import (
	"bytes"
	"context"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
)

// fastConfig is a Config with test-speed backoffs.
func fastConfig() Config {
	return Config{
		SliceSize:      64 << 10,
		Connections:    4,
		MaxAttempts:    4,
		BackoffInitial: time.Millisecond,
		BackoffMax:     4 * time.Millisecond,
		StallTimeout:   10 * time.Second,
	}
}

func newDownloader(t testing.TB, src object.Source, cfg Config) *Downloader {
	t.Helper()
	d, err := NewDownloader(src, cfg)
	if err != nil {
		t.Fatalf("NewDownloader(%+v): %v", cfg, err)
	}
	return d
}

// tempDst returns a fresh file in t.TempDir() to Fetch into.
func tempDst(t testing.TB) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "dst"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// fetchFile fetches a into a fresh file and returns its contents.
func fetchFile(t testing.TB, d *Downloader, a object.Attrs, u *object.Urgency) ([]byte, error) {
	t.Helper()
	f := tempDst(t)
	err := d.Fetch(context.Background(), a, f, u)
	b, rerr := os.ReadFile(f.Name())
	if rerr != nil {
		t.Fatal(rerr)
	}
	return b, err
}

// checkBytes compares got with want without printing megabytes.
func checkBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	t.Errorf("%s: got %d bytes, want %d; first difference at offset %d", what, len(got), len(want), i)
}

// withCRC returns a with the CRC32C of data, as GCS would supply.
func withCRC(a object.Attrs, data []byte) object.Attrs {
	a.CRC32C, a.HasCRC32C = crc32.Checksum(data, castagnoli), true
	return a
}

// checkNoFetchGoroutines fails if any goroutine is still inside the
// Downloader. Fetch waits for everything it starts, so right after it
// returns there must be none (tests using it must not run in parallel).
func checkNoFetchGoroutines(t testing.TB) {
	t.Helper()
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	for _, frame := range []string{"fetch.(*Downloader)", "fetch.watchdog", "fetch.(*connSem).wait"} {
		if bytes.Contains(buf, []byte(frame)) {
			t.Errorf("a goroutine is still in %s after Fetch returned:\n%s", frame, buf)
			return
		}
	}
}

// gatedSource wraps a Source: every NewRangeReader reports itself on opened
// and then waits for a token on gate (or ctx's end).
type gatedSource struct {
	object.Source
	opened chan object.Object
	gate   chan struct{}
}

func newGatedSource(src object.Source) *gatedSource {
	return &gatedSource{Source: src, opened: make(chan object.Object, 100), gate: make(chan struct{})}
}

func (g *gatedSource) NewRangeReader(ctx context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	g.opened <- o
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Source.NewRangeReader(ctx, o, off, n)
}

// memWriterAt is an in-memory io.WriterAt of fixed size, safe for parallel
// writes to disjoint ranges (benchmarks use it to keep files out of the
// measurement; tests use real files).
type memWriterAt struct{ b []byte }

func (m *memWriterAt) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(m.b)) {
		return 0, io.ErrShortWrite
	}
	return copy(m.b[off:], p), nil
}

// discardWriterAt accepts and drops everything: benchmarks fetch hundreds
// of MiB through it without holding them.
type discardWriterAt struct{}

func (discardWriterAt) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }

// startEmulator starts an emulator for the test and closes it afterwards.
func startEmulator(t testing.TB, opts emulator.Options) *emulator.Server {
	t.Helper()
	s, err := emulator.Start(opts)
	if err != nil {
		t.Fatalf("emulator.Start: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// newTestGCS returns a GCS source on endpoint, closed after the test.
func newTestGCS(t testing.TB, endpoint string) *GCS {
	t.Helper()
	g, err := NewGCS(context.Background(), GCSConfig{Endpoint: endpoint})
	if err != nil {
		t.Fatalf("NewGCS(%q): %v", endpoint, err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// putObject stores data as bucket/name and returns its attributes from Stat.
func putObject(t testing.TB, s *emulator.Server, g *GCS, bucket, name string, data []byte) object.Attrs {
	t.Helper()
	if _, err := s.Put(bucket, name, data); err != nil {
		t.Fatalf("Put(%s/%s): %v", bucket, name, err)
	}
	a, err := g.Stat(context.Background(), object.Object{Bucket: bucket, Name: name})
	if err != nil {
		t.Fatalf("Stat(%s/%s): %v", bucket, name, err)
	}
	return a
}

// async runs f on a goroutine owned by the test (waited for at cleanup)
// and delivers its result on the returned channel.
func async(t testing.TB, f func() error) <-chan error {
	ch := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() { ch <- f() })
	t.Cleanup(wg.Wait)
	return ch
}

// recorder collects values from concurrent callers.
type recorder[T any] struct {
	mu   sync.Mutex
	vals []T
}

func (r *recorder[T]) add(v T) {
	r.mu.Lock()
	r.vals = append(r.vals, v)
	r.mu.Unlock()
}

func (r *recorder[T]) all() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]T(nil), r.vals...)
}
