package fetch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/api/googleapi"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
)

// gcsEnv is an emulator with one object, a GCS source and a Downloader.
type gcsEnv struct {
	s    *emulator.Server
	g    *GCS
	d    *Downloader
	a    object.Attrs
	data []byte
}

func newGCSEnv(t *testing.T, size int, cfg Config, opts emulator.Options) *gcsEnv {
	t.Helper()
	if opts.Versioned == nil {
		opts.Buckets = append(opts.Buckets, "bkt")
	}
	s := startEmulator(t, opts)
	g := newTestGCS(t, s.Endpoint())
	bucket := "bkt"
	if opts.Versioned != nil {
		bucket = opts.Versioned[0]
	}
	data := emulator.Pattern(42, size)
	a := putObject(t, s, g, bucket, "dir/obj", data)
	return &gcsEnv{s: s, g: g, d: newDownloader(t, g, cfg), a: a, data: data}
}

// faultOn returns a plan applying f to the listed 1-based media GETs.
func faultOn(f emulator.Fault, gets ...int) emulator.FaultPlan {
	return func(_ *http.Request, n int) emulator.Fault {
		for _, g := range gets {
			if n == g {
				return f
			}
		}
		return emulator.Fault{}
	}
}

// statuses returns a plan answering the first media GETs with codes, in
// order, and serving the object after that.
func statuses(codes ...int) emulator.FaultPlan {
	return func(_ *http.Request, n int) emulator.Fault {
		if n <= len(codes) {
			return emulator.Fault{Status: codes[n-1]}
		}
		return emulator.Fault{}
	}
}

// rangeLog records the Range header of every media GET.
func rangeLog(plan emulator.FaultPlan, log *recorder[string]) emulator.FaultPlan {
	return func(r *http.Request, n int) emulator.Fault {
		log.add(r.Header.Get("Range"))
		if plan == nil {
			return emulator.Fault{}
		}
		return plan(r, n)
	}
}

func TestFetchGCSSizes(t *testing.T) {
	const S = 64 << 10
	for _, size := range []int{0, 1, S, S + 1, 5*S + 3} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			e := newGCSEnv(t, size, fastConfig(), emulator.Options{})
			got, err := fetchFile(t, e.d, e.a, object.NewUrgency(object.Demand))
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			checkBytes(t, "Fetch", got, e.data)
			if want := int64((size + S - 1) / S); e.s.MediaGETs() != want {
				t.Errorf("media GETs = %d; want %d", e.s.MediaGETs(), want)
			}
		})
	}
}

func TestFetchGCSStatusFaults(t *testing.T) {
	cases := []struct {
		name     string
		plan     emulator.FaultPlan
		wantErr  int // HTTP code of the final error; 0 = success
		wantGETs int64
		cause    RetryCause
		retries  int64
	}{
		{"503 then ok", statuses(503, 503, 503), 0, 4, CauseServer, 3},
		{"429 then ok", statuses(429, 429), 0, 3, CauseThrottled, 2},
		{"500 502 then ok", statuses(500, 502), 0, 3, CauseServer, 2},
		{"408 then ok", statuses(408), 0, 2, CauseServer, 1},
		{"503 forever", statuses(503, 503, 503, 503, 503, 503), 503, 4, CauseServer, 3},
		{"400", statuses(400), 400, 1, CauseServer, 0},
		{"401", statuses(401), 401, 1, CauseServer, 0},
		{"403", statuses(403), 403, 1, CauseServer, 0},
		{"503 then 403", statuses(503, 403), 403, 2, CauseServer, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newGCSEnv(t, 50<<10, fastConfig(), emulator.Options{})
			e.s.SetFaults(tc.plan)
			got, err := fetchFile(t, e.d, e.a, nil)
			if tc.wantErr == 0 {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				checkBytes(t, "Fetch", got, e.data)
			} else {
				var apiErr *googleapi.Error
				if !errors.As(err, &apiErr) || apiErr.Code != tc.wantErr {
					t.Fatalf("Fetch error = %v; want a googleapi.Error %d", err, tc.wantErr)
				}
			}
			if n := e.s.MediaGETs(); n != tc.wantGETs {
				t.Errorf("media GETs = %d; want %d", n, tc.wantGETs)
			}
			if r := e.d.Stats().Retries[tc.cause.String()]; r != tc.retries {
				t.Errorf("Retries[%v] = %d; want %d", tc.cause, r, tc.retries)
			}
		})
	}
}

