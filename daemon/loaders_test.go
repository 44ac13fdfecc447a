package daemon

import (
	"bufio"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/synth"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// TestLoaderStatsMetrics runs one epoch of a real loader in this process
// against the daemon (leases through mmapstore, plan, stats and staging
// through the control client) and checks that the daemon's metrics and
// status sum what the loader reported.
func TestLoaderStatsMetrics(t *testing.T) {
	data := synth.Uniform(4, 12, 32) // 48 samples
	var objs []fakestorage.Object
	err := data.Write("train/", func(name string, b []byte) error {
		objs = append(objs, fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bkt", Name: name}, Content: b})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	emu := startEmulator(t, objs)
	d := startDaemon(t, testConfig(t.TempDir(), emu))
	c := dial(t, d)
	ctx := testCtx(t)
	var _ loader.StatsReporter = c

	src, err := fetch.NewGCS(ctx, fetch.GCSConfig{Endpoint: emu.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ds, err := loader.FromPattern(ctx, src, "bkt", "train/", synth.Pattern)
	if err != nil {
		t.Fatal(err)
	}
	store := mmapstore.New(c, mmapstore.Config{})
	defer store.Close()
	const id = "job1/rank0"
	l, err := loader.New(loader.FromStore(store), loader.Config{Dataset: ds, BatchSize: 5, Seed: 3,
		Planner: c, Stager: c, PlanID: id})
	if err != nil {
		t.Fatal(err)
	}
	var samples int64
	for {
		b, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		samples += int64(b.Len())
		b.Release()
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ls := l.Stats()
	if samples != data.Samples() || ls.Samples != samples || ls.PlanErrors != 0 {
		t.Fatalf("loader delivered %d samples (stats %+v); want %d and no plan errors", samples, ls, data.Samples())
	}

	got := scrape(t, "http://"+d.MetricsAddr()+"/metrics")
	want := map[string]float64{
		"cacheagent_loader_samples_total":                        float64(ls.Samples),
		"cacheagent_loader_batches_total":                        float64(ls.Batches),
		"cacheagent_loader_bytes_total":                          float64(ls.Bytes),
		`cacheagent_loader_stall_seconds_total{cause="fetch"}`:   ls.WaitFetch.Seconds(),
		`cacheagent_loader_stall_seconds_total{cause="promote"}`: ls.WaitPromote.Seconds(),
		`cacheagent_loader_stall_seconds_total{cause="gather"}`:  ls.WaitGather.Seconds(),
		`cacheagent_loader_stall_seconds_total{cause="other"}`:   ls.WaitOther.Seconds(),
		"cacheagent_loader_plans":                                0, // dropped at Close
	}
	for series, v := range want {
		g, ok := got[series]
		if !ok || math.Abs(g-v) > 1e-6 {
			t.Errorf("%s = %v (present %v); want %v", series, g, ok, v)
		}
	}

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Loaders == nil || st.Loaders.Reporting != 0 || st.Loaders.Totals.Samples != ls.Samples ||
		st.Loaders.Totals.Batches != ls.Batches {
		t.Errorf("status loaders = %+v; want none reporting and totals of %d samples, %d batches",
			st.Loaders, ls.Samples, ls.Batches)
	}
	if err := c.ReportStats(ctx, id, ls); !errors.Is(err, control.ErrNotFound) {
		t.Errorf("ReportStats of a dropped plan = %v; want ErrNotFound", err)
	}
}

// TestReportStatsRoute checks a plan's reports through the API: the
// reporting gauge, a refused negative total, and an unknown plan.
func TestReportStatsRoute(t *testing.T) {
	emu := startEmulator(t, dataset("bkt", "p/", 2, 1000))
	d := startDaemon(t, testConfig(t.TempDir(), emu))
	c := dial(t, d)
	ctx := testCtx(t)
	if err := c.Plan(ctx, "p", []object.Object{{Bucket: "bkt", Name: "p/00"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.ReportStats(ctx, "p", stats.Loader{Batches: 2, Samples: 16}); err != nil {
		t.Fatal(err)
	}
	if n, tot := d.plans.loaderTotals(); n != 1 || tot.Samples != 16 {
		t.Errorf("loader totals = %d reporting, %+v; want 1 plan reporting, 16 samples", n, tot)
	}
	if p, ok := d.plans.get("p"); !ok || p.Stats == nil || p.Stats.Samples != 16 {
		t.Errorf("GET /v1/plans/p = %+v, %v; want the last report (16 samples)", p, ok)
	}
	if err := c.ReportStats(ctx, "p", stats.Loader{Batches: -1}); !errors.Is(err, control.ErrInvalid) {
		t.Errorf("ReportStats(negative) = %v; want ErrInvalid", err)
	}
	if err := c.ReportStats(ctx, "nope", stats.Loader{}); !errors.Is(err, control.ErrNotFound) {
		t.Errorf("ReportStats(unknown plan) = %v; want ErrNotFound", err)
	}
	if err := c.DropPlan(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if n, tot := d.plans.loaderTotals(); n != 0 || tot.Samples != 16 {
		t.Errorf("loader totals after drop = %d reporting, %+v; want none reporting, 16 samples kept", n, tot)
	}
}

// TestStatsGrowth checks the delta logic: growth adds, a report below the
// last one (a restarted loader) counts from zero, a replaced plan keeps
// its last report, and a dropped plan forgets it.
func TestStatsGrowth(t *testing.T) {
	s := newPlanStore()
	if s.report("p", stats.Loader{Samples: 1}) {
		t.Fatal("report of an unknown plan accepted")
	}
	s.put(control.Plan{ID: "p", Objects: 4})
	steps := []struct {
		name string
		rep  stats.Loader
		want stats.Loader // totals after it
	}{
		{"first", stats.Loader{Batches: 2, Samples: 10, Wait: time.Second, WaitFetch: time.Second},
			stats.Loader{Batches: 2, Samples: 10, Wait: time.Second, WaitFetch: time.Second}},
		{"growth", stats.Loader{Batches: 4, Samples: 20, Wait: 1500 * time.Millisecond, WaitFetch: time.Second, WaitOther: 500 * time.Millisecond},
			stats.Loader{Batches: 4, Samples: 20, Wait: 1500 * time.Millisecond, WaitFetch: time.Second, WaitOther: 500 * time.Millisecond}},
		{"same again", stats.Loader{Batches: 4, Samples: 20, Wait: 1500 * time.Millisecond, WaitFetch: time.Second, WaitOther: 500 * time.Millisecond},
			stats.Loader{Batches: 4, Samples: 20, Wait: 1500 * time.Millisecond, WaitFetch: time.Second, WaitOther: 500 * time.Millisecond}},
		{"restart", stats.Loader{Batches: 1, Samples: 5, Wait: 2 * time.Second, WaitFetch: 2 * time.Second},
			stats.Loader{Batches: 5, Samples: 25, Wait: 3500 * time.Millisecond, WaitFetch: 3 * time.Second, WaitOther: 500 * time.Millisecond}},
	}
	for _, st := range steps {
		if !s.report("p", st.rep) {
			t.Fatalf("%s: report refused", st.name)
		}
		if n, got := s.loaderTotals(); n != 1 || got != st.want {
			t.Errorf("%s: %d reporting, totals %+v; want 1, %+v", st.name, n, got, st.want)
		}
	}
	s.put(control.Plan{ID: "p", Objects: 4}) // the next epoch's plan
	s.report("p", stats.Loader{Batches: 2, Samples: 9, Wait: 2 * time.Second, WaitFetch: 2 * time.Second})
	if _, got := s.loaderTotals(); got.Samples != 29 || got.Batches != 6 {
		t.Errorf("after a replaced plan: totals %+v; want 29 samples, 6 batches (growth only)", got)
	}
	if !s.remove("p") {
		t.Fatal("remove of a known plan = false")
	}
	if n, got := s.loaderTotals(); n != 0 || got.Samples != 29 {
		t.Errorf("after drop: %d reporting, totals %+v; want 0 and the totals kept", n, got)
	}
	if s.report("p", stats.Loader{Samples: 50}) {
		t.Error("report of a dropped plan accepted")
	}
	s.put(control.Plan{ID: "p", Objects: 4})
	s.report("p", stats.Loader{Samples: 50})
	if _, got := s.loaderTotals(); got.Samples != 79 {
		t.Errorf("a re-announced dropped plan's first report: totals %d samples; want 79 (counted in full)", got.Samples)
	}
}

// scrape fetches a Prometheus text exposition and returns its samples by
// series (name and labels as written).
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	out := make(map[string]float64)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
