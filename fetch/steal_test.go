package fetch

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
)

// stealEnv is a shaped emulator holding a large and a small object, and a
// two-connection Downloader whose slices hold either object whole.
type stealEnv struct {
	d          *Downloader
	big, small object.Attrs
	bigData    []byte
	smallData  []byte
	ranges     *recorder[string]
	endpoint   string // the emulator's
}

func newStealEnv(t *testing.T, conns int, plan emulator.FaultPlan) *stealEnv {
	t.Helper()
	e := &stealEnv{ranges: &recorder[string]{}}
	s := startEmulator(t, emulator.Options{Buckets: []string{"bkt"},
		Shape:  emulator.Shape{FirstByte: 5 * time.Millisecond, BytesPerSec: 50e6},
		Faults: rangeLog(plan, e.ranges)})
	g := newTestGCS(t, s.Endpoint())
	e.endpoint = s.Endpoint()
	e.bigData, e.smallData = emulator.Pattern(1, 24<<20+12345), emulator.Pattern(2, 256<<10)
	e.big = withCRC(putObject(t, s, g, "bkt", "big", e.bigData), e.bigData)
	e.small = withCRC(putObject(t, s, g, "bkt", "small", e.smallData), e.smallData)
	cfg := fastConfig()
	cfg.SliceSize, cfg.Connections = 64<<20, conns
	// The small object holds a connection like the big one: its slot is
	// the one that frees up first.
	cfg.SmallObjectSize = NoSmallLane
	e.d = newDownloader(t, g, cfg)
	return e
}

// fetchBoth fetches the big and the small object at once and checks both.
func (e *stealEnv) fetchBoth(t *testing.T) {
	t.Helper()
	bigDone := make(chan []byte, 1)
	errc := async(t, func() error {
		b, err := fetchFile(t, e.d, e.big, nil)
		bigDone <- b
		return err
	})
	// The big download holds its connection first, and has received enough
	// (1 MiB, 20 ms at the shaped rate) for its rate to be measured.
	for deadline := time.Now().Add(10 * time.Second); e.d.Stats().Bytes < 1<<20; {
		if time.Now().After(deadline) {
			t.Fatal("the big object's read never got going")
		}
		runtime.Gosched()
	}
	got, err := fetchFile(t, e.d, e.small, nil)
	if err != nil {
		t.Fatalf("small: %v", err)
	}
	checkBytes(t, "small", got, e.smallData)
	if err := <-errc; err != nil {
		t.Fatalf("big: %v", err)
	}
	checkBytes(t, "big", <-bigDone, e.bigData)
	checkNoFetchGoroutines(t)
}

// A connection freed while nothing waits takes the second half of the
// range with the most left; the object still assembles and verifies.
func TestStealSplitsTail(t *testing.T) {
	e := newStealEnv(t, 2, nil)
	e.fetchBoth(t)
	st := e.d.Stats()
	if st.Splits < 1 {
		t.Fatalf("stats %+v: no range was split", st)
	}
	mid := 0
	for _, r := range e.ranges.all() {
		if r != "" && !strings.HasPrefix(r, "bytes=0-") {
			mid++
		}
	}
	if mid < 1 {
		t.Errorf("ranges %q: none starts inside the big object", e.ranges.all())
	}
	if st.ConnsInUse != 0 || st.WaitingSlices != 0 {
		t.Errorf("after the downloads: %d slots in use, %d waiting", st.ConnsInUse, st.WaitingSlices)
	}
}

// Splits and retries together: the big object's first read and the first
// range split off it end early (a body shorter than asked, which the
// Downloader retries itself), so a range that was split resumes up to its
// new end, and a split range resumes.
func TestStealWithShortReads(t *testing.T) {
	var first, split sync.Once
	plan := func(r *http.Request, _ int) emulator.Fault {
		f := emulator.Fault{}
		if !strings.Contains(r.URL.Path, "big") {
			return f
		}
		if rg := r.Header.Get("Range"); rg == "" || strings.HasPrefix(rg, "bytes=0-") {
			first.Do(func() { f.TruncateTo = 6 << 20 })
		} else {
			split.Do(func() { f.TruncateTo = 2 << 20 })
		}
		return f
	}
	e := newStealEnv(t, 2, plan)
	e.fetchBoth(t)
	st := e.d.Stats()
	if st.Splits < 1 || st.Retries[CauseShortRead.String()] < 2 {
		t.Errorf("stats %+v: want splits and two short-read retries; ranges %q", st, e.ranges.all())
	}
}