// TestFetchGCSBrokenBodies: bodies that break mid-stream are resumed, by
// the storage client itself or by the Downloader, and the bytes are intact.
func TestFetchGCSBrokenBodies(t *testing.T) {
	const size = 300 << 10
	cases := []struct {
		name   string
		plan   emulator.FaultPlan
		cause  RetryCause
		tries  int64  // Downloader retries of that cause
		resume string // Range of the second GET, if deterministic
	}{
		{"reset", faultOn(emulator.Fault{ResetAfter: 100 << 10}, 1), CauseNetwork, 0, ""},
		{"reset twice", faultOn(emulator.Fault{ResetAfter: 70 << 10}, 1, 2), CauseNetwork, 0, ""},
		{"fin", faultOn(emulator.Fault{CloseAfter: 100000}, 1), CauseNetwork, 0, "bytes=100000-307199"},
		{"reset then 503", func(_ *http.Request, n int) emulator.Fault {
			switch n {
			case 1:
				return emulator.Fault{ResetAfter: 100 << 10}
			case 2:
				return emulator.Fault{Status: 503}
			}
			return emulator.Fault{}
		}, CauseServer, 1, ""},
		{"truncated", faultOn(emulator.Fault{TruncateTo: 12345}, 1), CauseShortRead, 1, "bytes=12345-307199"},
		{"truncated twice", faultOn(emulator.Fault{TruncateTo: 1000}, 1, 2), CauseShortRead, 2, "bytes=1000-307199"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fastConfig()
			cfg.SliceSize = size // one range
			e := newGCSEnv(t, size, cfg, emulator.Options{})
			var log recorder[string]
			e.s.SetFaults(rangeLog(tc.plan, &log))
			got, err := fetchFile(t, e.d, e.a, nil)
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			checkBytes(t, "Fetch", got, e.data)
			ranges := log.all()
			if len(ranges) < 2 {
				t.Errorf("media GETs = %q; want a resumed read", ranges)
			} else if tc.resume != "" && ranges[1] != tc.resume {
				t.Errorf("second GET asked for %q; want %q (only the missing tail)", ranges[1], tc.resume)
			}
			if r := e.d.Stats().Retries[tc.cause.String()]; r != tc.tries {
				t.Errorf("Retries[%v] = %d; want %d", tc.cause, r, tc.tries)
			}
		})
	}
}

func TestFetchGCSCorruption(t *testing.T) {
	const size = 4*64<<10 + 100
	t.Run("once", func(t *testing.T) {
		e := newGCSEnv(t, size, fastConfig(), emulator.Options{})
		// GET 2 may be any slice; each is longer than 50 bytes.
		e.s.SetFaults(faultOn(emulator.Fault{Corrupt: true, CorruptAt: 50}, 2))
		got, err := fetchFile(t, e.d, e.a, nil)
		if err != nil {
			t.Fatalf("Fetch: %v", err)
		}
		checkBytes(t, "Fetch", got, e.data)
		st := e.d.Stats()
		if st.CRCFailures != 1 || st.Retries[CauseChecksum.String()] != 1 || e.s.MediaGETs() != 10 {
			t.Errorf("CRC failures %d, checksum retries %d, GETs %d; want 1, 1, 10",
				st.CRCFailures, st.Retries[CauseChecksum.String()], e.s.MediaGETs())
		}
	})
	t.Run("persistent", func(t *testing.T) {
		e := newGCSEnv(t, size, fastConfig(), emulator.Options{})
		e.s.SetFaults(func(*http.Request, int) emulator.Fault {
			return emulator.Fault{Corrupt: true, CorruptAt: 5}
		})
		_, err := fetchFile(t, e.d, e.a, nil)
		if !errors.Is(err, object.ErrChecksum) {
			t.Fatalf("Fetch error = %v; want ErrChecksum", err)
		}
		if st := e.d.Stats(); st.CRCFailures != DefaultChecksumAttempts || st.Failures != 1 {
			t.Errorf("CRC failures %d, failures %d; want %d, 1", st.CRCFailures, st.Failures, DefaultChecksumAttempts)
		}
	})
	// The middle byte of the response flipped twice, as a faulty proxy
	// does: the second round reads through other ranges, so the flips
	// land on other bytes, the reads disagree on two units, and the
	// object's CRC says which read of each is right: the third round reads
	// the one unit whose right bytes are not in place.
	t.Run("middle byte twice", func(t *testing.T) {
		const small = 100 << 10
		cfg := fastConfig()
		cfg.SliceSize = 1 << 20
		cfg.NoSplit = true // a split could re-read the flipped byte before the round ends
		e := newGCSEnv(t, small, cfg, emulator.Options{})
		e.s.SetFaults(faultOn(emulator.Fault{Corrupt: true, CorruptMiddle: true}, 1, 2))
		got, err := fetchFile(t, e.d, e.a, nil)
		if err != nil {
			t.Fatalf("Fetch: %v", err)
		}
		checkBytes(t, "Fetch", got, e.data)
		// GET 2 is either range of the second round; the third reads one
		// unit in one range.
		if st, n := e.d.Stats(), e.s.MediaGETs(); st.CRCFailures != 2 || n != 4 || st.Bytes != 2*small+unitFor(small, 1<<20) {
			t.Errorf("CRC failures %d, GETs %d, bytes %d; want 2, 4 (one range, two, then one unit), %d",
				st.CRCFailures, n, st.Bytes, 2*small+unitFor(small, 1<<20))
		}
	})
}

