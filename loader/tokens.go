package loader

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/mmapstore/megatron"
	"github.com/cacheagent/cacheagent/mmapstore/tokens"
	"github.com/cacheagent/cacheagent/object"
)

// Options say how FromPatternWith reads a dataset's shards.
type Options struct {
	// Format is the shards' format; the zero value is FormatNPY.
	Format Format
	// TokenDType is the element type of headerless token files
	// (FormatTokens; llm.c shards carry theirs). For Megatron datasets,
	// if set, the index's type must match it.
	TokenDType array.DType
	// SeqLen is a token dataset's window length L (samples are L+1
	// tokens).
	SeqLen int
	// Records lends the tar shards of a WebDataset dataset to index them
	// (through the cache, so the data is fetched once); required for
	// FormatWebDataset unless every index is in Index.
	Records Source
	// Index, if set, keeps WebDataset member indexes across runs.
	Index IndexCache
}

// FromPatternWith is FromPattern for any format: it groups the objects
// matching pattern into shards as FromPattern does, then reads what the
// format needs to number the samples. Token files: the first 1 KiB of each
// (an llm.c header, if its magic is there) and its size; Megatron: every
// .idx whole (with ranged reads, not through the cache), checked against
// its .bin's size; WebDataset: each tar's member index, from o.Index or
// built by scanning the tar acquired through o.Records. Errors name the
// object and wrap ErrDataset (or the source's errors).
func FromPatternWith(ctx context.Context, src object.Source, bucket, prefix, pattern string, o Options) (Dataset, error) {
	switch o.Format {
	case FormatNPY:
		return FromPattern(ctx, src, bucket, prefix, pattern)
	case FormatTokens, FormatMegatron:
		return fromTokens(ctx, src, bucket, prefix, pattern, o)
	case FormatWebDataset:
		return fromRecords(ctx, src, bucket, prefix, pattern, o)
	}
	return Dataset{}, fmt.Errorf("%w: format %s", ErrConfig, o.Format)
}

