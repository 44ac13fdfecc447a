package daemon

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/object"
)

// TestPrefetchJobWatch starts a prefetch job, follows it to the end and
// checks its progress and that everything is cached.
func TestPrefetchJobWatch(t *testing.T) {
	objs := dataset("bkt", "set/", 6, 200_000)
	emu := startEmulator(t, objs)
	d := startDaemon(t, testConfig(t.TempDir(), emu))
	c := dial(t, d)
	ctx := testCtx(t)
	j, err := c.Prefetch(ctx, "bkt", "set/", object.Plan)
	if err != nil {
		t.Fatal(err)
	}
	if j.Kind != control.KindPrefetch || j.Priority != "plan" || j.URI != "gs://bkt/set/" {
		t.Errorf("job = %+v; want a plan-priority prefetch of gs://bkt/set/", j)
	}
	var seen []control.Job
	final, err := c.WatchJob(ctx, j.ID, func(j control.Job) { seen = append(seen, j) })
	if err != nil {
		t.Fatal(err)
	}
	if final.State != control.JobDone || final.Progress.ObjectsDone != 6 || final.Progress.Objects != 6 ||
		final.Progress.Listing || final.Listed != 6 || final.Finished.IsZero() {
		t.Errorf("final job = %+v; want done with 6/6 objects, all 6 listed", final)
	}
	if len(seen) == 0 || seen[len(seen)-1].State != control.JobDone {
		t.Errorf("watch saw %d snapshots, the last not final", len(seen))
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].Progress.ObjectsDone < seen[i-1].Progress.ObjectsDone {
			t.Errorf("progress went backwards: %d after %d", seen[i].Progress.ObjectsDone, seen[i-1].Progress.ObjectsDone)
		}
	}
	res, err := c.List(ctx, "bkt", "set/")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range res.Objects {
		if o.Tier != "disk" {
			t.Errorf("%s in tier %q after the job; want disk", o.Name, o.Tier)
		}
	}
	js, err := c.Jobs(ctx)
	if err != nil || len(js) != 1 || js[0].ID != j.ID {
		t.Errorf("Jobs = %v, %v; want the one job", js, err)
	}
}

