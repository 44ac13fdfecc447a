package fetch

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
)

func TestNewDownloaderConfig(t *testing.T) {
	d, _ := newTestDir(t)
	bad := []Config{
		{SliceSize: -1},
		{Connections: -1},
		{MaxAttempts: -1},
		{BackoffInitial: -time.Second},
		{StallTimeout: -time.Second},
		{BackoffInitial: time.Second, BackoffMax: time.Millisecond},
		{SmallObjectSize: -2},
		{SmallConnections: -1},
		{ChecksumAttempts: -1},
	}
	for _, cfg := range bad {
		if _, err := NewDownloader(d, cfg); err == nil {
			t.Errorf("NewDownloader(%+v) = nil error; want an error", cfg)
		}
	}
	if _, err := NewDownloader(nil, Config{}); err == nil {
		t.Error("NewDownloader(nil source) = nil error; want an error")
	}
	dl := newDownloader(t, d, Config{})
	want := Config{DefaultSliceSize, DefaultConnections, DefaultMaxAttempts,
		DefaultBackoffInitial, DefaultBackoffMax, DefaultStallTimeout, DefaultSmallObjectSize, 0, DefaultChecksumAttempts, false}
	if dl.cfg != want {
		t.Errorf("defaults = %+v; want %+v", dl.cfg, want)
	}
	if err := dl.SetConnections(0); err == nil {
		t.Error("SetConnections(0) = nil error; want an error")
	}
	for _, c := range []struct {
		cfg  Config
		want int
	}{
		{Config{}, 2 * DefaultConnections},
		{Config{Connections: 8}, 16},
		{Config{Connections: 8, SmallConnections: 3}, 11},
		{Config{Connections: 8, SmallConnections: 3, SmallObjectSize: NoSmallLane}, 8},
	} {
		if got := c.cfg.Reads(); got != c.want {
			t.Errorf("%+v.Reads() = %d; want %d", c.cfg, got, c.want)
		}
	}
}

