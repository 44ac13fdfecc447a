package tokens

import (
	"context"
	"fmt"
	"slices"

	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	tokfile "github.com/cacheagent/cacheagent/mmapstore/tokens"
	"github.com/cacheagent/cacheagent/object"
)

// Format is the format of raw token files and llm.c shards, "tokens".
var Format loader.Format = tokensFormat{}

// ArrayName names a token dataset's one batch array, of shape
// (batch, SeqLen+1).
const ArrayName = "tokens"

// tokensFormat is Format.
type tokensFormat struct{}

// Name implements loader.Format.
func (tokensFormat) Name() string { return "tokens" }

// Guess implements loader.Format: a Spec that gives a token type or a
// sequence length.
func (tokensFormat) Guess(sp spec.Spec) bool { return sp.TokenDType != "" || sp.SeqLen != 0 }

// Build implements loader.Format: it reads the first 1 KiB of each file
// (an llm.c header, if its magic is there) and takes its size.
func (tokensFormat) Build(ctx context.Context, env loader.Env, loc loader.Location, sp spec.Spec) (loader.Dataset, error) {
	var raw array.DType
	if sp.TokenDType != "" {
		var err error
		if raw, err = loader.ParseDType(sp.TokenDType); err != nil {
			return loader.Dataset{}, fmt.Errorf("token_dtype: %w", err)
		}
	}
	return Build(ctx, env, loc, sp, Format, func(ctx context.Context, src object.Source, _ []string, listed []object.Attrs) (array.DType, int64, error) {
		return tokenHeader(ctx, src, listed[0], raw)
	})
}

// Check implements loader.Format.
func (tokensFormat) Check(d loader.Dataset) (loader.Dataset, error) {
	if len(d.Names) != 1 {
		return d, fmt.Errorf("%w: token files are one object per shard; the pattern names %d (%v)",
			loader.ErrDataset, len(d.Names), d.Names)
	}
	return Check(d)
}

// NewReader implements loader.Format.
func (tokensFormat) NewReader(d loader.Dataset, o loader.ReadOptions) (loader.Reader, error) {
	return NewReader(d, o, func(d loader.Dataset, g int, b [][]byte, start int64) ([]Segment, error) {
		sh, dt, o := d.Groups[g], d.Token.DType, d.Groups[g].Objects[0]
		f, err := tokfile.Detect(b[0], dt)
		if err != nil {
			return nil, fmt.Errorf("%w: shard %d (%s): %w", loader.ErrDataset, g, o, err)
		}
		if f.DType != dt || int64(f.NumTokens()) != sh.Tokens {
			return nil, fmt.Errorf("%w: shard %d (%s) holds %d %s tokens; the dataset says %d %s",
				loader.ErrDataset, g, o, f.NumTokens(), f.DType, sh.Tokens, dt)
		}
		data, _ := f.Bytes(0, f.NumTokens())
		return []Segment{{Start: start, Data: data, Object: o}}, nil
	})
}

// HeaderFunc reads what a token format needs of one shard, whose objects'
// listed attributes are listed (in the order of names, the dataset's
// Names): the tokens' type and count.
type HeaderFunc func(ctx context.Context, src object.Source, names []string, listed []object.Attrs) (array.DType, int64, error)

