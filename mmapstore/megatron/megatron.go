// Package megatron reads Megatron-LM (and NeMo) indexed datasets in place:
// a .idx file that describes sequences of tokens and how they group into
// documents, and a .bin file holding the tokens back to back. ParseIndex
// reads the .idx bytes, normally a read-only memory mapping of a cached
// object, without copying them and without allocating in proportion to the
// number of sequences: every array is decoded lazily from the input.
//
// # Format
//
// The .idx file is little-endian:
//
//	offset  size  field
//	0       9     magic "MMIDIDX\x00\x00"
//	9       8     uint64 version, 1
//	17      1     uint8 dtype code (see DType)
//	18      8     uint64 sequence count S
//	26      8     uint64 document index length D
//	34      4*S   int32 sequence lengths, in tokens
//	        8*S   int64 sequence pointers, byte offsets into the .bin file
//	        8*D   int64 document index: the first sequence of each document,
//	              then S
//	        S     int8 sequence modes (multimodal datasets only)
//
// The pointers and the document index are not 8-byte aligned (they start at
// 34+4*S); this package decodes them with encoding/binary. The modes are
// present if and only if exactly S bytes follow the document index; any
// other number of trailing bytes is an error. The .bin file is the tokens
// of every sequence, with no header.
//
// # Validation
//
// ParseIndex checks the header, that the counts fit the file exactly (an
// absurd count is an error, never a large allocation; CheckSize makes this
// check from the header and the file's size alone), that no length is
// negative, and that the document index starts at 0, never decreases and
// ends at S. The pointers can only be checked against the .bin file:
// Validate does that, and must succeed before sequences are read from it.
// Tokens checks its own bounds, so it is safe in any case.
//
// # Errors
//
// Every error wraps one of the Err sentinels with the details (offsets,
// counts, indices). Test them with errors.Is.
//
// # Concurrency
//
// ParseIndex and Tokens are pure functions of their input and never modify
// it; an Index is immutable and safe for concurrent use.
package megatron

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// Errors returned by this package, wrapped with details.
var (
	// ErrNotIndex means the input does not start with the index magic.
	ErrNotIndex = errors.New("megatron: not a megatron index")
	// ErrVersion means the index version is not 1.
	ErrVersion = errors.New("megatron: unsupported index version")
	// ErrDType means the dtype code is not one Megatron defines.
	ErrDType = errors.New("megatron: unknown dtype code")
	// ErrTruncated means the index ends inside its fixed header.
	ErrTruncated = errors.New("megatron: truncated index")
	// ErrSize means the size of the index does not match its counts: the
	// arrays the counts imply do not fit, or the bytes after the document
	// index are neither nothing nor exactly one mode per sequence.
	ErrSize = errors.New("megatron: index size does not match its counts")
	// ErrDocuments means the document index is invalid: empty, not
	// starting at 0, decreasing, or not ending at the sequence count.
	ErrDocuments = errors.New("megatron: invalid document index")
	// ErrSequence means a sequence is invalid: a negative length or
	// pointer, or tokens that lie beyond the end of the .bin file.
	ErrSequence = errors.New("megatron: invalid sequence")
)

// Magic starts every .idx file.
const Magic = "MMIDIDX\x00\x00"

// HeaderSize is the size of the fixed .idx header; the lengths start there.
const HeaderSize = 34

// dtypes maps Megatron's dtype codes to element types.
var dtypes = [...]array.DType{
	1: array.Uint8,
	2: array.Int8,
	3: array.Int16,
	4: array.Int32,
	5: array.Int64,
	6: array.Float64,
	7: array.Float32,
	8: array.Uint16,
}

// DTypeOf returns the element type of a Megatron dtype code (1 uint8, 2
// int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), and
// false for any other code.
func DTypeOf(code uint8) (array.DType, bool) {
	if int(code) >= len(dtypes) || dtypes[code] == 0 {
		return 0, false
	}
	return dtypes[code], true
}

// Index is a parsed .idx file. It holds the input slice and decodes the
// arrays from it on demand, so it is valid as long as the input is.
type Index struct {
	// DType is the element type of the tokens in the .bin file.
	DType array.DType
	// ItemSize is the size of one token in bytes.
	ItemSize int

	b           []byte
	nseq, ndoc  int // S and D
	lens, ptrs  int // offsets of the arrays in b
	docs, modes int // modes is -1 without modes
	total       int64
}

// ParseIndex parses the .idx file idx. The returned Index aliases idx; see
// the package documentation for what it checks, and call Validate with the
// size of the .bin file before reading sequences.
func ParseIndex(idx []byte) (*Index, error) {
	dt, err := parseHeader(idx)
	if err != nil {
		return nil, err
	}
	s, d, modes, err := fitCounts(idx, uint64(len(idx)-HeaderSize))
	if err != nil {
		return nil, err
	}
	x := &Index{
		DType:    dt,
		ItemSize: dt.Size(),
		b:        idx,
		nseq:     int(s),
		ndoc:     int(d),
		lens:     HeaderSize,
		ptrs:     HeaderSize + 4*int(s),
		docs:     HeaderSize + 12*int(s),
		modes:    -1,
	}
	if modes {
		x.modes = x.docs + 8*int(d)
	}
	if err := x.checkLengths(); err != nil {
		return nil, err
	}
	if err := x.checkDocuments(); err != nil {
		return nil, err
	}
	return x, nil
}

