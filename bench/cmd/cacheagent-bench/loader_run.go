package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"golang.org/x/sync/errgroup"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/gpu"
	"github.com/cacheagent/cacheagent/gpufeed"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// benchLoaderReport is what `cacheagent-bench loader` measures.
type benchLoaderReport struct {
	Dataset benchDatasetReport `json:"dataset"`
	// MemcpyGBps is one core's copy bandwidth, 64 MiB buffer to buffer:
	// the median of copies timed before and after each run (memcpyMeter).
	MemcpyGBps float64 `json:"memcpy_gbps"`
	// MemcpyOneCoreGBps is the same under GOMAXPROCS=1, timed around the
	// --one-core runs; 0 without them.
	MemcpyOneCoreGBps float64          `json:"memcpy_one_core_gbps,omitempty"`
	Runs              []benchLoaderRun `json:"runs"`
	// Via says how --data was read: "daemon SOCKET" (through the node's
	// daemon; bytes read are the daemon's, all its clients together) or
	// "standalone"; absent for the synthetic runs.
	Via string `json:"via,omitempty"`
	// GPU is the device --gpu fed; absent with --gpu none.
	GPU *benchGPUReport `json:"gpu,omitempty"`
}

// benchGPUReport describes the device batches were copied to.
type benchGPUReport struct {
	// Backend is cuda or fake, or none when --gpu auto found no GPU.
	Backend string `json:"backend"`
	// Device is the name of GPU 0.
	Device string `json:"device,omitempty"`
	// Note qualifies the figures: fake copies are host memcpy, not PCIe;
	// or why there was no GPU.
	Note string `json:"note,omitempty"`
}

// benchGPURun is a run's figures of the copies to the device.
type benchGPURun struct {
	// CopyWaitShare is the share of the wall time the consumer waited for
	// copies (the target: 5% or less); CopyGBps the bytes copied per
	// second of wall time. Over all measured epochs.
	CopyWaitShare float64 `json:"copy_wait_share"`
	CopyGBps      float64 `json:"copy_gbps"`
	// Epochs has the figures of each measured epoch.
	Epochs []benchGPUEpoch `json:"epochs"`
}

// benchGPUEpoch is one epoch's figures with GPU copies.
type benchGPUEpoch struct {
	Epoch         int     `json:"epoch"`
	SamplesPerSec float64 `json:"samples_per_sec"`
	CopyWaitShare float64 `json:"copy_wait_share"`
	CopyGBps      float64 `json:"copy_gbps"`
}

// benchDatasetReport describes the dataset read.
type benchDatasetReport struct {
	Samples     int64 `json:"samples"`
	Shards      int   `json:"shards"`
	SampleBytes int   `json:"sample_bytes,omitempty"`
	Bytes       int64 `json:"bytes"`
}

// benchLoaderRun is one run's figures, over its measured epochs.
type benchLoaderRun struct {
	Name    string `json:"name"`
	Shuffle string `json:"shuffle"`
	// Epochs measured (after the skipped ones), their mean duration and
	// the samples per second over all of them.
	Epochs        int     `json:"epochs"`
	EpochSec      float64 `json:"epoch_sec"`
	SamplesPerSec float64 `json:"samples_per_sec"`
	// StallShare is the share of the wall time Next was blocked, and its
	// split by cause (shares of the wall time).
	StallShare   float64 `json:"stall_share"`
	StallFetch   float64 `json:"stall_fetch"`
	StallPromote float64 `json:"stall_promote"`
	StallGather  float64 `json:"stall_gather"`
	StallOther   float64 `json:"stall_other"`
	// BytesReadPerEpoch is what the cache fetched from the source per
	// epoch; HitRatio is 1 - that / the dataset's bytes.
	BytesReadPerEpoch float64 `json:"bytes_read_per_epoch"`
	HitRatio          float64 `json:"hit_ratio"`
	// GatherGBps is the gather rate of one gathering goroutine (bytes
	// copied / time copying); GatherVsMemcpy its ratio to MemcpyGBps, the
	// one-core memcpy rate timed around the run's group of runs.
	GatherGBps     float64 `json:"gather_gbps"`
	GatherVsMemcpy float64 `json:"gather_vs_memcpy,omitempty"`
	MemcpyGBps     float64 `json:"memcpy_gbps,omitempty"`
	// DeliveredGBps is the loader's throughput end to end, all workers
	// together: the bytes of the batches Next returned over the wall time;
	// DeliveredVsMemcpy its ratio to MemcpyGBps.
	DeliveredGBps     float64 `json:"delivered_gbps"`
	DeliveredVsMemcpy float64 `json:"delivered_vs_memcpy,omitempty"`
	// Procs is GOMAXPROCS and Workers the loader's gathering goroutines
	// during the run.
	Procs         int     `json:"procs,omitempty"`
	Workers       int     `json:"workers,omitempty"`
	ZeroCopyShare float64 `json:"zero_copy_share"`
	// GPU has the copies' figures with --gpu.
	GPU *benchGPURun `json:"gpu,omitempty"`
}

