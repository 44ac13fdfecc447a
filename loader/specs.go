package loader

import (
	"context"
	"fmt"

	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/object"
)

// Limits of a Spec's settings.
const (
	// MaxBatchSize is the largest batch a Spec may ask for.
	MaxBatchSize = 1 << 24
	// MaxWorkers is the most gathering goroutines a Spec may ask for.
	MaxWorkers = 1024
)

// Resolve turns a loader request into a Loader configuration: the
// settings (ResolveSettings) and the dataset (ResolveDataset). It is how
// `cacheagent loader`, the daemon's loader sessions and the benchmarks all
// read a Spec. Errors wrap ErrConfig for a malformed request, the dataset's
// errors (ErrDataset, ErrPattern, ErrManifest) and the source's
// (object.ErrNotFound for a missing bucket or shard).
func Resolve(ctx context.Context, sp spec.Spec, env Env) (Config, error) {
	cfg, err := ResolveSettings(sp)
	if err != nil {
		return Config{}, err
	}
	if cfg.Dataset, err = ResolveDataset(ctx, sp, env); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// ResolveSettings returns the configuration sp asks for without its
// dataset: batching, order, ranks, epochs, resume and buffers, checked.
func ResolveSettings(sp spec.Spec) (Config, error) {
	cfg := Config{BatchSize: sp.BatchSize, DropLast: sp.DropLast, Window: sp.Window, Seed: sp.Seed,
		Rank: sp.Rank, World: sp.World, Epoch: sp.Epoch, Epochs: sp.Epochs, Prefetch: sp.Prefetch,
		Workers: sp.Workers, FieldBytes: sp.FieldBytes}
	switch {
	case cfg.BatchSize <= 0 || cfg.BatchSize > MaxBatchSize:
		return cfg, fmt.Errorf("%w: batch_size %d: want 1 to %d", ErrConfig, cfg.BatchSize, MaxBatchSize)
	case cfg.Prefetch < 0:
		return cfg, fmt.Errorf("%w: prefetch %d", ErrConfig, cfg.Prefetch)
	case cfg.FieldBytes < 0:
		return cfg, fmt.Errorf("%w: field_bytes %d", ErrConfig, cfg.FieldBytes)
	case cfg.Workers < 0 || cfg.Workers > MaxWorkers:
		return cfg, fmt.Errorf("%w: workers %d: want 0 to %d", ErrConfig, cfg.Workers, MaxWorkers)
	case cfg.Epochs < 0 || cfg.Epoch < 0:
		return cfg, fmt.Errorf("%w: epochs %d from %d", ErrConfig, cfg.Epochs, cfg.Epoch)
	case cfg.World < 0 || cfg.Rank < 0 || (cfg.World > 0 && cfg.Rank >= cfg.World) || (cfg.World == 0 && cfg.Rank > 0):
		return cfg, fmt.Errorf("%w: rank %d of world %d", ErrConfig, cfg.Rank, cfg.World)
	}
	var err error
	if sp.TokenOutDType != "" {
		if cfg.TokenOut, err = ParseDType(sp.TokenOutDType); err != nil {
			return cfg, fmt.Errorf("token_out_dtype: %w", err)
		}
	}
	if sp.Shuffle != "" {
		if cfg.Shuffle, err = sampler.ParseMode(sp.Shuffle); err != nil {
			return cfg, fmt.Errorf("%w: shuffle: %w", ErrConfig, err)
		}
	}
	switch sp.Tail {
	case "", sampler.Wrap.String():
	case sampler.Drop.String():
		cfg.Tail = sampler.Drop
	default:
		return cfg, fmt.Errorf("%w: tail %q: want wrap or drop", ErrConfig, sp.Tail)
	}
	if cfg.Shuffle == sampler.Node {
		node := -1
		if sp.Node != nil {
			if node = *sp.Node; node < 0 {
				return cfg, fmt.Errorf("%w: node %d", ErrConfig, node)
			}
		}
		if cfg.Nodes, cfg.Node, err = sampler.Place(cfg.Rank, cfg.World, sp.RanksPerNode, sp.Nodes, node); err != nil {
			return cfg, fmt.Errorf("%w: shuffle node (ranks_per_node, nodes, node): %w", ErrConfig, err)
		}
	}
	if r := sp.Resume; r != nil {
		cfg.Resume = &State{Epoch: r.Epoch, Batch: r.Batch, Fingerprint: r.Fingerprint}
	}
	return cfg, nil
}

// ResolveDataset builds the dataset sp names: from a manifest (NPY; its
// headers read for what it leaves out), or from the objects under sp.Data
// matching sp.Pattern with the format sp names or the first of env.Formats
// that guesses it.
func ResolveDataset(ctx context.Context, sp spec.Spec, env Env) (Dataset, error) {
	f, err := lookup(sp, env.Formats)
	if err != nil {
		return Dataset{}, err
	}
	switch {
	case (sp.Data == "") == (len(sp.Manifest) == 0):
		return Dataset{}, fmt.Errorf("%w: give either data (gs://BUCKET/PREFIX, with a pattern) or a manifest", ErrConfig)
	case len(sp.Manifest) > 0 && (sp.Pattern != "" || f.Name() != NPY.Name()):
		return Dataset{}, fmt.Errorf("%w: a manifest lists .npy datasets, with no pattern; format %s needs data",
			ErrConfig, f.Name())
	case len(sp.Manifest) > 0:
		d, err := ParseManifest(sp.Manifest)
		if err != nil {
			return Dataset{}, err
		}
		return d.Resolve(ctx, env.Source)
	case sp.Pattern == "":
		return Dataset{}, fmt.Errorf("%w: data needs a pattern (e.g. \"shard-*.{x,y}.npy\")", ErrConfig)
	}
	u, err := object.ParsePrefix(sp.Data)
	if err != nil {
		return Dataset{}, fmt.Errorf("%w: data: %w", ErrConfig, err)
	}
	return f.Build(ctx, env, Location{Bucket: u.Bucket, Prefix: u.Path, Pattern: sp.Pattern}, sp)
}

// LayoutOf returns what every batch of a Loader of cfg holds (its dataset
// format's Reader's Layout), without starting one: the daemon sizes a
// loader session's ring by it.
func LayoutOf(cfg Config) (Layout, error) {
	s, err := cfg.settings()
	if err != nil {
		return Layout{}, err
	}
	r, err := s.Dataset.format().NewReader(s.Dataset, s.readOptions())
	if err != nil {
		return Layout{}, err
	}
	return r.Layout(), nil
}