// CheckSize checks an index of size bytes from its first bytes (at least
// HeaderSize of them): the header, and that the arrays its counts imply
// fill the size exactly, as ParseIndex does, without the rest. A reader
// that must fetch an index whole to parse it calls CheckSize first, so an
// absurd count or a foreign .idx costs a header read, never its size in
// memory.
func CheckSize(header []byte, size int64) error {
	if _, err := parseHeader(header); err != nil {
		return err
	}
	if size < HeaderSize {
		return fmt.Errorf("%w: %d bytes, the header needs %d", ErrTruncated, size, HeaderSize)
	}
	_, _, _, err := fitCounts(header, uint64(size-HeaderSize))
	return err
}

// parseHeader checks the fixed header of idx (magic, version, dtype) and
// returns the tokens' type.
func parseHeader(idx []byte) (array.DType, error) {
	n := min(len(idx), len(Magic))
	if !bytes.Equal(idx[:n], []byte(Magic)[:n]) {
		return 0, fmt.Errorf("%w: bad magic %q", ErrNotIndex, idx[:n])
	}
	if len(idx) < HeaderSize {
		return 0, fmt.Errorf("%w: %d bytes, the header needs %d", ErrTruncated, len(idx), HeaderSize)
	}
	if v := binary.LittleEndian.Uint64(idx[9:]); v != 1 {
		return 0, fmt.Errorf("%w %d", ErrVersion, v)
	}
	dt, ok := DTypeOf(idx[17])
	if !ok {
		return 0, fmt.Errorf("%w %d", ErrDType, idx[17])
	}
	return dt, nil
}

// fitCounts returns the sequence count S and document index length D of
// the header h, checked against rest, the bytes after the header: 12 per
// sequence, 8 per document index entry, then nothing or one mode per
// sequence (modes).
func fitCounts(h []byte, rest uint64) (s, d uint64, modes bool, err error) {
	s, d = binary.LittleEndian.Uint64(h[18:]), binary.LittleEndian.Uint64(h[26:])
	all := rest
	if s > rest/12 {
		return 0, 0, false, fmt.Errorf("%w: %d sequences need 12 bytes each, the index has %d after its header",
			ErrSize, s, rest)
	}
	rest -= 12 * s
	if d > rest/8 {
		return 0, 0, false, fmt.Errorf("%w: %d sequences and %d document index entries need more than the %d bytes after the header",
			ErrSize, s, d, all)
	}
	rest -= 8 * d
	if rest != 0 && rest != s {
		return 0, 0, false, fmt.Errorf("%w: %d bytes after the document index, want 0 or %d (one mode per sequence)",
			ErrSize, rest, s)
	}
	return s, d, rest != 0, nil
}

// length returns the length of sequence i, decoded from the index.
func (x *Index) length(i int) int32 {
	return int32(binary.LittleEndian.Uint32(x.b[x.lens+4*i:]))
}

// pointer returns the pointer of sequence i, decoded from the index.
func (x *Index) pointer(i int) int64 {
	return int64(binary.LittleEndian.Uint64(x.b[x.ptrs+8*i:]))
}

// doc returns entry j of the document index.
func (x *Index) doc(j int) int64 {
	return int64(binary.LittleEndian.Uint64(x.b[x.docs+8*j:]))
}

// checkLengths checks that no length is negative and sums them.
func (x *Index) checkLengths() error {
	var total int64
	for i := range x.nseq {
		n := x.length(i)
		if n < 0 {
			return fmt.Errorf("%w: sequence %d has length %d", ErrSequence, i, n)
		}
		total += int64(n) // at most 2^31 * 2^60: no overflow
	}
	x.total = total
	return nil
}

// checkDocuments checks the document index: 0, non-decreasing, ..., S.
func (x *Index) checkDocuments() error {
	if x.ndoc == 0 {
		return fmt.Errorf("%w: no entries (an empty dataset has the single entry 0)", ErrDocuments)
	}
	if v := x.doc(0); v != 0 {
		return fmt.Errorf("%w: entry 0 is %d, want 0", ErrDocuments, v)
	}
	prev := int64(0)
	for j := 1; j < x.ndoc; j++ {
		v := x.doc(j)
		if v < prev {
			return fmt.Errorf("%w: entry %d is %d, below entry %d (%d)", ErrDocuments, j, v, j-1, prev)
		}
		prev = v
	}
	if prev != int64(x.nseq) {
		return fmt.Errorf("%w: last entry %d is %d, want the sequence count %d",
			ErrDocuments, x.ndoc-1, prev, x.nseq)
	}
	return nil
}

