package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/daemon"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/synth"
)

// The demo's dataset lives at gs://demoBucket/demoPrefix in the emulator.
const (
	demoBucket = "demo-data"
	demoPrefix = "train/"
	// demoConnections is the agent's connection budget when neither
	// --connections nor a config file sets one. With the default link it
	// emulates 300 MB/s, which a small VM can serve, verify, fsync to its
	// disk and promote to shm all at once, so that the link is what
	// limits the cold epoch (the agent's default of 64 would emulate
	// 6.4 GB/s, far beyond what one machine can emulate and absorb).
	demoConnections = 3
	// demoMaxBytes bounds the dataset, which the demo holds in memory
	// (and the emulator a copy of it).
	demoMaxBytes = 8 << 30
	// demoMaxShards bounds the number of shards (two objects each).
	demoMaxShards = 10000
)

// demoConfig sizes the embedded demo.
type demoConfig struct {
	shards      int
	samples     int
	sampleBytes cli.Size
	batch       int
	epochs      int
	step        time.Duration
	linkRate    cli.Size
	firstByte   time.Duration
	keep        bool
	// connections is the agent's budget, resolved in RunE.
	connections int
}

func newDemoCmd(opts *cli.Options) *cobra.Command {
	dc := &demoConfig{shards: 12, samples: 48000, sampleBytes: 16 << 10, batch: 256, epochs: 3,
		linkRate: 100e6, firstByte: 20 * time.Millisecond}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the agent on an embedded GCS emulator with a synthetic dataset",
		Long: `demo needs no cloud account. It starts an in-process GCS emulator shaped like a real
GCS link (first byte after --first-byte, --link-rate per connection) holding a
generated dataset of .npy shards (--shards shards of x.npy and y.npy, --samples rows
of --sample-bytes), then reads it for --epochs epochs with the Go loader, twice:

  - direct: no cache; every epoch reads every shard from GCS;
  - agent: a fresh cache with a /dev/shm tier; epoch 1 is cold (a prefetch in the
    loader's order runs alongside the loader), the later epochs are served from shm.

It prints a table per epoch (samples/s, time stalled on data, bytes from GCS, hit
ratio, speedup), the warm speedup and the cold epoch against the link's limit. If
FUSE works here it also mounts the cache and reads a shard through the mount.
Everything it creates (temporary directories, the /dev/shm directory, the mount) is
removed at the end, also on error or Ctrl-C.

The agent uses --connections if given (or the config file's), else 3 (a 300 MB/s
link by default). The direct reader reads each shard with one stream, two shards at
a time (the loader's lookahead).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dc.connections = demoConnections
			if cmd.Flags().Changed("connections") || opts.ConfigFile != "" {
				dc.connections = opts.Config().Fetch.Connections
			}
			return runDemo(cmd.Context(), cmd.OutOrStdout(), opts, dc)
		},
	}
	f := cmd.Flags()
	f.IntVar(&dc.shards, "shards", dc.shards, "shards in the synthetic dataset (each an x.npy and a y.npy)")
	f.IntVar(&dc.samples, "samples", dc.samples, "samples in the synthetic dataset")
	f.Var(&dc.sampleBytes, "sample-bytes", "bytes of each sample's x row (y adds 8)")
	f.IntVar(&dc.batch, "batch", dc.batch, "samples per batch")
	f.IntVar(&dc.epochs, "epochs", dc.epochs, "epochs read by each reader")
	f.DurationVar(&dc.step, "step", 0, "time the consumer spends on each batch, as a training step would (0: none)")
	f.Var(&dc.linkRate, "link-rate", "emulated bytes per second per connection (0: unshaped)")
	f.DurationVar(&dc.firstByte, "first-byte", dc.firstByte, "emulated time to first byte")
	f.BoolVar(&dc.keep, "keep", false, "keep the demo's cache directories")
	return cmd
}

// validate rejects sizes the demo cannot run with, naming the flag.
func (dc *demoConfig) validate() error {
	for _, c := range []struct {
		bad  bool
		flag string
		v    any
		want string
	}{
		{dc.shards <= 0 || dc.shards > demoMaxShards, "--shards", dc.shards, fmt.Sprintf("1 to %d", demoMaxShards)},
		{dc.samples < dc.shards, "--samples", dc.samples, "at least one per shard"},
		{dc.sampleBytes <= 0, "--sample-bytes", int64(dc.sampleBytes), "positive"},
		{int64(dc.samples) > demoMaxBytes/max(int64(dc.sampleBytes), 1), "--samples × --sample-bytes",
			fmt.Sprintf("%d × %d", dc.samples, dc.sampleBytes), "at most 8 GiB (the demo holds the dataset in memory)"},
		{dc.batch <= 0, "--batch", dc.batch, "positive"},
		{dc.epochs <= 0, "--epochs", dc.epochs, "positive"},
		{dc.step < 0, "--step", dc.step, "0 or more"},
		{dc.linkRate < 0, "--link-rate", int64(dc.linkRate), "0 or more"},
		{dc.firstByte < 0, "--first-byte", dc.firstByte, "0 or more"},
		{dc.connections <= 0, "--connections", dc.connections, "positive"},
	} {
		if c.bad {
			return fmt.Errorf("demo: %s %v: want %s", c.flag, c.v, c.want)
		}
	}
	return nil
}

// demoData is the synthetic dataset: its shape and its objects.
type demoData struct {
	shape synth.Dataset
	objs  []fakestorage.Object
	bytes int64
}

// newDemoData generates dc's dataset in memory.
func newDemoData(dc *demoConfig) (*demoData, error) {
	d := &demoData{shape: synth.Dataset{Rows: make([]int, dc.shards), RowBytes: int(dc.sampleBytes)}}
	for i := range d.shape.Rows {
		d.shape.Rows[i] = dc.samples / dc.shards
		if i < dc.samples%dc.shards {
			d.shape.Rows[i]++
		}
	}
	err := d.shape.Write(demoPrefix, func(name string, b []byte) error {
		d.objs = append(d.objs, fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: demoBucket,
			Name: name}, Content: b})
		d.bytes += int64(len(b))
		return nil
	})
	return d, err
}

// runDemo runs the demo and prints its report on w.
func runDemo(ctx context.Context, w io.Writer, opts *cli.Options, dc *demoConfig) (err error) {
	if err := dc.validate(); err != nil {
		return err
	}
	start := time.Now()
	data, err := newDemoData(dc)
	if err != nil {
		return fmt.Errorf("demo: generate the dataset: %w", err)
	}
	srv, err := emulator.Start(emulator.Options{Objects: data.objs,
		Shape: emulator.Shape{FirstByte: dc.firstByte, BytesPerSec: int64(dc.linkRate)}})
	if err != nil {
		return fmt.Errorf("demo: start emulator: %w", err)
	}
	defer srv.Close()
	dirs, err := makeDemoDirs(w, dc.keep)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dirs.remove(w)) }()
	fmt.Fprintf(w, "cacheagent demo: gs://%s/%s holds %d shards (x.npy, y.npy) of %d samples of %s: %s\n",
		demoBucket, demoPrefix, dc.shards, dc.samples, humanize.IBytes(uint64(dc.sampleBytes)),
		humanize.IBytes(uint64(data.bytes)))
	fmt.Fprintf(w, "emulated GCS: %s to first byte, %s/s per connection\n", dc.firstByte,
		humanize.Bytes(uint64(dc.linkRate)))
	fmt.Fprintf(w, "direct GCS: no cache; every epoch reads each shard whole, one stream per shard, %d shards at a time\n",
		dc.connections)
	fmt.Fprintf(w, "agent: %d connections, %s slices, objects up to %s on a lane of their own; "+
		"a prefetch in the loader's order runs alongside it\n", dc.connections,
		humanize.IBytes(uint64(opts.Config().Fetch.Slice)), humanize.IBytes(uint64(opts.Config().Fetch.SmallObject)))
	fmt.Fprintf(w, "cache: disk %s, shm %s\n", dirs.cache, cmp.Or(dirs.shm, "none"))
	fmt.Fprintf(w, "loader: batches of %d, shard-window shuffle; the consumer %s\n\n", dc.batch, consumerNote(dc.step))

	a, err := cli.OpenAgent(ctx, dirs.config(opts.Config(), srv.Endpoint(), dc.connections))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, a.Close()) }()
	ds, err := loader.FromPattern(ctx, a.Source, demoBucket, demoPrefix, synth.Pattern)
	if err != nil {
		return fmt.Errorf("demo: list the dataset: %w", err)
	}
	run := &demoRun{cfg: dc, emu: srv, ds: ds, bytes: data.bytes, out: w, warmTier: "shm"}
	if dirs.shm == "" {
		run.warmTier = "disk"
	}
	run.printHeader()
	// Each reader starts on a collected heap with the garbage of what ran
	// before returned to the OS: otherwise the garbage collector and the
	// scavenger work through it during the next reader's epochs (the
	// direct reader leaves a copy of every shard it read behind).
	debug.FreeOSMemory()
	if err := run.runDirect(ctx, a.Source); err != nil {
		return err
	}
	debug.FreeOSMemory()
	if err := run.runAgent(ctx, a); err != nil {
		return err
	}
	run.printSummary()
	line, err := demoMount(ctx, a, dirs.mnt, data.objs[0])
	if err != nil {
		return err
	}
	fmt.Fprintln(w, line)
	run.printLegend()
	fmt.Fprintf(w, "\ndemo done in %.1f s\n", time.Since(start).Seconds())
	return nil
}

// consumerNote says what the consumer does with each batch.
func consumerNote(step time.Duration) string {
	if step > 0 {
		return fmt.Sprintf("spends %s on each batch (--step), as a training step would", step)
	}
	return "takes each batch as soon as it is ready (--step simulates training)"
}

// demoDirs are the directories the demo creates.
type demoDirs struct {
	cache string // the disk tier, under the temporary directory
	shm   string // the shm tier, under /dev/shm; "" if unusable
	mnt   string // the FUSE mountpoint, inside cache's parent
	root  string // the temporary directory holding cache and mnt
	keep  bool
}

// makeDemoDirs creates the demo's directories: a temporary directory for
// the disk tier and the mountpoint, and one under /dev/shm for the shm tier
// (without one, the agent serves from disk, and says so on w).
func makeDemoDirs(w io.Writer, keep bool) (*demoDirs, error) {
	root, err := os.MkdirTemp("", "cacheagent-demo-")
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	d := &demoDirs{root: root, cache: root + "/cache", mnt: root + "/mnt", keep: keep}
	shm, err := os.MkdirTemp("/dev/shm", "cacheagent-demo-")
	if err != nil {
		fmt.Fprintf(w, "note: /dev/shm is unusable (%v): the agent serves from its disk tier\n", err)
	} else {
		d.shm = shm
	}
	return d, nil
}

// config returns cfg with the demo's emulator, directories and
// connections in place of what the flags and config file said.
func (d *demoDirs) config(cfg daemon.Config, endpoint string, conns int) daemon.Config {
	cfg.Fetch.Endpoint, cfg.Fetch.Connections = endpoint, conns
	cfg.Tiers.Disk.Dir, cfg.Tiers.Disk.Max = d.cache, 0
	cfg.Tiers.Shm.Dir, cfg.Tiers.Shm.Max = d.shm, 0
	return cfg
}

// remove removes the directories unless they are to be kept.
func (d *demoDirs) remove(w io.Writer) error {
	if d.keep {
		fmt.Fprintf(w, "kept: %s %s\n", d.root, d.shm)
		return nil
	}
	err := os.RemoveAll(d.root)
	if d.shm != "" {
		err = errors.Join(err, os.RemoveAll(d.shm))
	}
	if err != nil {
		return fmt.Errorf("demo: clean up: %w", err)
	}
	return nil
}
