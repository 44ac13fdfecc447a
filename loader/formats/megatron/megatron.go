// Package megatron is the loader's format of Megatron-LM indexed datasets,
// "megatron": a .bin of tokens and a .idx of its sequences per shard, named
// "bin" and "idx" by the pattern's braces ("shard-*.{bin,idx}"). Its
// samples are token windows (package tokens): the sequences of each .bin in
// index order, merged into contiguous runs, then the shards' streams
// concatenated.
package megatron

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/formats/tokens"
	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	mgidx "github.com/cacheagent/cacheagent/mmapstore/megatron"
	"github.com/cacheagent/cacheagent/object"
)

// Format is the Megatron-LM indexed dataset format, "megatron".
var Format loader.Format = megatronFormat{}

// megatronFormat is Format.
type megatronFormat struct{}

// Name implements loader.Format.
func (megatronFormat) Name() string { return "megatron" }

// Guess implements loader.Format: a pattern naming {bin,idx}.
func (megatronFormat) Guess(sp spec.Spec) bool {
	return strings.Contains(sp.Pattern, "{bin,idx}") || strings.Contains(sp.Pattern, "{idx,bin}")
}

// Build implements loader.Format: it reads every .idx whole (with ranged
// reads, not through the cache), once its header says the arrays fill its
// size, and checks it against its .bin's size. If the Spec gives a token
// type, the indexes' must match it.
func (megatronFormat) Build(ctx context.Context, env loader.Env, loc loader.Location, sp spec.Spec) (loader.Dataset, error) {
	return tokens.Build(ctx, env, loc, sp, Format, func(ctx context.Context, src object.Source, names []string, listed []object.Attrs) (array.DType, int64, error) {
		bin, idx := listed[0], listed[1]
		if names[0] != "bin" {
			bin, idx = idx, bin
		}
		return header(ctx, src, bin, idx)
	})
}

// Check implements loader.Format: the pattern must name {bin,idx}.
func (megatronFormat) Check(d loader.Dataset) (loader.Dataset, error) {
	if len(d.Names) != 2 || !slices.Contains(d.Names, "bin") || !slices.Contains(d.Names, "idx") {
		return d, fmt.Errorf("%w: a Megatron shard is a .bin and a .idx: the pattern must name {bin,idx}, not %v",
			loader.ErrDataset, d.Names)
	}
	return tokens.Check(d)
}

// NewReader implements loader.Format.
func (megatronFormat) NewReader(d loader.Dataset, o loader.ReadOptions) (loader.Reader, error) {
	return tokens.NewReader(d, o, segments)
}

// header reads a Megatron shard's .idx whole, once its header says the
// arrays fill its size, and checks it against the .bin's size.
func header(ctx context.Context, src object.Source, bin, idx object.Attrs) (array.DType, int64, error) {
	h, err := loader.ReadPrefix(ctx, src, idx, mgidx.HeaderSize)
	if err != nil {
		return 0, 0, err
	}
	if err := mgidx.CheckSize(h, idx.Size); err != nil {
		return 0, 0, fmt.Errorf("%w: %s: %w", loader.ErrDataset, idx.Object, err)
	}
	b, err := loader.ReadPrefix(ctx, src, idx, idx.Size)
	if err != nil {
		return 0, 0, err
	}
	x, err := mgidx.ParseIndex(b)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %s: %w", loader.ErrDataset, idx.Object, err)
	}
	if err := x.Validate(bin.Size); err != nil {
		return 0, 0, fmt.Errorf("%w: %s against %s: %w", loader.ErrDataset, idx.Object, bin.Object, err)
	}
	return x.DType, x.TotalTokens(), nil
}

// segments returns the segments of shard g's tokens: its sequences in
// index order, merged into maximal contiguous runs of the .bin (all of it,
// for the datasets Megatron's builder writes).
func segments(d loader.Dataset, g int, b [][]byte, start int64) ([]tokens.Segment, error) {
	sh, dt := d.Groups[g], d.Token.DType
	binObj, idxObj := sh.Objects[0], sh.Objects[1]
	bin, idx := b[0], b[1]
	if d.Names[0] != "bin" {
		binObj, idxObj, bin, idx = idxObj, binObj, idx, bin
	}
	x, err := mgidx.ParseIndex(idx)
	if err != nil {
		return nil, fmt.Errorf("%w: shard %d (%s): %w", loader.ErrDataset, g, idxObj, err)
	}
	if x.DType != dt || x.TotalTokens() != sh.Tokens {
		return nil, fmt.Errorf("%w: shard %d (%s) holds %d %s tokens; the dataset says %d %s",
			loader.ErrDataset, g, idxObj, x.TotalTokens(), x.DType, sh.Tokens, dt)
	}
	if err := x.Validate(int64(len(bin))); err != nil {
		return nil, fmt.Errorf("%w: shard %d: %s against %s: %w", loader.ErrDataset, g, idxObj, binObj, err)
	}
	var segs []tokens.Segment
	size := int64(x.ItemSize)
	var runOff, runEnd int64 // the current run's bytes in bin
	for i := range x.NumSequences() {
		off, n := x.Sequence(i)
		if n == 0 {
			continue
		}
		if k := len(segs) - 1; k >= 0 && off == runEnd {
			runEnd += n * size
			segs[k].Data = bin[runOff:runEnd:runEnd]
			continue
		}
		runOff, runEnd = off, off+n*size
		segs = append(segs, tokens.Segment{Data: bin[runOff:runEnd:runEnd], Object: binObj})
	}
	return tokens.FixStarts(segs, start, size), nil
}