func TestFetchDirSizes(t *testing.T) {
	src, root := newTestDir(t)
	const S = 64 << 10
	sizes := []int{0, 1, S - 1, S, S + 1, 3*S + 7, 1<<20 + 3}
	for i, size := range sizes {
		data := emulator.Pattern(uint64(i), size)
		name := "obj" + string(rune('a'+i))
		writeFile(t, root, "b/"+name, data, t0)
		a, err := src.Stat(context.Background(), object.Object{Bucket: "b", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		for _, verify := range []bool{false, true} {
			if verify {
				a = withCRC(a, data)
			}
			d := newDownloader(t, src, fastConfig())
			got, err := fetchFile(t, d, a, object.NewUrgency(object.Demand))
			if err != nil {
				t.Fatalf("Fetch(size %d, crc %v): %v", size, verify, err)
			}
			checkBytes(t, "Fetch", got, data)
			st := d.Stats()
			if want := int64((size + S - 1) / S); st.Ranges != want || st.Bytes != int64(size) || st.Objects != 1 || st.ConnsInUse != 0 {
				t.Errorf("size %d: Stats = %+v; want %d ranges, %d bytes, 1 object, 0 conns", size, st, want, size)
			}
		}
	}
	checkNoFetchGoroutines(t)
}

func TestFetchChecksumMismatch(t *testing.T) {
	src, root := newTestDir(t)
	data := emulator.Pattern(9, 200<<10)
	writeFile(t, root, "b/f", data, t0)
	a, err := src.Stat(context.Background(), object.Object{Bucket: "b", Name: "f"})
	if err != nil {
		t.Fatal(err)
	}
	a = withCRC(a, data)
	a.CRC32C ^= 1
	cfg := fastConfig()
	cfg.ChecksumAttempts = 3
	d := newDownloader(t, src, cfg)
	if _, err := fetchFile(t, d, a, nil); !errors.Is(err, object.ErrChecksum) ||
		!strings.Contains(err.Error(), "after 3 rounds of reads, the same bytes every time") {
		t.Fatalf("Fetch(wrong CRC) error = %v; want ErrChecksum after 3 rounds, the same bytes every time", err)
	}
	// Every round reads everything, 4 ranges cut at other places each time.
	st := d.Stats()
	if st.CRCFailures != 3 || st.Retries[CauseChecksum.String()] != 2 || st.Ranges != 3*4 || st.Failures != 1 {
		t.Errorf("Stats = %+v; want 3 CRC failures, 2 checksum retries, 12 ranges, 1 failure", st)
	}

	empty := object.Attrs{Object: object.Object{Bucket: "b", Name: "e"}, CRC32C: 1, HasCRC32C: true}
	if err := d.Fetch(context.Background(), empty, tempDst(t), nil); !errors.Is(err, object.ErrChecksum) {
		t.Errorf("Fetch(empty object, CRC 1) error = %v; want ErrChecksum", err)
	}
	empty.CRC32C = 0
	if err := d.Fetch(context.Background(), empty, tempDst(t), nil); err != nil {
		t.Errorf("Fetch(empty object, CRC 0) = %v; want nil", err)
	}
	bad := a
	bad.Size = -1
	if err := d.Fetch(context.Background(), bad, tempDst(t), nil); err == nil {
		t.Error("Fetch(size -1) = nil error; want an error")
	}
	if err := d.Fetch(context.Background(), a, nil, nil); err == nil {
		t.Error("Fetch(nil dst) = nil error; want an error")
	}
}

func TestFetchDirGenerationChanged(t *testing.T) {
	src, root := newTestDir(t)
	writeFile(t, root, "b/f", emulator.Pattern(1, 1000), t0)
	a, err := src.Stat(context.Background(), object.Object{Bucket: "b", Name: "f"})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, root, "b/f", emulator.Pattern(2, 1000), t0.Add(time.Second))
	d := newDownloader(t, src, fastConfig())
	if _, err := fetchFile(t, d, a, nil); !errors.Is(err, object.ErrGenerationChanged) {
		t.Errorf("Fetch(overwritten) error = %v; want ErrGenerationChanged", err)
	}
	if err := os.Remove(root + "/b/f"); err != nil {
		t.Fatal(err)
	}
	_, err = fetchFile(t, d, a, nil)
	if !errors.Is(err, object.ErrGenerationChanged) || !errors.Is(err, object.ErrNotFound) {
		t.Errorf("Fetch(deleted) error = %v; want object.ErrGenerationChanged and ErrNotFound", err)
	}
	if st := d.Stats(); st.Ranges != 2 {
		t.Errorf("Stats().Ranges = %d; want 2 (no retries)", st.Ranges)
	}
}

// TestFetchENOSPC writes to /dev/full: the write error ends Fetch at once.
func TestFetchENOSPC(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	src, root := newTestDir(t)
	writeFile(t, root, "b/f", emulator.Pattern(1, 1000), t0)
	a, err := src.Stat(context.Background(), object.Object{Bucket: "b", Name: "f"})
	if err != nil {
		t.Fatal(err)
	}
	d := newDownloader(t, src, fastConfig())
	if err := d.Fetch(context.Background(), a, full, nil); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Fetch to /dev/full error = %v; want ENOSPC", err)
	}
	if st := d.Stats(); st.Ranges != 1 || st.ConnsInUse != 0 {
		t.Errorf("Stats = %+v; want 1 range (no retry), 0 conns", st)
	}
}

func TestFetchCancelled(t *testing.T) {
	dir, root := newTestDir(t)
	writeFile(t, root, "b/f", emulator.Pattern(1, 300<<10), t0)
	a, err := dir.Stat(context.Background(), object.Object{Bucket: "b", Name: "f"})
	if err != nil {
		t.Fatal(err)
	}
	src := newGatedSource(dir)
	d := newDownloader(t, src, fastConfig())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Fetch(ctx, a, tempDst(t), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Fetch(cancelled ctx) error = %v; want context.Canceled", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	dst := tempDst(t)
	done := async(t, func() error { return d.Fetch(ctx, a, dst, nil) })
	<-src.opened // a slice is in its range read
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Fetch cancelled mid-read error = %v; want context.Canceled", err)
	}
	checkNoFetchGoroutines(t)
	if st := d.Stats(); st.ConnsInUse != 0 || st.WaitingSlices != 0 {
		t.Errorf("after cancel: %d conns, %d waiting; want 0, 0", st.ConnsInUse, st.WaitingSlices)
	}
}

