package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/gpu"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/synth"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// benchBucket holds the synthetic dataset in the emulator.
const benchBucket = "bench"

// benchLoaderConfig sizes `cacheagent-bench loader`.
type benchLoaderConfig struct {
	lf           cli.LoaderFlags
	samples      int
	sampleBytes  cli.Size
	shards       int
	modes        string
	epochs       int
	workers      int
	prefetch     int
	writeDir     string
	policy       bool
	cacheFrac    float64
	linkRate     cli.Size
	connections  int
	policyEpochs int
	policyStep   time.Duration
	gpu          gpu.Mode
	asJSON       bool
	oneCore      bool
	shmParent    string
	standalone   bool
}

// newBenchLoaderCmd is `cacheagent-bench loader`.
func newBenchLoaderCmd(opts *cli.Options) *cobra.Command {
	bc := &benchLoaderConfig{samples: 1 << 19, sampleBytes: 1 << 10, shards: 64, modes: "shard-window,global",
		epochs: 3, cacheFrac: 0.5, linkRate: 50e6, connections: 8, policyEpochs: 4, gpu: gpu.ModeNone,
		shmParent: "/dev/shm"}
	cmd := &cobra.Command{
		Use:   "loader",
		Short: "Measure the Go loader: samples/s, stalls and bytes read per epoch",
		Long: `bench loader measures the loader end to end through the cache. Without --data it
builds a synthetic dataset (--samples rows of --sample-bytes, in --shards shards of
x.npy and y.npy) in an in-process GCS emulator, then:

  - warm runs: a cache with a shm tier that holds the dataset, warmed by one epoch,
    then --epochs epochs per shuffle mode in --modes: samples/s, stall share,
    and the gather's throughput against a one-core memcpy measured in the same
    run (the median of 64 MiB copies timed before and after each run), both end
    to end (the bytes of batches delivered per second, all workers together)
    and per core (each worker's bytes copied over its time copying); the shm
    tier is made under --shm-parent;
  - with --one-core, the warm runs again with one P (GOMAXPROCS=1) and one
    gathering goroutine, against a memcpy timed the same way under GOMAXPROCS=1:
    the gather's rate on one core without any cross-core traffic, which on some
    VMs is far from what the same code does with two;
  - with --policy, the cache's disk budget at --cache-frac of the dataset and the
    link shaped to --link-rate per connection: --policy-epochs epochs with LRU
    eviction (no plans), then with the clairvoyant cache (plans announced, shards
    staged), each on a fresh cache: epoch time, hit ratio and bytes read per epoch
    (the first, cold epoch is not counted). --policy-step makes the consumer wait
    that long on each batch, as a training step would, so that the stall share
    says how long training would wait for data.

--write-dir also writes the dataset's files there, for bench/torch_peer.py.
With --data it reads that dataset for --epochs epochs and reports each: through the
node's daemon when one answers on --socket (leases, plans and staging go to it, as a
training job's ranks would use it; the shuffle flags apply, --shuffle node included),
else, or with --standalone, through a cache of its own on the cache directory.

--gpu auto|cuda|fake feeds the warm runs' (and --data's) batches to GPU 0 through
gpufeed: gathered into pinned memory, copied asynchronously, the consumer waiting
for each copy. Per epoch it reports samples/s, the share of the time the consumer
waited for copies (the target is 5% or less) and GB/s copied. With fake the copies
are host memcpy, not PCIe. auto without a GPU says so in one line and runs without.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			feed, err := openBenchGPU(cmd.Context(), cmd.ErrOrStderr(), bc.gpu)
			if err != nil {
				return err
			}
			defer feed.close()
			var rep benchLoaderReport
			if bc.lf.Data != "" || bc.lf.Manifest != "" {
				var c *control.Client
				if !bc.standalone {
					if c, err = cli.DialDaemon(cmd.Context(), opts, cmd.Flags().Changed("cache-dir")); err != nil {
						return err
					}
				}
				if c != nil {
					defer c.Close()
				}
				rep, err = benchLoaderData(cmd.Context(), opts, bc, feed.dev, c)
			} else {
				rep, err = benchLoaderSynthetic(cmd.Context(), cmd.ErrOrStderr(), bc, feed.dev)
			}
			if err != nil {
				return err
			}
			rep.GPU = feed.rep
			if bc.asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), rep)
			}
			return printBenchLoader(cmd.OutOrStdout(), rep)
		},
	}
	bc.register(cmd.Flags())
	return cmd
}

// register adds the benchmark's flags to f.
func (bc *benchLoaderConfig) register(f *pflag.FlagSet) {
	bc.lf.Register(f)
	f.IntVar(&bc.samples, "samples", bc.samples, "synthetic dataset: samples")
	f.Var(&bc.sampleBytes, "sample-bytes", "synthetic dataset: bytes of each sample's x row (y adds 8)")
	f.IntVar(&bc.shards, "shards", bc.shards, "synthetic dataset: shards")
	f.StringVar(&bc.modes, "modes", bc.modes, "shuffle modes of the warm runs, comma-separated")
	f.IntVar(&bc.workers, "workers", 0, "gathering goroutines (0: GOMAXPROCS)")
	f.IntVar(&bc.prefetch, "prefetch", 0, "batch buffers (0: the loader's default)")
	f.StringVar(&bc.writeDir, "write-dir", "", "also write the synthetic dataset's .npy files into this directory")
	f.BoolVar(&bc.policy, "policy", false, "also compare LRU and clairvoyant eviction with the cache at --cache-frac")
	f.BoolVar(&bc.standalone, "standalone", false, "with --data: read through a cache of this process on the cache "+
		"directory even when a daemon answers on --socket")
	f.Float64Var(&bc.cacheFrac, "cache-frac", bc.cacheFrac, "policy runs: disk budget as a share of the dataset")
	f.Var(&bc.linkRate, "link-rate", "policy runs: emulated bytes per second per connection")
	f.IntVar(&bc.connections, "conns", bc.connections, "policy runs: parallel range reads")
	f.IntVar(&bc.policyEpochs, "policy-epochs", bc.policyEpochs, "policy runs: epochs, the first one cold")
	f.DurationVar(&bc.policyStep, "policy-step", 0, "policy runs: time the consumer spends on each batch, as a training step would")
	f.Var(&bc.gpu, "gpu", "feed the warm runs' batches to GPU 0: auto, cuda, fake or none")
	f.BoolVar(&bc.asJSON, "json", false, "print JSON")
	f.BoolVar(&bc.oneCore, "one-core", false, "also run the warm runs with GOMAXPROCS=1 and one gathering goroutine")
	f.StringVar(&bc.shmParent, "shm-parent", bc.shmParent, "warm runs: the tmpfs directory the shm tier is made in")
	// The shared --epochs flag means the measured epochs here.
	f.Lookup("epochs").DefValue, f.Lookup("epochs").Usage = "3", "epochs measured per run"
	bc.lf.Epochs = 3
}

// benchDataset is the synthetic dataset: its shape and its objects.
type benchDataset struct {
	data  synth.Dataset
	bytes int64
	objs  []fakestorage.Object
}

// newBenchDataset builds the synthetic dataset of bc.
func newBenchDataset(bc *benchLoaderConfig) (*benchDataset, error) {
	if bc.samples <= 0 || bc.shards <= 0 || bc.sampleBytes <= 0 || bc.samples < bc.shards {
		return nil, errors.New("bench loader: --samples, --shards and --sample-bytes must be positive, samples >= shards")
	}
	d := &benchDataset{data: synth.Dataset{Rows: make([]int, bc.shards), RowBytes: int(bc.sampleBytes)}}
	for i := range d.data.Rows {
		d.data.Rows[i] = bc.samples / bc.shards
		if i < bc.samples%bc.shards {
			d.data.Rows[i]++
		}
	}
	err := d.data.Write("train/", func(name string, b []byte) error {
		d.objs = append(d.objs, fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: benchBucket,
			Name: name}, Content: b})
		d.bytes += int64(len(b))
		return nil
	})
	return d, err
}

// benchFeedGPU is the device the benchmark feeds, if any.
type benchFeedGPU struct {
	dev     gpu.Device      // nil: no GPU copies
	rep     *benchGPUReport // nil with --gpu none
	backend gpu.Backend     // nil with --gpu none
}

// openBenchGPU opens device 0 of mode's backend; with ModeNone, or
// ModeAuto on a machine without a GPU (said in one line on log), it
// returns no device.
func openBenchGPU(ctx context.Context, log io.Writer, mode gpu.Mode) (*benchFeedGPU, error) {
	g := &benchFeedGPU{}
	if mode == gpu.ModeNone {
		return g, nil
	}
	b, err := cli.OpenGPU(ctx, mode)
	if err != nil {
		return nil, err
	}
	g.backend = b
	dev, err := b.Open(ctx, 0)
	if err != nil && (mode != gpu.ModeAuto || !errors.Is(err, gpu.ErrNoGPU)) {
		b.Close()
		return nil, fmt.Errorf("bench loader: GPU 0: %w", err)
	}
	if err != nil {
		if none, ok := b.(*gpu.None); ok && none.Reason != nil {
			err = none.Reason
		}
		line := fmt.Sprintf("no NVIDIA GPU/driver found (%v): measuring without GPU copies", err)
		fmt.Fprintln(log, line)
		g.rep = &benchGPUReport{Backend: gpu.ModeNone.String(), Note: line}
		return g, nil
	}
	g.dev = dev
	g.rep = &benchGPUReport{Backend: b.Kind().String(), Device: dev.Info().Name}
	if b.Kind() == gpu.ModeFake {
		g.rep.Note = "fake backend: copies are host memcpy, not PCIe transfers"
	}
	return g, nil
}

// close closes the device and the backend.
func (g *benchFeedGPU) close() {
	if g.dev != nil {
		g.dev.Close()
	}
	if g.backend != nil {
		g.backend.Close()
	}
}

// benchLoaderSynthetic runs the synthetic benchmark; progress goes to log.
// The warm runs feed dev when it is not nil.
func benchLoaderSynthetic(ctx context.Context, log io.Writer, bc *benchLoaderConfig, dev gpu.Device) (benchLoaderReport, error) {
	var rep benchLoaderReport
	ds, err := newBenchDataset(bc)
	if err != nil {
		return rep, err
	}
	rep.Dataset = benchDatasetReport{Samples: ds.data.Samples(), Shards: bc.shards, SampleBytes: int(bc.sampleBytes),
		Bytes: ds.bytes}
	if bc.writeDir != "" {
		if err := ds.data.WriteDir(bc.writeDir, benchBucket, "train/"); err != nil {
			return rep, err
		}
	}
	fmt.Fprintf(log, "seeding the emulator with %d objects, %s\n", len(ds.objs), humanize.IBytes(uint64(ds.bytes)))
	emu, err := emulator.Start(emulator.Options{Objects: ds.objs})
	if err != nil {
		return rep, err
	}
	defer emu.Close()
	src, err := fetch.NewGCS(ctx, fetch.GCSConfig{Endpoint: emu.Endpoint()})
	if err != nil {
		return rep, err
	}
	defer src.Close()
	dataset, err := loader.FromPattern(ctx, src, benchBucket, "train/", synth.Pattern)
	if err != nil {
		return rep, err
	}
	mm := newMemcpyMeter()
	mm.sample(5)
	for _, mode := range strings.Split(bc.modes, ",") {
		fmt.Fprintf(log, "warm run, %s\n", mode)
		run, err := benchWarm(ctx, src, dataset, ds.bytes, bc, mode, dev)
		if err != nil {
			return rep, err
		}
		mm.sample(5)
		rep.Runs = append(rep.Runs, run)
	}
	rep.MemcpyGBps = mm.median()
	for i := range rep.Runs {
		rep.Runs[i].against(rep.MemcpyGBps)
	}
	if bc.oneCore {
		runs, memcpy, err := benchOneCore(ctx, log, src, dataset, ds.bytes, bc)
		if err != nil {
			return rep, err
		}
		rep.MemcpyOneCoreGBps = memcpy
		rep.Runs = append(rep.Runs, runs...)
	}
	if bc.policy {
		emu.SetShape(emulator.Shape{FirstByte: 20 * time.Millisecond, BytesPerSec: int64(bc.linkRate)})
		for _, clairvoyant := range []bool{false, true} {
			fmt.Fprintf(log, "policy run, clairvoyant %v\n", clairvoyant)
			run, err := benchPolicy(ctx, src, dataset, ds.bytes, bc, clairvoyant)
			if err != nil {
				return rep, err
			}
			rep.Runs = append(rep.Runs, run)
		}
	}
	return rep, nil
}

// benchOneCore runs the warm runs again with one P and one gathering
// goroutine, and returns them with the median memcpy rate timed around
// them under the same GOMAXPROCS: on a VM whose cores are far apart (two
// vCPUs that pass cache lines and wake-ups through the hypervisor), the
// same copy loop runs markedly slower in a process spread over both, and
// these runs show the gather's rate without that.
func benchOneCore(ctx context.Context, log io.Writer, src object.Source, ds loader.Dataset, bytes int64,
	bc *benchLoaderConfig) ([]benchLoaderRun, float64, error) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	one := *bc
	one.workers = 1
	mm := newMemcpyMeter()
	mm.sample(5)
	var runs []benchLoaderRun
	for _, mode := range strings.Split(bc.modes, ",") {
		fmt.Fprintf(log, "warm run, %s, one core\n", mode)
		run, err := benchWarm(ctx, src, ds, bytes, &one, mode, nil)
		if err != nil {
			return nil, 0, err
		}
		mm.sample(5)
		run.Name += ", one core"
		runs = append(runs, run)
	}
	memcpy := mm.median()
	for i := range runs {
		runs[i].against(memcpy)
	}
	return runs, memcpy, nil
}

// benchCache is a cache in temporary directories with a Store over it.
type benchCache struct {
	cache *tier.Cache
	store *mmapstore.Store
	dirs  []string
	// fetched, if set, returns the bytes fetched from the source instead
	// of cache's figure (a store over the daemon has no cache here).
	fetched func() int64
}

// bytesFetched returns the bytes the cache has fetched from the source.
func (c *benchCache) bytesFetched() int64 {
	if c.fetched != nil {
		return c.fetched()
	}
	return c.cache.Stats().Base().BytesFetched
}

// openBenchCache opens a cache of the given disk budget (and a shm tier of
// shmMax if positive, in a new directory under shmParent) over src. With keepMaps its Store keeps idle
// mappings (warm runs: no re-mapping each epoch); without, it unmaps on
// the last release, so that the cache may evict what the loader let go.
func openBenchCache(ctx context.Context, src object.Source, conns int, diskMax, shmMax int64, shmParent string,
	keepMaps bool) (*benchCache, error) {
	dl, err := fetch.NewDownloader(src, fetch.Config{SliceSize: 2 << 20, Connections: conns})
	if err != nil {
		return nil, err
	}
	bc := &benchCache{}
	dir, err := os.MkdirTemp("", "cacheagent-bench-loader-")
	if err != nil {
		return nil, err
	}
	bc.dirs = append(bc.dirs, dir)
	cfg := tier.Config{Dir: filepath.Join(dir, "cache"), MaxBytes: diskMax, Revalidate: -1, PromoteHits: -1,
		Source: src, Downloader: dl}
	if shmMax > 0 {
		shm, err := os.MkdirTemp(shmParent, "cacheagent-bench-loader-")
		if err != nil {
			bc.remove()
			return nil, err
		}
		bc.dirs = append(bc.dirs, shm)
		cfg.ShmDir, cfg.ShmMaxBytes = shm, shmMax
	}
	if bc.cache, err = tier.Open(ctx, cfg); err != nil {
		bc.remove()
		return nil, err
	}
	scfg := mmapstore.Config{Revalidate: -1}
	if !keepMaps {
		scfg.MaxIdleMappings = -1
	}
	bc.store = mmapstore.New(bc.cache.Opener(), scfg)
	return bc, nil
}

// remove removes the cache's directories.
func (bc *benchCache) remove() {
	for _, d := range bc.dirs {
		os.RemoveAll(d)
	}
}

// Close closes the store and the cache and removes the directories.
func (bc *benchCache) Close() error {
	err := errors.Join(bc.store.Close(), bc.cache.Close())
	bc.remove()
	return err
}

// benchWarm reads the dataset for one warm-up and bc.lf.Epochs measured
// epochs, in shuffle mode mode, from a cache whose shm tier holds it all
// (fetched and promoted first), feeding dev when it is not nil.
func benchWarm(ctx context.Context, src object.Source, ds loader.Dataset, bytes int64, bc *benchLoaderConfig,
	mode string, dev gpu.Device) (benchLoaderRun, error) {
	c, err := openBenchCache(ctx, src, 64, 0, 2*bytes, bc.shmParent, true)
	if err != nil {
		return benchLoaderRun{}, err
	}
	defer c.Close()
	cfg, err := bc.loaderConfig(ds, mode, 1+bc.lf.Epochs)
	if err != nil {
		return benchLoaderRun{}, err
	}
	// Warm means in shm: fetch and promote everything first, since the
	// loader's staging leaves a resident disk copy's promotion to the
	// promoter, which waits for the readers to pause.
	var objs []object.Object
	for _, g := range ds.Groups {
		objs = append(objs, g.Objects...)
	}
	if err := c.cache.FetchObjects(ctx, objs, object.Demand); err != nil {
		return benchLoaderRun{}, err
	}
	if _, err := c.cache.PromoteObjects(ctx, objs); err != nil {
		return benchLoaderRun{}, err
	}
	cfg.Planner, cfg.Stager = c.cache, c.cache.Stager()
	run, err := measure(ctx, c, cfg, dev, bytes, 1, 0)
	run.Name = "warm " + mode
	return run, err
}

// benchPolicy reads the dataset for bc.policyEpochs epochs through a cache
// at bc.cacheFrac of its size, with plans (clairvoyant) or without (LRU).
func benchPolicy(ctx context.Context, src object.Source, ds loader.Dataset, bytes int64, bc *benchLoaderConfig,
	clairvoyant bool) (benchLoaderRun, error) {
	c, err := openBenchCache(ctx, src, bc.connections, int64(bc.cacheFrac*float64(bytes)), 0, "", false)
	if err != nil {
		return benchLoaderRun{}, err
	}
	defer c.Close()
	cfg, err := bc.loaderConfig(ds, bc.lf.Shuffle, bc.policyEpochs)
	if err != nil {
		return benchLoaderRun{}, err
	}
	// The loader leases its window and its lookahead; leased shards cannot
	// be evicted, so they must leave the cache room to work with.
	cfg.Lookahead = fitLookahead(cfg, int64(bc.cacheFrac*float64(bytes)), bytes, len(ds.Groups))
	name := "lru"
	if clairvoyant {
		name = "clairvoyant"
		cfg.Planner, cfg.Stager = c.cache, c.cache.Stager()
	}
	run, err := measure(ctx, c, cfg, nil, bytes, 1, bc.policyStep)
	run.Name = fmt.Sprintf("%s, cache %.0f%%", name, 100*bc.cacheFrac)
	return run, err
}

// fitLookahead returns the lookahead of a loader with cfg over a dataset of
// bytes in shards shards, read through a cache of budget bytes: the
// default (or cfg's), cut so that the shards the loader holds at once (its
// window, its lookahead and one more being released) take at most half the
// budget, and at least 1.
func fitLookahead(cfg loader.Config, budget, bytes int64, shards int) int {
	la := cfg.Lookahead
	if la == 0 {
		la = loader.DefaultLookahead
	}
	window := cfg.Window
	if window == 0 {
		window = sampler.DefaultWindow
	}
	if shards == 0 || bytes == 0 {
		return la
	}
	fit := int(budget / 2 / (bytes/int64(shards) + 1))
	return max(1, min(la, fit-window-1))
}

// loaderConfig returns the loader configuration of a run.
func (bc *benchLoaderConfig) loaderConfig(ds loader.Dataset, mode string, epochs int) (loader.Config, error) {
	lf := bc.lf
	lf.Shuffle, lf.Epochs = mode, epochs
	cfg, err := lf.Settings()
	cfg.Dataset, cfg.Workers, cfg.Prefetch = ds, bc.workers, bc.prefetch
	return cfg, err
}
