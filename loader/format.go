package loader

import (
	"fmt"
	"strings"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// Format is the file format of a dataset's shards.
type Format uint8

const (
	// FormatNPY is fixed-shape .npy arrays, one sample per row: the
	// default.
	FormatNPY Format = iota
	// FormatTokens is files of token ids: headerless arrays of
	// TokenSpec.DType, or llm.c shards (recognised by their magic). One
	// object per shard.
	FormatTokens
	// FormatMegatron is Megatron-LM indexed datasets: a .bin and a .idx
	// object per shard, named "bin" and "idx" by the pattern's braces.
	FormatMegatron
	// FormatWebDataset is WebDataset tar shards, one object per shard;
	// samples are the tar's samples, fields variable-length bytes.
	FormatWebDataset
)

var formatNames = [...]string{FormatNPY: "npy", FormatTokens: "tokens", FormatMegatron: "megatron",
	FormatWebDataset: "webdataset"}

// String returns the format's name as ParseFormat accepts it.
func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("Format(%d)", f)
}

// ParseFormat parses "npy", "tokens", "megatron" or "webdataset".
func ParseFormat(s string) (Format, error) {
	for f, name := range formatNames {
		if s == name {
			return Format(f), nil
		}
	}
	return 0, fmt.Errorf("%w: format %q (want npy, tokens, megatron or webdataset)", ErrConfig, s)
}

// GuessFormat returns the format of a dataset whose format was not given:
// FormatMegatron for a pattern naming {bin,idx}, FormatWebDataset for one
// ending in .tar, FormatTokens when a token type or sequence length is
// given (tokenOptions), else FormatNPY. `cacheagent loader` and the
// daemon's loader sessions both guess so.
func GuessFormat(pattern string, tokenOptions bool) Format {
	switch {
	case strings.Contains(pattern, "{bin,idx}") || strings.Contains(pattern, "{idx,bin}"):
		return FormatMegatron
	case strings.HasSuffix(pattern, ".tar"):
		return FormatWebDataset
	case tokenOptions:
		return FormatTokens
	}
	return FormatNPY
}

// tokens reports whether f is a token format, read as windows.
func (f Format) tokens() bool { return f == FormatTokens || f == FormatMegatron }

// ParseDType parses a numpy-style integer type name ("uint16", "int32"…),
// the types token files hold.
func ParseDType(s string) (array.DType, error) {
	for _, dt := range []array.DType{array.Int8, array.Int16, array.Int32, array.Int64,
		array.Uint8, array.Uint16, array.Uint32, array.Uint64} {
		if dt.String() == s {
			return dt, nil
		}
	}
	return 0, fmt.Errorf("%w: token type %q (want an integer type such as uint16 or int32)", ErrConfig, s)
}

// TokenSpec describes a token dataset's windows (see package doc, Token
// windows).
type TokenSpec struct {
	// DType is the tokens' element type. FromPatternWith sets it from
	// Options.TokenDType, an llm.c header or a Megatron index.
	DType array.DType
	// SeqLen is L: each sample is a window of L+1 tokens.
	SeqLen int
}

// TokensName names a token dataset's one batch array, of shape
// (batch, SeqLen+1).
const TokensName = "tokens"

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
			return nil, fmt.Errorf("%w: shard %d has %d windows", ErrDataset, g, hi-lo)
		}
		rows[g] = int(hi - lo)
		start += t
	}
	return rows, nil
}
