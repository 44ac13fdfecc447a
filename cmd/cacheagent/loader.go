package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/synth"
)

// maxManifest bounds a manifest file read by --manifest.
const maxManifest = 256 << 20

// loaderFlags say which dataset a loader reads and in which order.
type loaderFlags struct {
	data        string
	pattern     string
	manifest    string
	batch       int
	seed        uint64
	epoch       int
	epochs      int
	rank        int
	world       int
	shuffle     string
	window      int
	tail        string
	dropLast    bool
	resumeBatch int
}

// register adds the flags to fs.
func (f *loaderFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.data, "data", "", "the dataset's prefix, gs://BUCKET/PREFIX (with --pattern)")
	fs.StringVar(&f.pattern, "pattern", synth.Pattern, "shard file pattern under --data: one * names the shard, {a,b} the arrays")
	fs.StringVar(&f.manifest, "manifest", "", "a JSON manifest file listing the shards (instead of --data)")
	fs.IntVar(&f.batch, "batch", 256, "samples per batch")
	fs.Uint64Var(&f.seed, "seed", 0, "shuffle seed")
	fs.IntVar(&f.epoch, "epoch", 0, "first epoch")
	fs.IntVar(&f.epochs, "epochs", 1, "number of epochs")
	fs.IntVar(&f.rank, "rank", 0, "this rank")
	fs.IntVar(&f.world, "world", 1, "number of ranks")
	fs.StringVar(&f.shuffle, "shuffle", sampler.ShardWindow.String(), "shuffle mode: shard-window, global or sequential")
	fs.IntVar(&f.window, "window", sampler.DefaultWindow, "shard-window mode's window, in shards")
	fs.StringVar(&f.tail, "tail", sampler.Wrap.String(), "evening an epoch out across ranks: wrap (pad with repeats) or drop")
	fs.BoolVar(&f.dropLast, "drop-last", false, "drop each epoch's last batch if it is not full")
	fs.IntVar(&f.resumeBatch, "resume-batch", 0, "start at this batch of --epoch (a resumed run)")
}

// dataset builds the dataset from --data and --pattern, or --manifest,
// reading headers from src.
func (f *loaderFlags) dataset(ctx context.Context, src fetch.Source) (loader.Dataset, error) {
	switch {
	case (f.data == "") == (f.manifest == ""):
		return loader.Dataset{}, fmt.Errorf("give either --data gs://BUCKET/PREFIX or --manifest FILE")
	case f.manifest != "":
		b, err := readLimited(f.manifest, maxManifest)
		if err != nil {
			return loader.Dataset{}, err
		}
		d, err := loader.ParseManifest(b)
		if err != nil {
			return loader.Dataset{}, fmt.Errorf("%s: %w", f.manifest, err)
		}
		return d.Resolve(ctx, src)
	}
	u, err := fetch.ParsePrefix(f.data)
	if err != nil {
		return loader.Dataset{}, err
	}
	return loader.FromPattern(ctx, src, u.Bucket, u.Path, f.pattern)
}

// readLimited reads a file of at most max bytes.
func readLimited(path string, max int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%s: %d bytes; at most %d", path, fi.Size(), max)
	}
	return os.ReadFile(path)
}

// config returns the loader configuration the flags describe, for ds.
func (f *loaderFlags) config(ds loader.Dataset) (loader.Config, error) {
	mode, err := sampler.ParseMode(f.shuffle)
	if err != nil {
		return loader.Config{}, fmt.Errorf("--shuffle: %w", err)
	}
	var tail sampler.Tail
	switch f.tail {
	case sampler.Wrap.String():
	case sampler.Drop.String():
		tail = sampler.Drop
	default:
		return loader.Config{}, fmt.Errorf("--tail %q: want wrap or drop", f.tail)
	}
	cfg := loader.Config{Dataset: ds, BatchSize: f.batch, DropLast: f.dropLast, Shuffle: mode, Seed: f.seed,
		Window: f.window, Rank: f.rank, World: f.world, Tail: tail, Epoch: f.epoch, Epochs: f.epochs}
	if f.resumeBatch != 0 {
		cfg.Resume = &loader.State{Epoch: f.epoch, Batch: f.resumeBatch}
	}
	return cfg, nil
}

// newLoaderCmd groups the loader's commands.
func newLoaderCmd(opts *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "loader",
		Short: "Inspect what the Go loader reads",
	}
	cmd.AddCommand(newLoaderIDsCmd(opts))
	return cmd
}

// newLoaderIDsCmd is `cacheagent loader ids`.
func newLoaderIDsCmd(opts *options) *cobra.Command {
	var lf loaderFlags
	cmd := &cobra.Command{
		Use:   "ids --data gs://BUCKET/PREFIX [--pattern P] --batch N --seed S --epoch E --rank R --world W",
		Short: "Print the sample ids of each batch a rank reads, one batch per line",
		Long: `ids prints, one line per batch and in order, the ids of the samples a loader with
these settings returns (ids number the rows of all shards, in shard order). It lists
the dataset and reads each shard's .npy header with a small ranged read, but reads no
data: the order depends only on the row counts and the settings, and is the same on
every machine. --resume-batch K starts at batch K of --epoch, as a resumed run does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			src, err := fetch.NewGCS(ctx, opts.config().Fetch.GCS())
			if err != nil {
				return err
			}
			defer src.Close()
			ds, err := lf.dataset(ctx, src)
			if err != nil {
				return err
			}
			cfg, err := lf.config(ds)
			if err != nil {
				return err
			}
			return printIDs(cmd, cfg)
		},
	}
	lf.register(cmd.Flags())
	return cmd
}

// printIDs prints the batches of cfg, one line of space-separated ids each.
func printIDs(cmd *cobra.Command, cfg loader.Config) error {
	seq, err := loader.IDs(cfg)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	var line []byte
	for b := range seq {
		line = line[:0]
		for i, id := range b.IDs {
			if i > 0 {
				line = append(line, ' ')
			}
			line = strconv.AppendInt(line, id, 10)
		}
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	return w.Flush()
}
