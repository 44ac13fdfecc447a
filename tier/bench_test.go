package tier

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

// seedEntries creates n cached objects in dir as a closed cache leaves them
// (small files and their index records, written in one batch), quickly.
func seedEntries(tb testing.TB, dir string, n int) {
	tb.Helper()
	lay := newLayout(dir)
	if err := lay.create(); err != nil {
		tb.Fatal(err)
	}
	keys := make([]string, n)
	recs := make([]record, n)
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var g errgroup.Group
	const workers = 4
	for w := range workers {
		g.Go(func() error {
			for i := w; i < n; i += workers {
				name := fmt.Sprintf("train/shard-%06d.npy", i)
				gen := int64(1_700_000_000_000_000 + i)
				data := pattern(i, 1+i%200)
				p := lay.path(idOf("bkt", name, gen))
				if err := os.WriteFile(p, data, 0o644); err != nil {
					return err
				}
				fi, err := os.Stat(p)
				if err != nil {
					return err
				}
				keys[i] = indexKey("bkt", name)
				recs[i] = record{gen: gen, size: int64(len(data)), blocks: blocksOf(fi),
					updated: base, checked: base, access: base + int64(i)}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
	x, err := openIndex(lay.index, newDirEnvLogger())
	if err != nil {
		tb.Fatal(err)
	}
	if err := x.putBatch(keys, recs); err != nil {
		tb.Fatal(err)
	}
	if err := x.close(); err != nil {
		tb.Fatal(err)
	}
}

// rawScan is the baseline: list and stat every data file, the least any
// reconcile must do.
func rawScan(tb testing.TB, dir string) int {
	tb.Helper()
	n := 0
	data := filepath.Join(dir, dataName)
	for i := range 256 {
		sub := filepath.Join(data, fmt.Sprintf("%02x", i))
		des, err := os.ReadDir(sub)
		if err != nil {
			tb.Fatal(err)
		}
		for _, de := range des {
			if _, err := de.Info(); err != nil {
				tb.Fatal(err)
			}
			n++
		}
	}
	return n
}

// BenchmarkReopen100k measures Open of a cache holding 100k entries (the
// reconcile re-adopts them all, downloading nothing) against a bare scan of
// the data files, and the RSS of a fresh process after such an Open.
func BenchmarkReopen100k(b *testing.B) {
	const n = 100_000
	dir := b.TempDir()
	seedEntries(b, dir, n)
	env := newDirEnv(b)
	cfg := env.config(dir, 0)

	start := time.Now()
	if got := rawScan(b, dir); got != n {
		b.Fatalf("raw scan found %d files; want %d", got, n)
	}
	baseline := time.Since(start)

	perOpen := timeOpens(b, env, cfg, n)
	b.ReportMetric(perOpen, "s/open")
	b.ReportMetric(baseline.Seconds(), "s/rawscan")
	b.ReportMetric(perOpen/baseline.Seconds(), "open/rawscan")

	rss, hwm, childOpen := reopenInChild(b, dir)
	b.ReportMetric(rss, "MB-rss")
	b.ReportMetric(hwm, "MB-peak-rss")
	b.ReportMetric(childOpen, "s/open-cold-process")
}

// timeOpens opens (and closes) the cache of cfg b.N times, checking that it
// adopts n entries and downloads nothing, and returns the mean seconds
// per Open.
func timeOpens(b *testing.B, env *dirEnv, cfg Config, n int64) float64 {
	b.Helper()
	var opens time.Duration
	for b.Loop() {
		start := time.Now()
		c, err := Open(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		opens += time.Since(start)
		b.StopTimer()
		if st := c.Stats().Base(); st.Entries != n {
			b.Fatalf("entries = %d; want %d", st.Entries, n)
		}
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	if env.dl.calls.Load() != 0 {
		b.Fatalf("downloads = %d; want 0", env.dl.calls.Load())
	}
	return opens.Seconds() / float64(b.N)
}

// reopenInChild opens the cache in dir in a fresh process (this test binary
// running TestReopenChild) and returns its RSS and peak RSS in MB after Open
// and how long Open took there.
func reopenInChild(tb testing.TB, dir string) (rss, hwm, secs float64) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestReopenChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TIER_REOPEN_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("child: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "detail ") {
			tb.Log(sc.Text())
		}
		if _, err := fmt.Sscanf(sc.Text(), "reopen rss_kb=%g hwm_kb=%g open_s=%g", &rss, &hwm, &secs); err == nil {
			return rss / 1024, hwm / 1024, secs
		}
	}
	tb.Fatalf("child printed no measurement:\n%s", out)
	return 0, 0, 0
}

// TestReopenChild is the child process of BenchmarkReopen100k; it does
// nothing unless $TIER_REOPEN_DIR is set.
func TestReopenChild(t *testing.T) {
	dir := os.Getenv("TIER_REOPEN_DIR")
	if dir == "" {
		t.Skip("run by BenchmarkReopen100k")
	}
	env := newDirEnv(t)
	start := time.Now()
	c, err := Open(context.Background(), env.config(dir, 1<<50))
	if err != nil {
		t.Fatal(err)
	}
	secs := time.Since(start).Seconds()
	rss, hwm := procStatus(t, "VmRSS:"), procStatus(t, "VmHWM:")
	if os.Getenv("TIER_REOPEN_DETAIL") != "" {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Printf("detail anon_kb=%d file_kb=%d heap_inuse_mb=%d heap_idle_unreleased_mb=%d\n",
			procStatus(t, "RssAnon:"), procStatus(t, "RssFile:"), ms.HeapInuse>>20, (ms.HeapIdle-ms.HeapReleased)>>20)
	}
	fmt.Printf("reopen rss_kb=%d hwm_kb=%d open_s=%.3f\n", rss, hwm, secs)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// procStatus returns a kB field of /proc/self/status.
func procStatus(tb testing.TB, field string) int64 {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field); ok {
			v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return v
		}
	}
	tb.Fatalf("no %s in /proc/self/status", field)
	return 0
}