// fromTokens builds a token dataset.
func fromTokens(ctx context.Context, src object.Source, bucket, prefix, pattern string, o Options) (Dataset, error) {
	d, listed, err := listShards(ctx, src, bucket, prefix, pattern)
	if err != nil {
		return Dataset{}, err
	}
	d.Format, d.Token = o.Format, TokenSpec{DType: o.TokenDType, SeqLen: o.SeqLen}
	if err := d.checkTokenNames(); err != nil {
		return Dataset{}, err
	}
	types := make([]array.DType, len(d.Groups))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(headerParallelism)
	for i := range d.Groups {
		g.Go(func() (err error) {
			sh := &d.Groups[i]
			if d.Format == FormatMegatron {
				bin, idx := d.megatronObjects(i)
				types[i], sh.Tokens, err = megatronHeader(gctx, src, listed[bin], listed[idx])
			} else {
				types[i], sh.Tokens, err = tokenHeader(gctx, src, listed[sh.Objects[0]], o.TokenDType)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return Dataset{}, err
	}
	for i, dt := range types {
		if d.Token.DType == 0 {
			d.Token.DType = dt
		}
		if dt != d.Token.DType {
			return Dataset{}, fmt.Errorf("%w: %s holds %s tokens; the dataset's are %s",
				ErrDataset, d.Groups[i].Objects[0], dt, d.Token.DType)
		}
	}
	return d.withWindows()
}

// checkTokenNames checks a token dataset's object names: one per shard
// for token files, "bin" and "idx" for Megatron.
func (d Dataset) checkTokenNames() error {
	switch {
	case d.Format == FormatTokens && len(d.Names) != 1:
		return fmt.Errorf("%w: token files are one object per shard; the pattern names %d (%v)",
			ErrDataset, len(d.Names), d.Names)
	case d.Format == FormatMegatron && (len(d.Names) != 2 || !slices.Contains(d.Names, "bin") || !slices.Contains(d.Names, "idx")):
		return fmt.Errorf("%w: a Megatron shard is a .bin and a .idx: the pattern must name {bin,idx}, not %v",
			ErrDataset, d.Names)
	}
	return nil
}

// megatronObjects returns shard i's .bin and .idx objects.
func (d Dataset) megatronObjects(i int) (bin, idx object.Object) {
	objs := d.Groups[i].Objects
	if d.Names[0] == "bin" {
		return objs[0], objs[1]
	}
	return objs[1], objs[0]
}

// validateTokens checks a token dataset's spec and counts.
func (d Dataset) validateTokens() error {
	if err := d.checkTokenNames(); err != nil {
		return err
	}
	if _, err := ParseDType(d.Token.DType.String()); err != nil {
		return fmt.Errorf("%w: token type %s is not an integer type", ErrDataset, d.Token.DType)
	}
	if d.Token.SeqLen < 1 {
		return fmt.Errorf("%w: sequence length %d", ErrDataset, d.Token.SeqLen)
	}
	if len(d.Specs) != 0 {
		return fmt.Errorf("%w: a token dataset has no array specs", ErrDataset)
	}
	for i, g := range d.Groups {
		if g.Tokens < 0 {
			return fmt.Errorf("%w: shard %d (%s) has %d tokens", ErrDataset, i, g.Objects[0], g.Tokens)
		}
	}
	return nil
}

// withWindows returns a copy of the token dataset d with every shard's
// Rows set to the number of windows starting in it.
func (d Dataset) withWindows() (Dataset, error) {
	if err := d.Validate(); err != nil {
		return Dataset{}, err
	}
	counts := make([]int64, len(d.Groups))
	for i, g := range d.Groups {
		counts[i] = g.Tokens
	}
	rows, err := windowRows(counts, d.Token.SeqLen)
	if err != nil {
		return Dataset{}, err
	}
	d.Groups = slices.Clone(d.Groups)
	for i := range d.Groups {
		d.Groups[i].Rows = rows[i]
	}
	return d, nil
}

// tokenHeader reads the start of a token file: an llm.c header gives the
// type and count, checked against the size; otherwise the file is raw
// tokens of type raw.
func tokenHeader(ctx context.Context, src object.Source, a object.Attrs, raw array.DType) (array.DType, int64, error) {
	b, err := readPrefix(ctx, src, a, tokens.LLMCHeaderSize)
	if err != nil {
		return 0, 0, err
	}
	if dt, n, ok, err := llmcHeader(b, a.Size); ok || err != nil {
		if err != nil {
			return 0, 0, fmt.Errorf("%w: %s: %w", ErrDataset, a.Object, err)
		}
		return dt, n, nil
	}
	if raw == 0 {
		return 0, 0, fmt.Errorf("%w: %s has no llm.c header: give the raw tokens' type (--token-dtype)", ErrDataset, a.Object)
	}
	if a.Size%int64(raw.Size()) != 0 {
		return 0, 0, fmt.Errorf("%w: %s: %d bytes is not a whole number of %s tokens", ErrDataset, a.Object, a.Size, raw)
	}
	return raw, a.Size / int64(raw.Size()), nil
}

// llmcHeader reads an llm.c header from b, the first bytes of an object
// of size bytes: ok is false if b does not start with an llm.c magic.
func llmcHeader(b []byte, size int64) (dt array.DType, n int64, ok bool, err error) {
	if len(b) < 4 {
		return 0, 0, false, nil
	}
	switch binary.LittleEndian.Uint32(b) {
	case tokens.MagicUint16:
		dt = array.Uint16
	case tokens.MagicUint32:
		dt = array.Uint32
	default:
		return 0, 0, false, nil
	}
	if size < tokens.LLMCHeaderSize || len(b) < 12 {
		return 0, 0, true, fmt.Errorf("%w: %d bytes, the llm.c header needs %d", tokens.ErrTruncated, size, tokens.LLMCHeaderSize)
	}
	if v := int32(binary.LittleEndian.Uint32(b[4:])); v != 1 && v != 7 {
		return 0, 0, true, fmt.Errorf("%w %d", tokens.ErrVersion, v)
	}
	n = int64(int32(binary.LittleEndian.Uint32(b[8:])))
	if have := size - tokens.LLMCHeaderSize; n < 0 || n*int64(dt.Size()) != have {
		return 0, 0, true, fmt.Errorf("%w: llm.c header says %d %s tokens, %d bytes follow it", tokens.ErrSize, n, dt, have)
	}
	return dt, n, true, nil
}

// megatronHeader reads a Megatron shard's .idx whole, once its header
// says the arrays fill its size, and checks it against the .bin's size.
func megatronHeader(ctx context.Context, src object.Source, bin, idx object.Attrs) (array.DType, int64, error) {
	h, err := readPrefix(ctx, src, idx, megatron.HeaderSize)
	if err != nil {
		return 0, 0, err
	}
	if err := megatron.CheckSize(h, idx.Size); err != nil {
		return 0, 0, fmt.Errorf("%w: %s: %w", ErrDataset, idx.Object, err)
	}
	b, err := readPrefix(ctx, src, idx, idx.Size)
	if err != nil {
		return 0, 0, err
	}
	x, err := megatron.ParseIndex(b)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %s: %w", ErrDataset, idx.Object, err)
	}
	if err := x.Validate(bin.Size); err != nil {
		return 0, 0, fmt.Errorf("%w: %s against %s: %w", ErrDataset, idx.Object, bin.Object, err)
	}
	return x.DType, x.TotalTokens(), nil
}