func TestFetchGCSStall(t *testing.T) {
	const size = 500 << 10
	cases := []struct {
		name   string
		fault  emulator.Fault
		resume string
	}{
		{"mid-body", emulator.Fault{StallAt: 100000, Stall: time.Minute}, "bytes=100000-511999"},
		{"before headers", emulator.Fault{HeaderWait: time.Minute}, "bytes=0-511999"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fastConfig()
			cfg.SliceSize = size
			cfg.StallTimeout = 300 * time.Millisecond
			e := newGCSEnv(t, size, cfg, emulator.Options{})
			var log recorder[string]
			e.s.SetFaults(rangeLog(faultOn(tc.fault, 1), &log))
			got, err := fetchFile(t, e.d, e.a, nil)
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			checkBytes(t, "Fetch", got, e.data)
			// On a loaded machine a retry may itself be slow enough to
			// count as a stall; at least the injected one must be seen.
			st := e.d.Stats()
			if st.Stalls < 1 || st.Retries[CauseStall.String()] != st.Stalls {
				t.Errorf("Stalls %d, stall retries %d; want equal and at least 1", st.Stalls, st.Retries[CauseStall.String()])
			}
			if ranges := log.all(); len(ranges) < 2 || ranges[1] != tc.resume {
				t.Errorf("media GET ranges = %q; want the second to be %q", ranges, tc.resume)
			}
		})
	}
}

// TestFetchGCSOverwritten: the object is replaced while its third slice is
// requested. Without versioning the download fails with
// object.ErrGenerationChanged; with it, the pinned generation completes intact.
func TestFetchGCSOverwritten(t *testing.T) {
	for _, versioned := range []bool{false, true} {
		t.Run(fmt.Sprintf("versioned=%v", versioned), func(t *testing.T) {
			cfg := fastConfig()
			cfg.Connections = 1 // slices in order
			var opts emulator.Options
			if versioned {
				opts.Versioned = []string{"vbkt"}
			}
			e := newGCSEnv(t, 8*64<<10, cfg, opts)
			var once sync.Once
			e.s.SetFaults(func(_ *http.Request, n int) emulator.Fault {
				if n == 3 {
					once.Do(func() {
						if _, err := e.s.Put(e.a.Bucket, e.a.Name, emulator.Pattern(7, 100)); err != nil {
							t.Errorf("overwrite: %v", err)
						}
					})
				}
				return emulator.Fault{}
			})
			got, err := fetchFile(t, e.d, e.a, nil)
			if versioned {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				checkBytes(t, "Fetch of the pinned generation", got, e.data)
				return
			}
			if !errors.Is(err, object.ErrGenerationChanged) {
				t.Fatalf("Fetch error = %v; want ErrGenerationChanged", err)
			}
			if n := e.s.MediaGETs(); n != 3 {
				t.Errorf("media GETs = %d; want 3 (no retry after the generation vanished)", n)
			}
		})
	}
}

