// Package tokens reads files of token ids in place: headerless arrays of a
// known element type, such as nanoGPT's train.bin (uint16) or OLMo's
// uint16 and uint32 token files, and llm.c's data shards. A File describes
// where the tokens lie in the input, normally a read-only memory mapping of
// a cached object, and gives zero-copy views of any range of them.
//
// # llm.c shards
//
// An llm.c shard starts with a header of 256 little-endian int32 values
// (1024 bytes): [0] the magic, 20240520 for uint16 tokens (GPT-2) or
// 20240801 for uint32 tokens (Llama 3); [1] the version; [2] the number of
// tokens. The tokens follow the header, little-endian. llm.c writes version
// 1 with the GPT-2 magic and version 7 with the Llama 3 magic; ParseLLMC
// accepts either version with either magic, and ignores the other header
// values. The token count must match the bytes after the header exactly: a
// truncated shard, or one with trailing bytes, is an error naming both
// counts.
//
// # Errors
//
// Every error wraps one of the Err sentinels with the details. Test them
// with errors.Is.
//
// # Concurrency
//
// Raw, ParseLLMC and Detect are pure functions of their input and never
// modify it; a File is an immutable value, safe for concurrent use.
package tokens

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// Errors returned by this package, wrapped with details.
var (
	// ErrDType means the element type asked for is not an integer type.
	ErrDType = errors.New("tokens: unsupported token type")
	// ErrSize means the data is not a whole number of tokens, or an
	// llm.c shard's token count does not match its size.
	ErrSize = errors.New("tokens: bad data size")
	// ErrNotLLMC means the input does not start with an llm.c magic.
	ErrNotLLMC = errors.New("tokens: not an llm.c shard")
	// ErrVersion means an llm.c shard has a version other than 1 or 7.
	ErrVersion = errors.New("tokens: unsupported llm.c version")
	// ErrTruncated means the input ends inside the llm.c header.
	ErrTruncated = errors.New("tokens: truncated llm.c header")
	// ErrRange means a token range is out of bounds.
	ErrRange = errors.New("tokens: range out of bounds")
)

// The llm.c shard header.
const (
	// MagicUint16 marks an llm.c shard of uint16 tokens (GPT-2).
	MagicUint16 = 20240520
	// MagicUint32 marks an llm.c shard of uint32 tokens (Llama 3).
	MagicUint32 = 20240801
	// LLMCHeaderSize is the size of the header: 256 int32 values.
	LLMCHeaderSize = 1024
)

// Format says which kind of file a File was parsed from.
type Format uint8

const (
	// FormatRaw is a headerless array of tokens.
	FormatRaw Format = iota
	// FormatLLMC is an llm.c shard.
	FormatLLMC
)

// String returns "raw" or "llm.c".
func (f Format) String() string {
	switch f {
	case FormatRaw:
		return "raw"
	case FormatLLMC:
		return "llm.c"
	}
	return "invalid"
}

// File is a parsed token file: the tokens are the n elements of type DType
// starting at byte Offset of the input, in little-endian byte order. It
// aliases the input and is valid as long as the input is. The zero File
// holds no tokens.
type File struct {
	// Format is the kind of file.
	Format Format
	// DType is the element type of the tokens.
	DType array.DType
	// Offset is where the tokens start in the input: 0 for raw files,
	// LLMCHeaderSize for llm.c shards.
	Offset int64
	// Version is an llm.c shard's header version; 0 for raw files.
	Version int

	data []byte // the tokens
}

// Raw returns the tokens of b, a headerless array of little-endian tokens
// of type dt, which must be an integer type (ErrDType). The size of b must
// be a multiple of the size of dt (ErrSize).
func Raw(b []byte, dt array.DType) (File, error) {
	switch dt {
	case array.Int8, array.Int16, array.Int32, array.Int64,
		array.Uint8, array.Uint16, array.Uint32, array.Uint64:
	default:
		return File{}, fmt.Errorf("%w %s", ErrDType, dt)
	}
	if r := len(b) % dt.Size(); r != 0 {
		return File{}, fmt.Errorf("%w: %d bytes is %d %s tokens and %d bytes",
			ErrSize, len(b), len(b)/dt.Size(), dt, r)
	}
	return File{Format: FormatRaw, DType: dt, data: b[:len(b):len(b)]}, nil
}