// priorityRun starts a Fetch that holds the only connection, then queues
// the given fetches one by one, then opens the gate and returns the order
// in which their range reads started.
func priorityRun(t *testing.T, queued []string, urgencies map[string]*object.Urgency, raise func()) []string {
	t.Helper()
	dir, root := newTestDir(t)
	names := append([]string{"holder"}, queued...)
	attrs := map[string]object.Attrs{}
	for i, n := range names {
		writeFile(t, root, "b/"+n, emulator.Pattern(uint64(i), 1000), t0)
		a, err := dir.Stat(context.Background(), object.Object{Bucket: "b", Name: n})
		if err != nil {
			t.Fatal(err)
		}
		attrs[n] = a
	}
	src := newGatedSource(dir)
	cfg := fastConfig()
	cfg.Connections = 1
	cfg.SmallObjectSize = NoSmallLane // the objects are small; the order is the main lane's
	d := newDownloader(t, src, cfg)
	enqueued := make(chan struct{}, len(names))
	d.sem.onEnqueue = func() { enqueued <- struct{}{} }

	var wg sync.WaitGroup
	fetch := func(n string, u *object.Urgency) {
		dst := tempDst(t)
		wg.Go(func() {
			if err := d.Fetch(context.Background(), attrs[n], dst, u); err != nil {
				t.Errorf("Fetch(%s): %v", n, err)
			}
		})
	}
	fetch("holder", object.NewUrgency(object.Warm))
	<-src.opened
	for _, n := range queued {
		fetch(n, urgencies[n])
		<-enqueued
	}
	if raise != nil {
		raise()
	}
	var order []string
	for range queued {
		src.gate <- struct{}{} // let the current holder finish
		order = append(order, (<-src.opened).Name)
	}
	src.gate <- struct{}{}
	wg.Wait()
	return order
}

func TestFetchPriority(t *testing.T) {
	u := map[string]*object.Urgency{
		"warm-1": object.NewUrgency(object.Warm), "warm-2": object.NewUrgency(object.Warm),
		"plan": object.NewUrgency(object.Plan), "demand": object.NewUrgency(object.Demand),
	}
	got := priorityRun(t, []string{"warm-1", "warm-2", "plan", "demand"}, u, nil)
	if want := []string{"demand", "plan", "warm-1", "warm-2"}; !equalStrings(got, want) {
		t.Errorf("grant order = %q; want %q", got, want)
	}
}

func TestFetchRaiseUrgency(t *testing.T) {
	u := map[string]*object.Urgency{"first": object.NewUrgency(object.Warm), "second": object.NewUrgency(object.Warm), "third": object.NewUrgency(object.Warm)}
	got := priorityRun(t, []string{"first", "second", "third"}, u, func() { u["third"].Raise(object.Demand) })
	if want := []string{"third", "first", "second"}; !equalStrings(got, want) {
		t.Errorf("grant order = %q; want %q", got, want)
	}
}

func TestSetConnectionsGrows(t *testing.T) {
	dir, root := newTestDir(t)
	writeFile(t, root, "b/f", emulator.Pattern(1, 3*64<<10), t0)
	a, err := dir.Stat(context.Background(), object.Object{Bucket: "b", Name: "f"})
	if err != nil {
		t.Fatal(err)
	}
	src := newGatedSource(dir)
	cfg := fastConfig()
	cfg.Connections = 1
	d := newDownloader(t, src, cfg)
	dst := tempDst(t)
	done := async(t, func() error { return d.Fetch(context.Background(), a, dst, nil) })
	<-src.opened
	if err := d.SetConnections(3); err != nil {
		t.Fatal(err)
	}
	<-src.opened // the other two slices start without the first finishing
	<-src.opened
	for range 3 {
		src.gate <- struct{}{}
	}
	if err := <-done; err != nil {
		t.Fatalf("Fetch: %v", err)
	}
}

// ctxSource records a fact about the context of each range read.
type ctxSource struct {
	object.Source
	fact  func(context.Context) bool
	mu    sync.Mutex
	facts []bool
}

func (s *ctxSource) NewRangeReader(ctx context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	f := s.fact(ctx)
	s.mu.Lock()
	s.facts = append(s.facts, f)
	s.mu.Unlock()
	return s.Source.NewRangeReader(ctx, o, off, n)
}

// fetchCtxFacts fetches a 200 KiB object (4 slices of fastConfig) whose
// CRC32C is right, or wrong if badCRC, through a ctxSource recording fact,
// and returns the facts in order and Fetch's error.
func fetchCtxFacts(t *testing.T, badCRC bool, fact func(context.Context) bool) ([]bool, error) {
	t.Helper()
	dir, root := newTestDir(t)
	data := emulator.Pattern(10, 200<<10)
	writeFile(t, root, "b/f", data, t0)
	a, err := dir.Stat(context.Background(), object.Object{Bucket: "b", Name: "f"})
	if err != nil {
		t.Fatal(err)
	}
	a = withCRC(a, data)
	if badCRC {
		a.CRC32C ^= 1
	}
	src := &ctxSource{Source: dir, fact: fact}
	cfg := fastConfig()
	cfg.ChecksumAttempts = 2
	got, err := fetchFile(t, newDownloader(t, src, cfg), a, nil)
	if err == nil {
		checkBytes(t, "Fetch", got, data)
	}
	return src.facts, err
}

