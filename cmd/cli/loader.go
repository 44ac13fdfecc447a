package cli

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/synth"
	"github.com/cacheagent/cacheagent/object"
)

// maxManifest bounds a manifest file read by --manifest.
const maxManifest = 256 << 20

// LoaderFlags say which dataset a loader reads and in which order: the
// flags of `cacheagent loader ids` and `cacheagent-bench loader`.
type LoaderFlags struct {
	Data         string
	Pattern      string
	Manifest     string
	Batch        int
	Seed         uint64
	Epoch        int
	Epochs       int
	Rank         int
	World        int
	Shuffle      string
	Nodes        int
	Node         int
	RanksPerNode int
	Window       int
	Tail         string
	DropLast     bool
	ResumeBatch  int
	Format       string
	SeqLen       int
	TokenDType   string
	TokenOut     string
}

// Register adds the flags to fs.
func (f *LoaderFlags) Register(fs *pflag.FlagSet) {
	fs.StringVar(&f.Data, "data", "", "the dataset's prefix, gs://BUCKET/PREFIX (with --pattern)")
	fs.StringVar(&f.Pattern, "pattern", synth.Pattern, "shard file pattern under --data: one * names the shard, {a,b} the arrays")
	fs.StringVar(&f.Manifest, "manifest", "", "a JSON manifest file listing the shards (instead of --data)")
	fs.IntVar(&f.Batch, "batch", 256, "samples per batch")
	fs.Uint64Var(&f.Seed, "seed", 0, "shuffle seed")
	fs.IntVar(&f.Epoch, "epoch", 0, "first epoch")
	fs.IntVar(&f.Epochs, "epochs", 1, "number of epochs")
	fs.IntVar(&f.Rank, "rank", 0, "this rank")
	fs.IntVar(&f.World, "world", 1, "number of ranks")
	fs.StringVar(&f.Shuffle, "shuffle", sampler.ShardWindow.String(),
		"shuffle mode: shard-window, global, sequential or node (each node's ranks read a node-fixed partition of the shards)")
	fs.IntVar(&f.RanksPerNode, "ranks-per-node", envInt("LOCAL_WORLD_SIZE"),
		"--shuffle node: ranks on each node (default $LOCAL_WORLD_SIZE, else --world: one node); --nodes is --world / this")
	fs.IntVar(&f.Nodes, "nodes", 0, "--shuffle node: number of nodes (default --world / --ranks-per-node)")
	fs.IntVar(&f.Node, "node", -1, "--shuffle node: this rank's node (default --rank / ranks per node)")
	fs.IntVar(&f.Window, "window", sampler.DefaultWindow, "shard-window mode's window, in shards")
	fs.StringVar(&f.Tail, "tail", sampler.Wrap.String(), "evening an epoch out across ranks: wrap (pad with repeats) or drop")
	fs.BoolVar(&f.DropLast, "drop-last", false, "drop each epoch's last batch if it is not full")
	fs.IntVar(&f.ResumeBatch, "resume-batch", 0, "start at this batch of --epoch (a resumed run)")
	fs.StringVar(&f.Format, "format", "", "shard format: npy, tokens, megatron or webdataset "+
		"(default: megatron for a {bin,idx} pattern, webdataset for *.tar, tokens with --token-dtype or --seq-len, else npy)")
	fs.IntVar(&f.SeqLen, "seq-len", 0, "token datasets: window length L (samples are L+1 tokens)")
	fs.StringVar(&f.TokenDType, "token-dtype", "", "raw token files' type, e.g. uint16 (llm.c shards carry theirs)")
	fs.StringVar(&f.TokenOut, "token-out-dtype", "", "token datasets: batches' type, int64 or int32 (default: the tokens' own)")
}