// mark is the state at an epoch boundary.
type mark struct {
	t       time.Time
	ls      stats.Loader
	fs      gpufeed.Stats // with a device
	fetched int64
}

// benchReader is what measure reads: a Loader, or a Feed to a device.
type benchReader interface {
	// next returns the next batch's index in its epoch and a function
	// that releases it, once the batch is usable (on the device: copied).
	next(ctx context.Context) (index int, release func(), err error)
	BatchesPerEpoch() int
	Workers() int
	// snap returns the loader's stats and the feed's (zero without one).
	snap() (stats.Loader, gpufeed.Stats)
	Close() error
}

// loaderReader reads batches from a Loader.
type loaderReader struct{ *loader.Loader }

func (r loaderReader) next(ctx context.Context) (int, func(), error) {
	b, err := r.Next(ctx)
	if err != nil {
		return 0, nil, err
	}
	return b.Index, b.Release, nil
}

func (r loaderReader) snap() (stats.Loader, gpufeed.Stats) { return r.Stats(), gpufeed.Stats{} }

// feedReader reads batches from a Feed, waiting for each one's copy.
type feedReader struct{ *gpufeed.Feed }

func (r feedReader) next(ctx context.Context) (int, func(), error) {
	b, err := r.Next(ctx)
	if err != nil {
		return 0, nil, err
	}
	if err := b.Ready(ctx); err != nil {
		b.Release()
		return 0, nil, err
	}
	return b.Index, b.Release, nil
}

func (r feedReader) snap() (stats.Loader, gpufeed.Stats) {
	s := r.Stats()
	return s.Loader, s
}

// measure runs a Loader with cfg over c to the end, feeding dev when it is
// not nil, and reports the epochs after the first skip, for a dataset of
// bytes bytes. The consumer spends step on each batch (a training step; 0:
// none).
func measure(ctx context.Context, c *benchCache, cfg loader.Config, dev gpu.Device, bytes int64, skip int,
	step time.Duration) (benchLoaderRun, error) {
	run := benchLoaderRun{Shuffle: cfg.Shuffle.String()}
	var r benchReader
	if dev != nil {
		f, err := gpufeed.New(ctx, dev, loader.FromStore(c.store), gpufeed.Config{Loader: cfg})
		if err != nil {
			return run, err
		}
		r = feedReader{f}
	} else {
		l, err := loader.New(loader.FromStore(c.store), cfg)
		if err != nil {
			return run, err
		}
		r = loaderReader{l}
	}
	snap := func() mark {
		ls, fs := r.snap()
		return mark{time.Now(), ls, fs, c.bytesFetched()}
	}
	run.Procs, run.Workers = runtime.GOMAXPROCS(0), r.Workers()
	marks := []mark{snap()} // at each epoch boundary, between Next calls
	for per := r.BatchesPerEpoch(); ; {
		index, release, err := r.next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			r.Close()
			return run, err
		}
		if step > 0 {
			select {
			case <-time.After(step):
			case <-ctx.Done():
			}
		}
		release()
		if index == per-1 {
			marks = append(marks, snap())
		}
	}
	if err := r.Close(); err != nil {
		return run, err
	}
	if len(marks) < skip+2 {
		return run, fmt.Errorf("bench loader: %d epochs run, %d skipped: nothing to measure", len(marks)-1, skip)
	}
	run.fill(marks[skip], marks[len(marks)-1], len(marks)-1-skip, bytes)
	if dev != nil {
		run.fillGPU(marks[skip:])
	}
	return run, nil
}

// fillGPU sets the run's GPU figures from the marks at its measured
// epochs' boundaries.
func (run *benchLoaderRun) fillGPU(marks []mark) {
	figures := func(a, z mark) (samples, wait, gbps float64) {
		wall := z.t.Sub(a.t).Seconds()
		return float64(z.ls.Samples-a.ls.Samples) / wall, (z.fs.CopyWait - a.fs.CopyWait).Seconds() / wall,
			float64(z.fs.BytesCopied-a.fs.BytesCopied) / wall / 1e9
	}
	g := &benchGPURun{}
	_, g.CopyWaitShare, g.CopyGBps = figures(marks[0], marks[len(marks)-1])
	for i := 1; i < len(marks); i++ {
		e := benchGPUEpoch{Epoch: i}
		e.SamplesPerSec, e.CopyWaitShare, e.CopyGBps = figures(marks[i-1], marks[i])
		g.Epochs = append(g.Epochs, e)
	}
	run.GPU = g
}