// TestFetchRereadMarksContext: the first round's range reads run on an
// unmarked context, the re-reads after a CRC32C mismatch on one marked
// Reread.
func TestFetchRereadMarksContext(t *testing.T) {
	if Reread(context.Background()) {
		t.Error("Reread(Background) = true; want false")
	}
	// Every round mismatches: two rounds (ChecksumAttempts 2).
	marks, err := fetchCtxFacts(t, true, Reread)
	if !errors.Is(err, object.ErrChecksum) {
		t.Fatalf("Fetch(wrong CRC) error = %v; want ErrChecksum", err)
	}
	if want := []bool{false, false, false, false, true, true, true, true}; !slices.Equal(marks, want) {
		t.Errorf("Reread per range read = %v; want %v", marks, want)
	}
}

// TestFetchAlive: every range read's context carries the keep-alive that
// Alive calls, and Alive elsewhere does nothing.
func TestFetchAlive(t *testing.T) {
	Alive(context.Background())
	marked, err := fetchCtxFacts(t, false, func(ctx context.Context) bool {
		Alive(ctx)
		_, ok := ctx.Value(aliveKey{}).(func())
		return ok
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(marked) != 4 || slices.Contains(marked, false) {
		t.Errorf("keep-alive in range reads' contexts: %v; want 4 x true", marked)
	}
}

// Read buffers come in size classes from 4 KiB to copyBufSize: each range
// gets the smallest that holds it, a large one the largest.
func TestBufPools(t *testing.T) {
	if minBufSize<<(bufClasses-1) != copyBufSize {
		t.Fatalf("the last buffer class is %d bytes; want copyBufSize (%d)", minBufSize<<(bufClasses-1), copyBufSize)
	}
	var p bufPools
	for _, tc := range []struct{ n, want int64 }{
		{0, 4 << 10}, {1, 4 << 10}, {4 << 10, 4 << 10}, {4<<10 + 1, 8 << 10}, {100 << 10, 128 << 10},
		{copyBufSize, copyBufSize}, {64 << 20, copyBufSize},
	} {
		buf, put := p.get(tc.n)
		if int64(len(buf)) != tc.want {
			t.Errorf("get(%d) = %d bytes; want %d", tc.n, len(buf), tc.want)
		}
		put()
	}
}

// TestWatchdog cancels a range read that shows no progress for its
// timeout, not one kept alive past it, and never after stop.
func TestWatchdog(t *testing.T) {
	start := func(timeout time.Duration) (*watchdog, context.Context) {
		ctx, cancel := context.WithCancelCause(context.Background())
		t.Cleanup(func() { cancel(nil) })
		return startWatchdog(timeout, cancel), ctx
	}
	// Silent: cancelled with errStalled.
	w, ctx := start(20 * time.Millisecond)
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), errStalled) {
		t.Errorf("silent read's cause = %v; want errStalled", context.Cause(ctx))
	}
	w.stop()
	// Alive every 10 ms for three timeouts of half a second: never
	// cancelled (unless the machine stalls this goroutine for that long).
	w, ctx = start(500 * time.Millisecond)
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		w.alive()
		if ctx.Err() != nil {
			t.Fatalf("a read alive every 10 ms was cancelled: %v", context.Cause(ctx))
		}
	}
	w.stop()
	// Stopped: never cancelled afterwards.
	w, ctx = start(10 * time.Millisecond)
	w.stop()
	time.Sleep(50 * time.Millisecond)
	if ctx.Err() != nil {
		t.Errorf("a stopped watchdog cancelled its read: %v", context.Cause(ctx))
	}
}

// emptySource wraps a Source whose range readers, after their first n
// bytes, return neither bytes nor an error, for ever.
type emptySource struct {
	object.Source
	n int
}

func (s *emptySource) NewRangeReader(ctx context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	r, err := s.Source.NewRangeReader(ctx, o, off, n)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(io.LimitReader(r, int64(s.n)), emptyReader{}), r}, nil
}

// emptyReader's reads return (0, nil).
type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }

// TestFetchEmptyReadsEnd: a source whose reader stops returning bytes
// without an error (which io.Reader allows, and a broken one might do for
// ever) fails the fetch with io.ErrNoProgress rather than spinning: the
// loop has no other exit, as neither the watchdog nor the context is
// consulted between reads.
func TestFetchEmptyReadsEnd(t *testing.T) {
	dir, root := newTestDir(t)
	data := emulator.Pattern(11, 100<<10)
	writeFile(t, root, "b/f", data, t0)
	a, err := dir.Stat(context.Background(), object.Object{Bucket: "b", Name: "f"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = fetchFile(t, newDownloader(t, &emptySource{Source: dir, n: 1000}, fastConfig()), withCRC(a, data), nil)
	if !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("Fetch = %v; want io.ErrNoProgress", err)
	}
}
