package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/daemon"
	"github.com/cacheagent/cacheagent/loader/synth"
)

// TestBenchLoaderGPUFake feeds the warm run's batches to the fake GPU: the
// report has the copies' figures per epoch, labelled as host memcpy.
func TestBenchLoaderGPUFake(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm")
	}
	out, err := runBench(t, "", "loader", "--json", "--samples", "2048", "--shards", "8",
		"--sample-bytes", "256", "--batch", "64", "--epochs", "2", "--modes", "shard-window", "--gpu", "fake")
	if err != nil {
		t.Fatal(err)
	}
	var rep benchLoaderReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.GPU == nil || rep.GPU.Backend != "fake" || !strings.Contains(rep.GPU.Note, "memcpy") || len(rep.Runs) != 1 {
		t.Fatalf("report %+v, gpu %+v", rep, rep.GPU)
	}
	g := rep.Runs[0].GPU
	if g == nil || len(g.Epochs) != 2 || g.CopyGBps <= 0 || g.CopyWaitShare < 0 || g.CopyWaitShare > 1 {
		t.Fatalf("run's GPU figures %+v", g)
	}
	for _, e := range g.Epochs {
		if e.SamplesPerSec <= 0 || e.CopyGBps <= 0 {
			t.Errorf("epoch %+v", e)
		}
	}
	var table bytes.Buffer
	if err := printBenchLoader(&table, rep); err != nil || !strings.Contains(table.String(), "FAKE backend") ||
		!strings.Contains(table.String(), "COPY WAIT") {
		t.Errorf("table: %v\n%s", err, table.String())
	}

	// --gpu none (the default) keeps the report as it was.
	out, err = runBench(t, "", "loader", "--json", "--samples", "1024", "--shards", "4",
		"--sample-bytes", "64", "--batch", "64", "--epochs", "1", "--modes", "global")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, `"gpu"`) {
		t.Errorf("report without --gpu mentions a GPU:\n%s", out)
	}
}

// TestBenchLoaderOneCore repeats the warm runs with one P and one worker,
// against their own memcpy baseline, makes the shm tier under
// --shm-parent, cleans it up and gives GOMAXPROCS back.
func TestBenchLoaderOneCore(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm")
	}
	parent, err := os.MkdirTemp("/dev/shm", "cacheagent-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	procs := runtime.GOMAXPROCS(0)
	out, err := runBench(t, "", "loader", "--json", "--samples", "2048", "--shards", "8",
		"--sample-bytes", "256", "--batch", "64", "--epochs", "1", "--modes", "shard-window", "--one-core",
		"--shm-parent", parent)
	if err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS after the run: %d, want %d", got, procs)
	}
	var rep benchLoaderReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Runs) != 2 || rep.MemcpyOneCoreGBps <= 0 {
		t.Fatalf("report %+v", rep)
	}
	all, one := rep.Runs[0], rep.Runs[1]
	if all.Procs != procs || all.MemcpyGBps != rep.MemcpyGBps {
		t.Errorf("warm run %+v: want procs %d, memcpy %v", all, procs, rep.MemcpyGBps)
	}
	if one.Name != "warm shard-window, one core" || one.Procs != 1 || one.Workers != 1 ||
		one.MemcpyGBps != rep.MemcpyOneCoreGBps || one.GatherGBps <= 0 || one.BytesReadPerEpoch != 0 ||
		one.GatherVsMemcpy != one.GatherGBps/one.MemcpyGBps {
		t.Errorf("one-core run %+v", one)
	}
	for _, r := range rep.Runs {
		// Every batch is gathered here: delivered bytes are samples x (256 + 8).
		want := r.SamplesPerSec * (256 + 8) / 1e9
		if r.DeliveredGBps <= 0 || math.Abs(r.DeliveredGBps-want) > want/100 ||
			r.DeliveredVsMemcpy != r.DeliveredGBps/r.MemcpyGBps {
			t.Errorf("run %q: delivered %v GB/s (%v of memcpy); want %v GB/s from its samples/s", r.Name,
				r.DeliveredGBps, r.DeliveredVsMemcpy, want)
		}
	}
	if left, _ := os.ReadDir(parent); len(left) != 0 {
		t.Errorf("--shm-parent holds %d entries after the run; want none", len(left))
	}
	var table bytes.Buffer
	if err := printBenchLoader(&table, rep); err != nil || !strings.Contains(table.String(), "GOMAXPROCS=1") ||
		!strings.Contains(table.String(), "END TO END") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
}