// fill sets the run's figures from the marks at the start and end of its
// n measured epochs.
func (run *benchLoaderRun) fill(a, z mark, n int, bytes int64) {
	wall := z.t.Sub(a.t).Seconds()
	share := func(d time.Duration) float64 { return d.Seconds() / wall }
	run.Epochs = n
	run.EpochSec = wall / float64(n)
	run.SamplesPerSec = float64(z.ls.Samples-a.ls.Samples) / wall
	run.StallShare = share(z.ls.Wait - a.ls.Wait)
	run.StallFetch = share(z.ls.WaitFetch - a.ls.WaitFetch)
	run.StallPromote = share(z.ls.WaitPromote - a.ls.WaitPromote)
	run.StallGather = share(z.ls.WaitGather - a.ls.WaitGather)
	run.StallOther = share(z.ls.WaitOther - a.ls.WaitOther)
	run.BytesReadPerEpoch = float64(z.fetched-a.fetched) / float64(n)
	if bytes > 0 {
		run.HitRatio = max(0, 1-run.BytesReadPerEpoch/float64(bytes))
	}
	run.DeliveredGBps = float64(z.ls.Bytes-a.ls.Bytes) / wall / 1e9
	if g := (z.ls.Gather - a.ls.Gather).Seconds(); g > 0 {
		run.GatherGBps = float64(z.ls.BytesGathered-a.ls.BytesGathered) / g / 1e9
	}
	if b := z.ls.Batches - a.ls.Batches; b > 0 {
		run.ZeroCopyShare = float64(z.ls.ZeroCopy-a.ls.ZeroCopy) / float64(b)
	}
}

// against sets the run's ratios to a one-core memcpy rate of memcpy GB/s.
func (run *benchLoaderRun) against(memcpy float64) {
	run.MemcpyGBps = memcpy
	run.GatherVsMemcpy = run.GatherGBps / memcpy
	run.DeliveredVsMemcpy = run.DeliveredGBps / memcpy
}

// memcpyMeter times one core copying a 64 MiB buffer, a few copies at a
// time between the runs it is the baseline of. Single copies on a shared
// VM swing by a factor of two within a minute, so the baseline is the
// median of every copy timed, not the best: the runs' gather rates are
// averages over their epochs too.
type memcpyMeter struct {
	src, dst []byte
	gbps     []float64
}

// memcpyBytes is the copy's size: far larger than any last-level cache.
const memcpyBytes = 64 << 20

func newMemcpyMeter() *memcpyMeter {
	m := &memcpyMeter{src: make([]byte, memcpyBytes), dst: make([]byte, memcpyBytes)}
	for i := range m.src {
		m.src[i] = byte(i)
	}
	copy(m.dst, m.src) // fault every page in
	return m
}

// sample times n copies.
func (m *memcpyMeter) sample(n int) {
	for range n {
		t := time.Now()
		copy(m.dst, m.src)
		m.gbps = append(m.gbps, memcpyBytes/time.Since(t).Seconds()/1e9)
	}
}

// median returns the median copy rate in GB/s (0 before any sample).
func (m *memcpyMeter) median() float64 {
	if len(m.gbps) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(m.gbps))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// benchLoaderData reads the dataset of --data or --manifest for --epochs
// epochs, feeding dev when it is not nil: through the node's daemon when
// one answers on --socket (c, not nil: leases, plans and staging go to
// it, as every rank on the machine would use it), else through the cache
// of the flags, standalone.
func benchLoaderData(ctx context.Context, opts *cli.Options, bc *benchLoaderConfig, dev gpu.Device,
	c *control.Client) (benchLoaderReport, error) {
	var rep benchLoaderReport
	var (
		src   object.Source
		cache *benchCache
	)
	if c != nil {
		gcs, err := fetch.NewGCS(ctx, opts.Config().Fetch.GCS()) // headers and sizes; objects through the daemon
		if err != nil {
			return rep, err
		}
		defer gcs.Close()
		src = gcs
		store := mmapstore.New(c, mmapstore.Config{MaxIdleMappings: -1})
		defer store.Close()
		cache = &benchCache{store: store, fetched: func() int64 {
			st, err := c.Status(ctx)
			if err != nil {
				return 0
			}
			return stats.Cache{Tiers: st.Tiers}.Base().BytesFetched
		}}
		rep.Via = "daemon " + c.Socket()
	} else {
		a, err := cli.OpenAgent(ctx, opts.Config())
		if err != nil {
			return rep, err
		}
		defer a.Close()
		src = a.Source
		store := mmapstore.New(a.Cache.Opener(), mmapstore.Config{MaxIdleMappings: -1})
		defer store.Close()
		cache = &benchCache{cache: a.Cache, store: store}
		rep.Via = "standalone"
	}
	resolved, err := bc.lf.Resolve(ctx, src, nil, nil)
	if err != nil {
		return rep, err
	}
	ds := resolved.Dataset
	bytes, err := datasetBytes(ctx, src, ds)
	if err != nil {
		return rep, err
	}
	rows, n := ds.Rows()
	rep.Dataset = benchDatasetReport{Samples: n, Shards: len(rows), Bytes: bytes}
	mm := newMemcpyMeter()
	mm.sample(5)
	cfg, err := bc.loaderConfig(ds, bc.lf.Shuffle, bc.lf.Epochs)
	if err != nil {
		return rep, err
	}
	if c != nil {
		cfg.Planner, cfg.Stager = c, c
	} else {
		cfg.Planner, cfg.Stager = cache.cache, cache.cache.Stager()
	}
	run, err := measure(ctx, cache, cfg, dev, bytes, 0, 0)
	run.Name = bc.lf.Data + bc.lf.Manifest
	mm.sample(5)
	rep.MemcpyGBps = mm.median()
	run.against(rep.MemcpyGBps)
	rep.Runs = append(rep.Runs, run)
	return rep, err
}