// One object alone on an idle Downloader spreads over its connections as
// soon as its rate is known, instead of streaming on one until it ends.
func TestSpreadOneObject(t *testing.T) {
	e := newStealEnv(t, 4, nil)
	got, err := fetchFile(t, e.d, e.big, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkBytes(t, "big", got, e.bigData)
	checkNoFetchGoroutines(t)
	if st := e.d.Stats(); st.Splits < 2 || st.ConnsInUse != 0 {
		t.Errorf("stats %+v: want the object split over the idle connections; ranges %q", st, e.ranges.all())
	}
}

// With NoSplit, idle connections stay idle: the object is read as the
// one range it was asked as.
func TestNoSplit(t *testing.T) {
	e := newStealEnv(t, 4, nil)
	cfg := fastConfig()
	cfg.SliceSize, cfg.Connections, cfg.SmallObjectSize, cfg.NoSplit = 64<<20, 4, NoSmallLane, true
	g := newTestGCS(t, e.endpoint)
	d := newDownloader(t, g, cfg)
	got, err := fetchFile(t, d, e.big, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkBytes(t, "big", got, e.bigData)
	if st := d.Stats(); st.Splits != 0 || st.Ranges != 1 {
		t.Errorf("stats %+v: want one range, no split; ranges %q", st, e.ranges.all())
	}
}

// With a download waiting for the freed connection, it gets it: no split.
func TestStealNotWhileWaiting(t *testing.T) {
	e := newStealEnv(t, 1, nil)
	e.fetchBoth(t)
	if st := e.d.Stats(); st.Splits != 0 {
		t.Errorf("stats %+v: a range was split while a download waited", st)
	}
}

func TestSliceSplit(t *testing.T) {
	s := &slice{off: 1 << 20, n: 3 * minSteal, done: minSteal}
	ns := s.split()
	if ns == nil {
		t.Fatal("split of 2*minSteal unwritten bytes: nil")
	}
	if ns.off%stealAlign != 0 || s.off+s.n != ns.off || ns.off+ns.n != 1<<20+3*minSteal {
		t.Errorf("split into [%d, +%d) and [%d, +%d)", s.off, s.n, ns.off, ns.n)
	}
	if s.n-s.done < minSteal/2-stealAlign || ns.n < minSteal/2 {
		t.Errorf("halves of %d and %d unwritten bytes; want about %d each", s.n-s.done, ns.n, minSteal)
	}
	small := &slice{off: 0, n: minSteal - 1}
	if small.split() != nil || small.n != minSteal-1 {
		t.Errorf("a range with less than minSteal left was split")
	}
	if (&slice{off: 0, n: 2 * minSteal, done: minSteal + 1}).split() != nil {
		t.Error("a range with less than minSteal unwritten was split")
	}
}

func TestWorthSplitting(t *testing.T) {
	for _, tc := range []struct {
		left, ttfb time.Duration
		want       bool
	}{
		{400 * time.Millisecond, 20 * time.Millisecond, true},
		{80 * time.Millisecond, 20 * time.Millisecond, false}, // half of it is only 2 × the first byte
		{81 * time.Millisecond, 20 * time.Millisecond, true},
		{time.Second, 0, false}, // no first byte seen yet
		{0, time.Millisecond, false},
	} {
		if got := worthSplitting(tc.left, tc.ttfb); got != tc.want {
			t.Errorf("worthSplitting(%v, %v) = %v; want %v", tc.left, tc.ttfb, got, tc.want)
		}
	}
}

func TestSliceTimeLeft(t *testing.T) {
	now := time.Now()
	s := &slice{n: 64 << 20, done: 4 << 20}
	if got := s.timeLeft(now); got != 0 {
		t.Errorf("before the first byte: %v; want 0", got)
	}
	s.receiving(now.Add(-100 * time.Millisecond)) // 2 MiB in the last 100 ms, 60 MiB to go
	s.done += 2 << 20
	if got := s.timeLeft(now); got < 2900*time.Millisecond || got > 2950*time.Millisecond {
		t.Errorf("58 MiB left at 20 MiB/s: %v; want 2.9 s", got)
	}
	s.done = s.n - minSteal + 1
	if got := s.timeLeft(now); got != 0 {
		t.Errorf("less than minSteal left: %v; want 0", got)
	}
}

// peekSource calls peek before each range read.
type peekSource struct {
	object.Source
	peek func(o object.Object)
}

func (p peekSource) NewRangeReader(ctx context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	p.peek(o)
	return p.Source.NewRangeReader(ctx, o, off, n)
}

// Only a range that can be split (minSteal or more) is tracked for steal:
// a small object's, on the main lane, is not scanned by every freed
// connection.
func TestStealTracksOnlySplittable(t *testing.T) {
	s := startEmulator(t, emulator.Options{Buckets: []string{"bkt"}})
	g := newTestGCS(t, s.Endpoint())
	smallData, bigData := emulator.Pattern(1, 256<<10), emulator.Pattern(2, minSteal+1)
	small := withCRC(putObject(t, s, g, "bkt", "small", smallData), smallData)
	big := withCRC(putObject(t, s, g, "bkt", "big", bigData), bigData)
	var d *Downloader
	tracked := map[string]int{}
	src := peekSource{Source: g, peek: func(o object.Object) {
		d.stealMu.Lock()
		tracked[o.Name] = len(d.inflight)
		d.stealMu.Unlock()
	}}
	cfg := fastConfig()
	cfg.SliceSize, cfg.SmallObjectSize = 64<<20, NoSmallLane
	d = newDownloader(t, src, cfg)
	for _, a := range []object.Attrs{small, big} {
		if _, err := fetchFile(t, d, a, nil); err != nil {
			t.Fatal(err)
		}
	}
	if tracked["small"] != 0 || tracked["big"] != 1 {
		t.Errorf("ranges tracked while reading: %v; want small 0, big 1", tracked)
	}
}