// ParseLLMC parses the llm.c shard b; see the package documentation.
func ParseLLMC(b []byte) (File, error) {
	if len(b) < 4 {
		return File{}, fmt.Errorf("%w: %d bytes, too short for the magic", ErrNotLLMC, len(b))
	}
	le := binary.LittleEndian
	var dt array.DType
	switch m := int32(le.Uint32(b)); m {
	case MagicUint16:
		dt = array.Uint16
	case MagicUint32:
		dt = array.Uint32
	default:
		return File{}, fmt.Errorf("%w: magic %d", ErrNotLLMC, m)
	}
	if len(b) < LLMCHeaderSize {
		return File{}, fmt.Errorf("%w: %d bytes, the header needs %d", ErrTruncated, len(b), LLMCHeaderSize)
	}
	v := int32(le.Uint32(b[4:]))
	if v != 1 && v != 7 {
		return File{}, fmt.Errorf("%w %d", ErrVersion, v)
	}
	n := int64(int32(le.Uint32(b[8:])))
	size := int64(dt.Size())
	have := int64(len(b) - LLMCHeaderSize)
	if n < 0 || n*size != have { // |n| < 2^31: no overflow
		return File{}, fmt.Errorf("%w: header says %d %s tokens (%d bytes), %d bytes follow it",
			ErrSize, n, dt, n*size, have)
	}
	return File{
		Format:  FormatLLMC,
		DType:   dt,
		Offset:  LLMCHeaderSize,
		Version: int(v),
		data:    b[LLMCHeaderSize:len(b):len(b)],
	}, nil
}

// Detect parses b as an llm.c shard if it starts with an llm.c magic, and
// as a raw file of type raw otherwise. A shard whose header is invalid is
// an error, not a raw file. A raw file whose first bytes happen to spell
// an llm.c magic would be taken for a shard, but that needs a first token
// of 55432 or 55713 (uint16: beyond GPT-2's 50257-token vocabulary) or of
// about 20 million (uint32); callers that know the format should still
// call Raw or ParseLLMC.
func Detect(b []byte, raw array.DType) (File, error) {
	if len(b) >= 4 {
		switch binary.LittleEndian.Uint32(b) {
		case MagicUint16, MagicUint32:
			return ParseLLMC(b)
		}
	}
	return Raw(b, raw)
}

// NumTokens returns the number of tokens.
func (f File) NumTokens() int {
	if f.DType.Size() == 0 {
		return 0
	}
	return len(f.data) / f.DType.Size()
}

// Bytes returns the bytes of tokens [i, j), aliasing the input and capped
// at their end. It fails with ErrRange unless 0 <= i <= j <= NumTokens().
func (f File) Bytes(i, j int) ([]byte, error) {
	if n := f.NumTokens(); i < 0 || j < i || j > n {
		return nil, fmt.Errorf("%w: tokens [%d, %d) of %d", ErrRange, i, j, n)
	}
	s := f.DType.Size()
	return f.data[i*s : j*s : j*s], nil
}

// Slice returns tokens [i, j) as a 1-D array aliasing the input, whose
// Offset is their position in the input. It fails with ErrRange unless
// 0 <= i <= j <= NumTokens(), and with ErrDType on the zero File.
func (f File) Slice(i, j int) (array.Array, error) {
	if !f.DType.Valid() {
		return array.Array{}, fmt.Errorf("%w %s", ErrDType, f.DType)
	}
	b, err := f.Bytes(i, j)
	if err != nil {
		return array.Array{}, err
	}
	bo := array.Little
	if f.DType.Size() == 1 {
		bo = array.NotApplicable
	}
	return array.Array{
		DType:     f.DType,
		Shape:     []int{j - i},
		ByteOrder: bo,
		Data:      b,
		Offset:    f.Offset + int64(i*f.DType.Size()),
	}, nil
}