// datasetBytes returns the total size of the dataset's objects.
func datasetBytes(ctx context.Context, src object.Source, ds loader.Dataset) (int64, error) {
	sizes := make([][]int64, len(ds.Groups))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, gr := range ds.Groups {
		sizes[i] = make([]int64, len(gr.Objects))
		for j, o := range gr.Objects {
			g.Go(func() error {
				a, err := src.Stat(ctx, o)
				sizes[i][j] = a.Size
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	var n int64
	for _, s := range sizes {
		for _, v := range s {
			n += v
		}
	}
	return n, nil
}

// printBenchLoader prints rep as a table.
func printBenchLoader(w io.Writer, rep benchLoaderReport) error {
	d := rep.Dataset
	fmt.Fprintf(w, "dataset: %d samples in %d shards, %s", d.Samples, d.Shards, humanize.IBytes(uint64(d.Bytes)))
	if d.SampleBytes > 0 {
		fmt.Fprintf(w, " (x rows of %s + 8-byte y)", humanize.IBytes(uint64(d.SampleBytes)))
	}
	if rep.Via != "" {
		fmt.Fprintf(w, "\nread through: %s", rep.Via)
	}
	fmt.Fprintf(w, "\nmemcpy, one core: %.2f GB/s", rep.MemcpyGBps)
	if rep.MemcpyOneCoreGBps > 0 {
		fmt.Fprintf(w, " (with GOMAXPROCS=1, for the one-core runs: %.2f GB/s)", rep.MemcpyOneCoreGBps)
	}
	fmt.Fprint(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSHUFFLE\tEPOCHS\tEPOCH s\tSAMPLES/s\tSTALL\tfetch/promote/gather/other\tREAD/EPOCH\tHIT\t"+
		"GB/s END TO END\tvs memcpy\tGATHER GB/s/core\tvs memcpy")
	for _, r := range rep.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.3f\t%.0f\t%.1f%%\t%.1f/%.1f/%.1f/%.1f%%\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\n",
			r.Name, r.Shuffle, r.Epochs, r.EpochSec, r.SamplesPerSec, 100*r.StallShare,
			100*r.StallFetch, 100*r.StallPromote, 100*r.StallGather, 100*r.StallOther,
			humanize.IBytes(uint64(r.BytesReadPerEpoch)), r.HitRatio, r.DeliveredGBps, r.DeliveredVsMemcpy,
			r.GatherGBps, r.GatherVsMemcpy)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printBenchGPU(w, rep)
}

// printBenchGPU prints the GPU copies' figures of rep, if any, per epoch.
func printBenchGPU(w io.Writer, rep benchLoaderReport) error {
	g := rep.GPU
	if g == nil {
		return nil
	}
	if g.Backend == gpu.ModeNone.String() {
		_, err := fmt.Fprintf(w, "\nGPU: %s\n", g.Note)
		return err
	}
	fmt.Fprintf(w, "\nGPU 0: %s (%s backend); copy wait = share of the time the consumer waited for copies\n",
		g.Device, g.Backend)
	if g.Backend == gpu.ModeFake.String() {
		fmt.Fprintln(w, "FAKE backend: copy figures are host memcpy speeds, not PCIe transfers")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tEPOCH\tSAMPLES/s\tCOPY WAIT\tCOPIED GB/s")
	for _, r := range rep.Runs {
		if r.GPU == nil {
			continue
		}
		for _, e := range r.GPU.Epochs {
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1f%%\t%.2f\n", r.Name, e.Epoch, e.SamplesPerSec, 100*e.CopyWaitShare,
				e.CopyGBps)
		}
		fmt.Fprintf(tw, "%s\tall\t%.0f\t%.1f%%\t%.2f\n", r.Name, r.SamplesPerSec, 100*r.GPU.CopyWaitShare,
			r.GPU.CopyGBps)
	}
	return tw.Flush()
}