// Validate checks every sequence against binSize, the size of the .bin
// file: its pointer is not negative and its tokens, ItemSize bytes each,
// end at or before binSize. The error wraps ErrSequence and names the
// first bad sequence. Call it before reading sequences from the .bin file.
func (x *Index) Validate(binSize int64) error {
	if binSize < 0 {
		return fmt.Errorf("%w: .bin size %d is negative", ErrSequence, binSize)
	}
	size := int64(x.ItemSize)
	for i := range x.nseq {
		p, n := x.pointer(i), int64(x.length(i))
		switch {
		case p < 0:
			return fmt.Errorf("%w: sequence %d has pointer %d", ErrSequence, i, p)
		case p > binSize || n > (binSize-p)/size:
			// n*size <= binSize-p, without overflow.
			return fmt.Errorf("%w: sequence %d of %d tokens at byte %d ends past the %d-byte .bin file",
				ErrSequence, i, n, p, binSize)
		}
	}
	return nil
}

// NumSequences returns the number of sequences, S.
func (x *Index) NumSequences() int { return x.nseq }

// Sequence returns the byte offset in the .bin file and the length in
// tokens of sequence i, as the index records them: only Validate checks
// the offset against the .bin file. Sequence panics if i is not in
// [0, NumSequences()), as a slice index would.
func (x *Index) Sequence(i int) (off, n int64) {
	if i < 0 || i >= x.nseq {
		panic(fmt.Sprintf("megatron: sequence %d of %d", i, x.nseq))
	}
	return x.pointer(i), int64(x.length(i))
}

// NumDocuments returns the number of documents, one less than the length
// of the document index.
func (x *Index) NumDocuments() int { return x.ndoc - 1 }

// Document returns the sequences of document j, [first, end). Document
// panics if j is not in [0, NumDocuments()), as a slice index would.
func (x *Index) Document(j int) (first, end int) {
	if j < 0 || j >= x.ndoc-1 {
		panic(fmt.Sprintf("megatron: document %d of %d", j, x.ndoc-1))
	}
	// ParseIndex checked that the entries lie in [0, S].
	return int(x.doc(j)), int(x.doc(j + 1))
}

// Modes returns the mode of each sequence, aliasing the index, or nil if
// the index has no modes.
func (x *Index) Modes() []int8 {
	if x.modes < 0 {
		return nil
	}
	a := array.Array{DType: array.Int8, Shape: []int{x.nseq}, Data: x.b[x.modes : x.modes+x.nseq : x.modes+x.nseq]}
	v, err := a.Int8s()
	if err != nil {
		panic("megatron: int8 view failed: " + err.Error()) // cannot happen
	}
	return v
}

// TotalTokens returns the sum of the lengths of all sequences.
func (x *Index) TotalTokens() int64 { return x.total }

// Tokens returns sequence i of the .bin file bin as a 1-D array aliasing
// bin. It checks the sequence against len(bin) itself (ErrSequence), so it
// is safe even without Validate; it fails if i is out of range.
func (x *Index) Tokens(bin []byte, i int) (array.Array, error) {
	if i < 0 || i >= x.nseq {
		return array.Array{}, fmt.Errorf("%w: sequence %d of %d", ErrSequence, i, x.nseq)
	}
	off, n := x.Sequence(i)
	a, err := Tokens(bin, x.DType, off, n)
	if err != nil {
		return array.Array{}, fmt.Errorf("sequence %d: %w", i, err)
	}
	return a, nil
}

// Tokens returns the n tokens of type dt at byte offset off of the .bin
// file bin as a 1-D array aliasing bin, in little-endian byte order. It
// fails with ErrSequence if the tokens do not lie within bin, and with
// ErrDType if dt is invalid. Megatron's pointers are multiples of the item
// size, so typed views of a mapped .bin succeed; for an offset that is
// not, they fail with array.ErrAlignment and Data is still usable.
func Tokens(bin []byte, dt array.DType, off, n int64) (array.Array, error) {
	if !dt.Valid() {
		return array.Array{}, fmt.Errorf("%w: element type %v", ErrDType, dt)
	}
	size := int64(dt.Size())
	end := int64(len(bin))
	if off < 0 || n < 0 || off > end || n > (end-off)/size {
		return array.Array{}, fmt.Errorf("%w: %d tokens of %s at byte %d do not fit the %d-byte .bin file",
			ErrSequence, n, dt, off, end)
	}
	bo := array.Little
	if size == 1 {
		bo = array.NotApplicable
	}
	hi := off + n*size
	return array.Array{
		DType:     dt,
		Shape:     []int{int(n)},
		ByteOrder: bo,
		Data:      bin[off:hi:hi],
		Offset:    off,
	}, nil
}