func TestBenchLoader(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm")
	}
	dir := t.TempDir()
	out, err := runBench(t, "", "loader", "--json", "--samples", "4096", "--shards", "16",
		"--sample-bytes", "256", "--batch", "64", "--epochs", "1", "--policy", "--policy-epochs", "2",
		"--link-rate", "1GB", "--window", "2", "--write-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	var rep benchLoaderReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Dataset.Samples != 4096 || rep.MemcpyGBps <= 0 || len(rep.Runs) != 4 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Runs {
		if r.Epochs != 1 || r.SamplesPerSec <= 0 || r.HitRatio < 0 || r.HitRatio > 1 {
			t.Errorf("run %+v", r)
		}
	}
	if w := rep.Runs[0]; w.BytesReadPerEpoch != 0 || w.GatherGBps <= 0 {
		t.Errorf("warm run read %v bytes per epoch (want 0), gathered at %v GB/s", w.BytesReadPerEpoch, w.GatherGBps)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "bench", "train", "shard-*.npy"))
	if len(files) != 32 {
		t.Errorf("--write-dir wrote %d files; want 32", len(files))
	}
}

func TestBenchLoaderData(t *testing.T) {
	data := synth.Uniform(4, 50, 32)
	s := synthEmulator(t, data)
	out, err := runBench(t, s.Endpoint(), "loader", "--data", "gs://bkt/train/", "--batch", "16",
		"--epochs", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep benchLoaderReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Epochs != 2 || rep.Dataset.Samples != 200 || rep.Dataset.Bytes == 0 {
		t.Fatalf("report %+v", rep)
	}
	// Two epochs through a cache that starts empty and holds it all: the
	// dataset is read once.
	if r := rep.Runs[0]; r.BytesReadPerEpoch*2 != float64(rep.Dataset.Bytes) {
		t.Errorf("read %v bytes per epoch; want half the dataset's %d", r.BytesReadPerEpoch, rep.Dataset.Bytes)
	}
	var table bytes.Buffer
	if err := printBenchLoader(&table, rep); err != nil || !strings.Contains(table.String(), "gs://bkt/train/") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
}

// TestBenchLoaderDataDaemon: with a daemon answering on --socket, bench
// loader --data reads through it (its cache fills, its plans and leases
// serve the loader); --standalone reads through a cache of its own.
func TestBenchLoaderDataDaemon(t *testing.T) {
	data := synth.Uniform(4, 50, 32)
	s := synthEmulator(t, data)
	dir := t.TempDir()
	cfg := daemon.Config{
		Tiers:   daemon.TiersConfig{Disk: daemon.TierConfig{Dir: filepath.Join(dir, "cache")}},
		Fetch:   daemon.FetchConfig{Endpoint: s.Endpoint(), Connections: 4, Slice: 1 << 20},
		Control: daemon.ControlConfig{Socket: filepath.Join(dir, "c.sock")},
	}.WithDefaults()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	d, err := daemon.Start(ctx, cfg, daemon.Options{Logger: slog.New(slog.DiscardHandler), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(context.Background()) })
	bench := func(args ...string) benchLoaderReport {
		t.Helper()
		root := newRootCmd()
		root.SetArgs(append([]string{"--socket", cfg.Control.Socket, "--endpoint", s.Endpoint(), "loader",
			"--data", "gs://bkt/train/", "--batch", "16", "--epochs", "2", "--json"}, args...))
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(io.Discard)
		if err := root.ExecuteContext(ctx); err != nil {
			t.Fatalf("bench loader %v: %v", args, err)
		}
		var rep benchLoaderReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return rep
	}
	rep := bench("--shuffle", "node", "--world", "2", "--rank", "1", "--ranks-per-node", "1")
	if rep.Via != "daemon "+cfg.Control.Socket || len(rep.Runs) != 1 || rep.Runs[0].Epochs != 2 {
		t.Fatalf("report %+v; want a run through the daemon", rep)
	}
	// Node 1 of 2 reads (and the daemon fetches) its half of the shards only.
	c, err := control.Dial(ctx, cfg.Control.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ls, err := c.List(ctx, "bkt", "train/")
	if err != nil {
		t.Fatal(err)
	}
	cached := 0
	for _, o := range ls.Objects {
		if o.Tier != "none" {
			cached++
		}
	}
	if cached != 4 { // 2 shards of x and y
		t.Errorf("the daemon caches %d objects after node 1 of 2 read; want its 2 shards' 4", cached)
	}
	if got := rep.Runs[0].BytesReadPerEpoch * 2; got <= 0 || got >= float64(rep.Dataset.Bytes) {
		t.Errorf("read %v bytes in 2 epochs; want some, less than the dataset's %d", got, rep.Dataset.Bytes)
	}
	if rep := bench("--standalone", "--cache-dir", filepath.Join(dir, "own")); rep.Via != "standalone" {
		t.Errorf("--standalone read through %q", rep.Via)
	}
}