// TestCancelJob cancels a job whose downloads are held by the emulator,
// then closes the daemon, which stops those downloads: no temp file stays.
func TestCancelJob(t *testing.T) {
	started := make(chan struct{}, 1)
	emu := cachetest.Emulator(t, emulator.Options{Objects: dataset("bkt", "slow/", 2, 100_000),
		Faults: func(_ *http.Request, _ int) emulator.Fault {
			select {
			case started <- struct{}{}:
			default:
			}
			return emulator.Fault{HeaderWait: time.Hour} // until the request is cancelled
		}})
	d := startDaemon(t, testConfig(t.TempDir(), emu))
	c := dial(t, d)
	ctx := testCtx(t)
	j, err := c.Prefetch(ctx, "bkt", "slow/", object.Warm)
	if err != nil {
		t.Fatal(err)
	}
	await(t, started, "a download to start")
	if err := c.CancelJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	final, err := c.WatchJob(ctx, j.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if final.State != control.JobCancelled || final.Error == "" {
		t.Errorf("cancelled job = %+v; want state cancelled with an error", final)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tmp, _ := filepath.Glob(filepath.Join(d.Config().Tiers.Disk.Dir, "data", "tmp", "*"))
	if len(tmp) != 0 {
		t.Errorf("temp files left after Close: %v", tmp)
	}
}

// TestPlanAndStage drives the daemon the way a loader in another process
// does: announce a plan, advance it, fetch and promote a shard, drop the
// plan.
func TestPlanAndStage(t *testing.T) {
	emu := startEmulator(t, dataset("bkt", "p/", 5, 1000))
	d := startDaemon(t, testConfig(t.TempDir(), emu))
	c := dial(t, d)
	ctx := testCtx(t)
	var (
		_ loader.Planner = c
		_ loader.Stager  = c
	)
	var objs []object.Object
	for _, n := range []string{"p/03", "p/01", "p/00", "p/04"} {
		objs = append(objs, object.Object{Bucket: "bkt", Name: n})
	}
	const id = "job7/rank0"
	if err := c.Plan(ctx, id, objs); err != nil {
		t.Fatal(err)
	}
	if err := c.AdvancePlan(ctx, id, 2); err != nil {
		t.Fatal(err)
	}
	ps, err := c.Plans(ctx)
	if err != nil || len(ps) != 1 || ps[0].ID != id || ps[0].Objects != 4 || ps[0].Position != 2 {
		t.Fatalf("Plans = %+v, %v; want %q with 4 objects at position 2", ps, err, id)
	}
	if st, err := c.Status(ctx); err != nil || st.Plans != 1 {
		t.Errorf("status plans = %d, %v; want 1", st.Plans, err)
	}
	if err := c.Fetch(ctx, objs[2:]); err != nil {
		t.Fatal(err)
	}
	res, err := c.List(ctx, "bkt", "p/00")
	if err != nil || len(res.Objects) != 1 || res.Objects[0].Tier != "disk" {
		t.Errorf("p/00 after Fetch: %+v, %v; want it on disk", res.Objects, err)
	}
	if err := c.Promote(ctx, objs[2:]); err != nil {
		t.Errorf("Promote without a shm tier = %v; want nil", err)
	}
	if err := c.DropPlan(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := c.DropPlan(ctx, id); !errors.Is(err, control.ErrNotFound) {
		t.Errorf("second DropPlan = %v; want ErrNotFound", err)
	}
	if err := c.AdvancePlan(ctx, id, 3); !errors.Is(err, control.ErrNotFound) {
		t.Errorf("AdvancePlan of a dropped plan = %v; want ErrNotFound", err)
	}
}

// TestSocket checks the socket's mode, that a second daemon cannot take a
// live socket, and that a stale socket file is replaced.
func TestSocket(t *testing.T) {
	emu := startEmulator(t, nil)
	dir := t.TempDir()
	cfg := testConfig(dir, emu)
	d := startDaemon(t, cfg)
	fi, err := os.Stat(cfg.Control.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != SocketMode {
		t.Errorf("socket mode %v; want a socket with %v", fi.Mode(), fs.FileMode(SocketMode))
	}
	other := cfg
	other.Tiers.Disk.Dir = filepath.Join(dir, "other")
	if _, err := Start(testCtx(t), other, Options{}); !errors.Is(err, ErrSocketInUse) {
		t.Errorf("second daemon on a live socket: %v; want ErrSocketInUse", err)
	}
	if err := d.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.Control.Socket); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket after Close: %v; want removed", err)
	}
	if err := os.WriteFile(cfg.Control.Socket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(testCtx(t), cfg, Options{}); err == nil {
		t.Error("Start over a regular file at the socket path succeeded; want an error")
	}
}

// TestReload changes the budget, the connection budget and the sources
// live, and checks that a restart-only change is kept at its running value.
func TestReload(t *testing.T) {
	emu := startEmulator(t, append(dataset("bkt", "a/", 4, 100_000), dataset("bkt", "b/", 2, 1000)...))
	cfg := testConfig(t.TempDir(), emu)
	cfg.Tiers.Disk.Max = 1 << 30
	d := startDaemon(t, cfg)
	c := dial(t, d)
	ctx := testCtx(t)
	j, err := c.Prefetch(ctx, "bkt", "a/", object.Warm)
	if err != nil {
		t.Fatal(err)
	}
	if j, err = c.WatchJob(ctx, j.ID, nil); err != nil || j.State != control.JobDone {
		t.Fatalf("prefetch: %+v, %v", j, err)
	}
	next := cfg
	next.Tiers.Disk.Max = 250_000
	next.Fetch.Connections = 3
	next.Fetch.Slice = 1 << 20
	next.Sources = []SourceConfig{{URI: object.URI{Bucket: "bkt", Path: "b/"}, Warm: true}}
	changed, err := d.Reload(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"fetch.connections", "tiers.disk.max", "sources"}; !slices.Equal(changed, want) {
		t.Errorf("Reload changed %v; want %v", changed, want)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	disk := st.Tiers[0]
	if disk.MaxBytes != 250_000 || disk.UsedBytes > 250_000 || disk.Evictions == 0 {
		t.Errorf("after reload: disk %+v; want max 250000, used within it, evictions", disk)
	}
	if st.Fetch.Connections != 3 || st.Fetch.SliceBytes != 256<<10 {
		t.Errorf("after reload: fetch %+v; want 3 connections and the running slice size", st.Fetch)
	}
	// More connections: prefetch and the planner keep more objects in
	// flight (both lanes' reads: 100 + 100).
	more := next
	more.Fetch.Connections = 100
	if _, err := d.Reload(ctx, more); err != nil {
		t.Fatal(err)
	}
	if got := d.cache.PrefetchParallelism(); got != 200 {
		t.Errorf("objects in flight after reloading 100 connections = %d; want 200", got)
	}
	if _, err := d.Reload(ctx, next); err != nil {
		t.Fatal(err)
	}
	js, err := c.Jobs(ctx)
	if err != nil || len(js) != 2 || js[1].Kind != control.KindWarm || js[1].URI != "gs://bkt/b/" {
		t.Fatalf("jobs after adding a warm source = %+v, %v; want a warm job", js, err)
	}
	bad := next
	bad.GPU = "tpu"
	if _, err := d.Reload(ctx, bad); !errors.Is(err, ErrConfig) {
		t.Errorf("Reload(bad gpu) = %v; want ErrConfig", err)
	}
	if got := d.Config().GPU; got != DefaultGPU {
		t.Errorf("gpu after a bad reload = %q; want %q", got, DefaultGPU)
	}
}

// TestWatchConfig replaces the config file the way editors do (write a new
// file, rename it over the old one) and checks that the watcher fires.
func TestWatchConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cacheagent.yaml")
	if err := os.WriteFile(path, []byte("gpu: none\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cw, err := WatchConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	fired := make(chan struct{}, 8)
	errc := make(chan error, 1)
	go func() {
		errc <- cw.Run(ctx, 10*time.Millisecond, slog.New(slog.DiscardHandler), func() { fired <- struct{}{} })
	}()
	tmp := filepath.Join(dir, ".cacheagent.yaml.swp")
	if err := os.WriteFile(tmp, []byte("gpu: fake\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	await(t, fired, "a change after a rename over the config file")
	cancel()
	if err := await(t, errc, "WatchConfig to return"); err != nil {
		t.Errorf("WatchConfig = %v; want nil after cancel", err)
	}
}
