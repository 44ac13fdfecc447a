package tokens

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	tokfile "github.com/cacheagent/cacheagent/mmapstore/tokens"
	"github.com/cacheagent/cacheagent/object"
)

// tokenHeader reads the start of a token file: an llm.c header gives the
// type and count, checked against the size; otherwise the file is raw
// tokens of type raw.
func tokenHeader(ctx context.Context, src object.Source, a object.Attrs, raw array.DType) (array.DType, int64, error) {
	b, err := loader.ReadPrefix(ctx, src, a, tokfile.LLMCHeaderSize)
	if err != nil {
		return 0, 0, err
	}
	if dt, n, ok, err := llmcHeader(b, a.Size); ok || err != nil {
		if err != nil {
			return 0, 0, fmt.Errorf("%w: %s: %w", loader.ErrDataset, a.Object, err)
		}
		return dt, n, nil
	}
	if raw == 0 {
		return 0, 0, fmt.Errorf("%w: %s has no llm.c header: give the raw tokens' type (token_dtype, --token-dtype)",
			loader.ErrDataset, a.Object)
	}
	if a.Size%int64(raw.Size()) != 0 {
		return 0, 0, fmt.Errorf("%w: %s: %d bytes is not a whole number of %s tokens", loader.ErrDataset, a.Object, a.Size, raw)
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
	case tokfile.MagicUint16:
		dt = array.Uint16
	case tokfile.MagicUint32:
		dt = array.Uint32
	default:
		return 0, 0, false, nil
	}
	if size < tokfile.LLMCHeaderSize || len(b) < 12 {
		return 0, 0, true, fmt.Errorf("%w: %d bytes, the llm.c header needs %d", tokfile.ErrTruncated, size, tokfile.LLMCHeaderSize)
	}
	if v := int32(binary.LittleEndian.Uint32(b[4:])); v != 1 && v != 7 {
		return 0, 0, true, fmt.Errorf("%w %d", tokfile.ErrVersion, v)
	}
	n = int64(int32(binary.LittleEndian.Uint32(b[8:])))
	if have := size - tokfile.LLMCHeaderSize; n < 0 || n*int64(dt.Size()) != have {
		return 0, 0, true, fmt.Errorf("%w: llm.c header says %d %s tokens, %d bytes follow it", tokfile.ErrSize, n, dt, have)
	}
	return dt, n, true, nil
}