// Options returns the loader options the flags describe; records and idx
// serve WebDataset datasets (nil elsewhere).
func (f *LoaderFlags) Options(records loader.Source, idx loader.IndexCache) (loader.Options, error) {
	o := loader.Options{SeqLen: f.SeqLen, Records: records, Index: idx}
	var err error
	if f.TokenDType != "" {
		if o.TokenDType, err = loader.ParseDType(f.TokenDType); err != nil {
			return o, fmt.Errorf("--token-dtype: %w", err)
		}
	}
	switch {
	case f.Format != "":
		if o.Format, err = loader.ParseFormat(f.Format); err != nil {
			return o, fmt.Errorf("--format: %w", err)
		}
	default:
		o.Format = loader.GuessFormat(f.Pattern, f.TokenDType != "" || f.SeqLen != 0)
	}
	if (o.Format == loader.FormatTokens || o.Format == loader.FormatMegatron) && o.SeqLen < 1 {
		return o, fmt.Errorf("--format %s needs --seq-len", o.Format)
	}
	return o, nil
}

// Dataset builds the dataset from --data and --pattern, or --manifest,
// reading headers from src. A WebDataset dataset needs DatasetWith.
func (f *LoaderFlags) Dataset(ctx context.Context, src object.Source) (loader.Dataset, error) {
	return f.DatasetWith(ctx, src, nil, nil)
}

// DatasetWith is Dataset with the Source that lends WebDataset shards to
// index, and where their indexes are kept.
func (f *LoaderFlags) DatasetWith(ctx context.Context, src object.Source, records loader.Source,
	idx loader.IndexCache) (loader.Dataset, error) {
	o, err := f.Options(records, idx)
	if err != nil {
		return loader.Dataset{}, err
	}
	switch {
	case (f.Data == "") == (f.Manifest == ""):
		return loader.Dataset{}, fmt.Errorf("give either --data gs://BUCKET/PREFIX or --manifest FILE")
	case f.Manifest != "" && o.Format != loader.FormatNPY:
		return loader.Dataset{}, fmt.Errorf("--manifest lists .npy datasets; --format %s needs --data", o.Format)
	case f.Manifest != "":
		b, err := readLimited(f.Manifest, maxManifest)
		if err != nil {
			return loader.Dataset{}, err
		}
		d, err := loader.ParseManifest(b)
		if err != nil {
			return loader.Dataset{}, fmt.Errorf("%s: %w", f.Manifest, err)
		}
		return d.Resolve(ctx, src)
	}
	u, err := object.ParsePrefix(f.Data)
	if err != nil {
		return loader.Dataset{}, err
	}
	return loader.FromPatternWith(ctx, src, u.Bucket, u.Path, f.Pattern, o)
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

// Config returns the loader configuration the flags describe, for ds.
func (f *LoaderFlags) Config(ds loader.Dataset) (loader.Config, error) {
	mode, err := sampler.ParseMode(f.Shuffle)
	if err != nil {
		return loader.Config{}, fmt.Errorf("--shuffle: %w", err)
	}
	var tail sampler.Tail
	switch f.Tail {
	case sampler.Wrap.String():
	case sampler.Drop.String():
		tail = sampler.Drop
	default:
		return loader.Config{}, fmt.Errorf("--tail %q: want wrap or drop", f.Tail)
	}
	cfg := loader.Config{Dataset: ds, BatchSize: f.Batch, DropLast: f.DropLast, Shuffle: mode, Seed: f.Seed,
		Window: f.Window, Rank: f.Rank, World: f.World, Tail: tail, Epoch: f.Epoch, Epochs: f.Epochs}
	if mode == sampler.Node {
		if cfg.Nodes, cfg.Node, err = sampler.Place(f.Rank, f.World, f.RanksPerNode, f.Nodes, f.Node); err != nil {
			return loader.Config{}, fmt.Errorf("--shuffle node (--ranks-per-node, --nodes, --node): %w", err)
		}
	}
	if f.ResumeBatch != 0 {
		cfg.Resume = &loader.State{Epoch: f.Epoch, Batch: f.ResumeBatch}
	}
	if f.TokenOut != "" {
		if cfg.TokenOut, err = loader.ParseDType(f.TokenOut); err != nil {
			return loader.Config{}, fmt.Errorf("--token-out-dtype: %w", err)
		}
	}
	return cfg, nil
}

// envInt returns the integer in the environment variable name, or 0.
func envInt(name string) int {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return 0
	}
	return n
}