// TestFetchGCSOverwrittenDuringResume: a body breaks, and before the
// storage client's own resume the object is replaced; the failed resume
// surfaces from Read as object.ErrGenerationChanged.
func TestFetchGCSOverwrittenDuringResume(t *testing.T) {
	cfg := fastConfig()
	cfg.SliceSize = 300 << 10
	e := newGCSEnv(t, 300<<10, cfg, emulator.Options{})
	e.s.SetFaults(func(_ *http.Request, n int) emulator.Fault {
		switch n {
		case 1:
			return emulator.Fault{CloseAfter: 100 << 10}
		case 2:
			if _, err := e.s.Put(e.a.Bucket, e.a.Name, emulator.Pattern(7, 100)); err != nil {
				t.Errorf("overwrite: %v", err)
			}
		}
		return emulator.Fault{}
	})
	_, err := fetchFile(t, e.d, e.a, nil)
	if !errors.Is(err, object.ErrGenerationChanged) || !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("Fetch error = %v; want object.ErrGenerationChanged and ErrNotFound", err)
	}
	if n := e.s.MediaGETs(); n != 2 {
		t.Errorf("media GETs = %d; want 2 (the client's resume, then no retry)", n)
	}
}

// TestFetchGCSBudget fetches several many-slice objects at once under a
// budget of 2 and counts concurrent range reads at the server.
func TestFetchGCSBudget(t *testing.T) {
	s := startEmulator(t, emulator.Options{Buckets: []string{"bkt"}, Shape: emulator.Shape{FirstByte: time.Millisecond}})
	proxy := newInflightProxy(t, s.Addr())
	g := newTestGCS(t, proxy.url)
	cfg := fastConfig()
	cfg.Connections = 2
	cfg.SliceSize = 16 << 10
	d := newDownloader(t, g, cfg)
	var wg sync.WaitGroup
	want := make([][]byte, 4)
	dsts := make([]*memWriterAt, 4)
	for i := range 4 {
		want[i] = emulator.Pattern(uint64(i), 16*16<<10+5)
		a := putObject(t, s, g, "bkt", fmt.Sprint("obj", i), want[i])
		dsts[i] = &memWriterAt{b: make([]byte, len(want[i]))}
		wg.Go(func() {
			if err := d.Fetch(context.Background(), a, dsts[i], object.NewUrgency(object.Priority(i%3))); err != nil {
				t.Errorf("Fetch(%s): %v", a.Name, err)
			}
		})
	}
	wg.Wait()
	for i := range 4 {
		checkBytes(t, fmt.Sprint("obj", i), dsts[i].b, want[i])
	}
	if p := proxy.peak.Load(); p > 2 {
		t.Errorf("peak concurrent range reads at the server = %d; want ≤ 2", p)
	} else {
		t.Logf("peak concurrent range reads: %d of 2 (%d requests)", p, proxy.total.Load())
	}
	if n := proxy.total.Load(); n != 4*17 {
		t.Errorf("range reads = %d; want %d", n, 4*17)
	}
}

func TestFetchGCSCancel(t *testing.T) {
	e := newGCSEnv(t, 300<<10, fastConfig(), emulator.Options{})
	started := make(chan struct{}, 10)
	e.s.SetFaults(func(*http.Request, int) emulator.Fault {
		started <- struct{}{}
		return emulator.Fault{StallAt: 1000, Stall: time.Minute}
	})
	ctx, cancel := context.WithCancel(context.Background())
	dst := tempDst(t)
	done := async(t, func() error { return e.d.Fetch(ctx, e.a, dst, nil) })
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Fetch error = %v; want context.Canceled", err)
	}
	checkNoFetchGoroutines(t)
	if st := e.d.Stats(); st.ConnsInUse != 0 || st.WaitingSlices != 0 || st.Stalls != 0 {
		t.Errorf("Stats = %+v; want no conns, waiters or stalls", st)
	}
}

func TestFetchGCSENOSPC(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	cfg := fastConfig()
	cfg.Connections = 1
	e := newGCSEnv(t, 100<<10, cfg, emulator.Options{})
	if err := e.d.Fetch(context.Background(), e.a, full, nil); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Fetch error = %v; want ENOSPC", err)
	}
	if n := e.s.MediaGETs(); n != 1 {
		t.Errorf("media GETs = %d; want 1 (no retry)", n)
	}
}
