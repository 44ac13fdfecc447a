package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/formats"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/spec"
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
	fs.StringVar(&f.Format, "format", "", "shard format: "+strings.Join(formats.Names(), ", ")+
		" (default: megatron for a {bin,idx} pattern, webdataset for *.tar, safetensors for *.safetensors, "+
		"tokens with --token-dtype or --seq-len, else npy)")
	fs.IntVar(&f.SeqLen, "seq-len", 0, "token datasets: window length L (samples are L+1 tokens)")
	fs.StringVar(&f.TokenDType, "token-dtype", "", "raw token files' type, e.g. uint16 (llm.c shards carry theirs)")
	fs.StringVar(&f.TokenOut, "token-out-dtype", "", "token datasets: batches' type, int64 or int32 (default: the tokens' own)")
}

// Spec returns the loader request the flags describe, a --manifest file
// read into it.
func (f *LoaderFlags) Spec() (spec.Spec, error) {
	sp := spec.Spec{Data: f.Data, Pattern: f.Pattern, Format: f.Format, SeqLen: f.SeqLen, TokenDType: f.TokenDType,
		TokenOutDType: f.TokenOut, BatchSize: f.Batch, Shuffle: f.Shuffle, Window: f.Window, Seed: f.Seed,
		Epoch: f.Epoch, Epochs: f.Epochs, Rank: f.Rank, World: f.World, RanksPerNode: f.RanksPerNode,
		Nodes: f.Nodes, DropLast: f.DropLast, Tail: f.Tail}
	if f.Node >= 0 {
		sp.Node = &f.Node
	}
	if f.ResumeBatch != 0 {
		sp.Resume = &spec.State{Epoch: f.Epoch, Batch: f.ResumeBatch}
	}
	if f.Manifest != "" {
		if f.Data != "" {
			return sp, fmt.Errorf("give either --data gs://BUCKET/PREFIX or --manifest FILE")
		}
		b, err := readLimited(f.Manifest, maxManifest)
		if err != nil {
			return sp, err
		}
		sp.Manifest, sp.Pattern = b, ""
	}
	return sp, nil
}

// Settings returns the loader configuration the flags describe, without
// its dataset (loader.ResolveSettings).
func (f *LoaderFlags) Settings() (loader.Config, error) {
	sp, err := f.Spec()
	if err != nil {
		return loader.Config{}, err
	}
	return loader.ResolveSettings(sp)
}

// Resolve returns the loader configuration the flags describe, its
// dataset built through src (listings and headers), records (whole shards
// a format must read to index them; nil: none) and idx (where such
// indexes are kept; nil: nowhere), with every format (loader.Resolve).
func (f *LoaderFlags) Resolve(ctx context.Context, src object.Source, records loader.Source,
	idx loader.IndexCache) (loader.Config, error) {
	sp, err := f.Spec()
	if err != nil {
		return loader.Config{}, err
	}
	cfg, err := loader.Resolve(ctx, sp, loader.Env{Source: src, Records: records, Index: idx, Formats: formats.All})
	if f.Manifest != "" && err != nil {
		err = fmt.Errorf("%s: %w", f.Manifest, err)
	}
	return cfg, err
}

// readLimited reads a file of at most max bytes (a device or a pipe too,
// whose size says nothing, and a file growing meanwhile).
func readLimited(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: more than %d bytes", path, max)
	}
	return b, nil
}

// envInt returns the integer in the environment variable name, or 0.
func envInt(name string) int {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return 0
	}
	return n
}