// Build builds a token dataset of format f: it lists loc's shards, reads
// every shard's header with header (in parallel), checks that every shard
// holds tokens of one type (the Spec's, if given), and returns the dataset
// with its windows (Check).
func Build(ctx context.Context, env loader.Env, loc loader.Location, sp spec.Spec, f loader.Format,
	header HeaderFunc) (loader.Dataset, error) {
	d, listed, err := loader.ListShards(ctx, env.Source, loc)
	if err != nil {
		return loader.Dataset{}, err
	}
	d.Format, d.Token.SeqLen = f, sp.SeqLen
	if sp.TokenDType != "" {
		if d.Token.DType, err = loader.ParseDType(sp.TokenDType); err != nil {
			return loader.Dataset{}, fmt.Errorf("token_dtype: %w", err)
		}
	}
	if _, err := f.Check(withPlaceholders(d)); err != nil {
		return loader.Dataset{}, err
	}
	types := make([]array.DType, len(d.Groups))
	err = loader.EachShard(ctx, len(d.Groups), func(ctx context.Context, i int) (err error) {
		sh := &d.Groups[i]
		attrs := make([]object.Attrs, len(sh.Objects))
		for j, o := range sh.Objects {
			attrs[j] = listed[o]
		}
		types[i], sh.Tokens, err = header(ctx, env.Source, d.Names, attrs)
		return err
	})
	if err != nil {
		return loader.Dataset{}, err
	}
	for i, dt := range types {
		if d.Token.DType == 0 {
			d.Token.DType = dt
		}
		if dt != d.Token.DType {
			return loader.Dataset{}, fmt.Errorf("%w: %s holds %s tokens; the dataset's are %s",
				loader.ErrDataset, d.Groups[i].Objects[0], dt, d.Token.DType)
		}
	}
	return f.Check(d)
}

// withPlaceholders returns d with a valid token type, so that Check looks
// at its names and sequence length before any header says the type.
func withPlaceholders(d loader.Dataset) loader.Dataset {
	if d.Token.DType == 0 {
		d.Token.DType = array.Uint16
	}
	return d
}

// Check checks a token dataset's spec and counts (its format checks its
// names) and returns it with every shard's Rows set to the number of
// windows starting in it.
func Check(d loader.Dataset) (loader.Dataset, error) {
	if _, err := loader.ParseDType(d.Token.DType.String()); err != nil {
		return d, fmt.Errorf("%w: token type %s is not an integer type", loader.ErrDataset, d.Token.DType)
	}
	if d.Token.SeqLen < 1 {
		return d, fmt.Errorf("%w: sequence length %d (a token dataset needs seq_len)", loader.ErrDataset, d.Token.SeqLen)
	}
	if len(d.Specs) != 0 {
		return d, fmt.Errorf("%w: a token dataset has no array specs", loader.ErrDataset)
	}
	counts := make([]int64, len(d.Groups))
	for i, g := range d.Groups {
		if g.Tokens < 0 {
			return d, fmt.Errorf("%w: shard %d (%s) has %d tokens", loader.ErrDataset, i, g.Objects[0], g.Tokens)
		}
		counts[i] = g.Tokens
	}
	rows, err := windowRows(counts, d.Token.SeqLen)
	if err != nil {
		return d, err
	}
	d.Groups = slices.Clone(d.Groups)
	for i := range d.Groups {
		d.Groups[i].Rows = rows[i]
	}
	return d, nil
}

// NumWindows returns the number of windows of L+1 tokens, starting every
// L tokens, in a stream of total tokens: floor((total-1)/L), 0 if total
// is 0.
func NumWindows(total int64, L int) int64 {
	if total < 1 || L < 1 {
		return 0
	}
	return (total - 1) / int64(L)
}

// windowRows returns, for shards of the given token counts, how many
// windows start in each: window k (tokens [kL, kL+L+1) of the
// concatenation) belongs to the shard holding token kL.
func windowRows(tokens []int64, L int) ([]int, error) {
	var total int64
	for _, t := range tokens {
		total += t
	}
	w := NumWindows(total, L)
	rows := make([]int, len(tokens))
	var start int64
	ceil := func(t int64) int64 { return (t + int64(L) - 1) / int64(L) }
	for g, t := range tokens {
		lo, hi := min(ceil(start), w), min(ceil(start+t), w)
		if hi-lo > int64(^uint32(0)) {
			return nil, fmt.Errorf("%w: shard %d has %d windows", loader.ErrDataset, g, hi-lo)
		}
		rows[g] = int(hi - lo)
		start += t
	}
	return rows, nil
}
