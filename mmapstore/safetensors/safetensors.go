// Package safetensors parses safetensors files in place: Parse returns one
// array.Array per tensor, each aliasing the input, which is normally a
// read-only memory mapping of a cached file. Tensor data is never copied.
//
// # Format
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// UTF-8 JSON (an object, possibly padded with spaces), and the data section.
// Each header entry maps a tensor name to {"dtype", "shape",
// "data_offsets": [begin, end]}, with offsets relative to the start of the
// data section; the optional "__metadata__" entry maps strings to strings.
// Tensors are little-endian and in C order.
//
// Parse checks everything the reference implementation checks, with
// overflow-safe arithmetic: the header length (at most 100 MiB, within the
// file), the JSON (valid UTF-8, one object starting at the first byte, no
// duplicate keys), each tensor's dtype, shape (non-negative dimensions) and
// offsets (inside the data section, end - begin equal to the shape's size),
// and the layout: the tensors, taken in offset order, must cover the data
// section exactly, with no overlap, no hole and nothing after the last.
// Unknown keys inside a tensor entry are ignored.
//
// Supported dtypes: BOOL, U8, I8, U16, I16, U32, I32, U64, I64, F16, BF16,
// F32 and F64. A file holding any other (F8_E4M3, F8_E5M2, ...) fails with
// ErrUnsupportedDType.
//
// # Errors
//
// Every error wraps one sentinel: ErrHeader (malformed header), ErrTruncated
// (the file ends before the header does), ErrOffsets (tensor data out of
// place or of the wrong size) or ErrUnsupportedDType. Errors about a tensor
// name it.
//
// # Concurrency
//
// Parse is a pure function of its input, safe for concurrent use; it never
// modifies b.
package safetensors

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// Errors returned by Parse, wrapped with details.
var (
	// ErrHeader means the header is malformed: its length exceeds 100 MiB,
	// it is not a UTF-8 JSON object with well-typed tensor entries and
	// string metadata, it repeats a key, or a dimension is negative.
	ErrHeader = errors.New("safetensors: malformed header")
	// ErrTruncated means the file ends before its header does.
	ErrTruncated = errors.New("safetensors: truncated file")
	// ErrOffsets means tensor data is out of place: data_offsets outside
	// the data section, a span that does not match the shape and dtype,
	// tensors that overlap or leave a hole, or bytes after the last tensor.
	ErrOffsets = errors.New("safetensors: invalid data offsets")
	// ErrUnsupportedDType means a tensor has a dtype this package does not
	// support.
	ErrUnsupportedDType = errors.New("safetensors: unsupported dtype")
)

// maxHeaderLen bounds the JSON header, as the reference implementation
// does (it uses 100 MB).
const maxHeaderLen = 100 << 20

// metadataKey is the header key of the metadata entry.
const metadataKey = "__metadata__"

// File is a parsed safetensors file. Its arrays alias the parsed bytes and
// are valid as long as they are; a File must not be modified, and is safe
// for concurrent reads.
type File struct {
	// Tensors maps each tensor name to its array.
	Tensors map[string]array.Array
	// Names lists the tensor names in data-offset order (ties, which only
	// empty tensors can have, broken by name).
	Names []string
	// Metadata holds the __metadata__ entry; nil if there is none.
	Metadata map[string]string
	// DataOffset is the offset of the data section in the file: 8 plus the
	// header length.
	DataOffset int64
}

// Parse parses the safetensors file b. b must be exactly the file: bytes
// after the last tensor fail with ErrOffsets.
func Parse(b []byte) (*File, error) {
	f, entries, err := parse(b, int64(len(b)))
	if err != nil {
		return nil, err
	}
	data := b[f.DataOffset:]
	for _, e := range entries {
		f.Tensors[e.name] = e.array(data, f.DataOffset)
	}
	return f, nil
}

// HeaderSize returns how many bytes of a safetensors file starting with b
// (at least its first 8) ParseHeader needs: 8 plus the header length.
func HeaderSize(b []byte) (int64, error) {
	if len(b) < 8 {
		return 0, fmt.Errorf("%w: %d bytes, too short for the header length", ErrTruncated, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeaderLen {
		return 0, fmt.Errorf("%w: header length %d exceeds %d", ErrHeader, n, maxHeaderLen)
	}
	return 8 + int64(n), nil
}

// ParseHeader parses the header of a safetensors file of size bytes from
// b, its first bytes (at least HeaderSize of them), and checks it as Parse
// does: the tensors' arrays have their element type, shape and file
// offset, and no Data.
func ParseHeader(b []byte, size int64) (*File, error) {
	f, entries, err := parse(b, size)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		f.Tensors[e.name] = e.array(nil, f.DataOffset)
	}
	return f, nil
}

// parse parses and checks the header of a file of size bytes starting
// with b, and returns the File without its tensors' arrays, and their
// entries in data-offset order.
func parse(b []byte, size int64) (*File, []entry, error) {
	hs, err := HeaderSize(b)
	if err != nil {
		return nil, nil, err
	}
	if hs > size {
		return nil, nil, fmt.Errorf("%w: header needs %d bytes, have %d", ErrTruncated, hs, size)
	}
	if hs > int64(len(b)) {
		return nil, nil, fmt.Errorf("%w: header needs %d bytes, given %d", ErrTruncated, hs, len(b))
	}
	hdr, dataLen := b[8:hs], size-hs
	if dataLen > math.MaxInt {
		return nil, nil, fmt.Errorf("%w: %d bytes of data", ErrOffsets, dataLen)
	}
	if len(hdr) == 0 || hdr[0] != '{' {
		return nil, nil, fmt.Errorf("%w: header does not start with '{'", ErrHeader)
	}
	if !utf8.Valid(hdr) {
		return nil, nil, fmt.Errorf("%w: header is not valid UTF-8", ErrHeader)
	}
	ms, err := decodeObject(hdr)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrHeader, err)
	}
	f := &File{DataOffset: hs}
	entries := make([]entry, 0, len(ms))
	// Sorted keys make the first error reported deterministic.
	for _, key := range slices.Sorted(maps.Keys(ms)) {
		if key == metadataKey {
			if f.Metadata, err = parseMetadata(ms[key]); err != nil {
				return nil, nil, err
			}
			continue
		}
		e, err := parseEntry(key, ms[key], int(dataLen))
		if err != nil {
			return nil, nil, err
		}
		entries = append(entries, e)
	}
	if err := checkLayout(entries, int(dataLen)); err != nil {
		return nil, nil, err
	}
	f.Tensors = make(map[string]array.Array, len(entries))
	f.Names = make([]string, len(entries))
	for i, e := range entries {
		f.Names[i] = e.name
	}
	return f, entries, nil
}

// checkLayout sorts entries by offset and checks that they tile the data
// section of dataLen bytes exactly.
func checkLayout(entries []entry, dataLen int) error {
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end), cmp.Compare(a.name, b.name))
	})
	next := 0
	for i, e := range entries {
		switch {
		case e.begin < next:
			return fmt.Errorf("%w: tensor %q [%d, %d] overlaps tensor %q",
				ErrOffsets, e.name, e.begin, e.end, entries[i-1].name)
		case e.begin > next:
			return fmt.Errorf("%w: tensor %q starts at %d, leaving a hole after %d",
				ErrOffsets, e.name, e.begin, next)
		}
		next = e.end
	}
	if next != dataLen {
		return fmt.Errorf("%w: %d bytes after the last tensor", ErrOffsets, dataLen-next)
	}
	return nil
}

// array returns e's array over the data section, which starts at offset
// dataOffset in the file; with no data (a header parsed alone), an array
// without Data.
func (e entry) array(data []byte, dataOffset int64) array.Array {
	order := array.Little
	if e.dtype.Size() == 1 {
		order = array.NotApplicable
	}
	a := array.Array{
		DType:     e.dtype,
		Shape:     e.shape,
		Order:     array.C,
		ByteOrder: order,
		Offset:    dataOffset + int64(e.begin),
	}
	if data != nil {
		a.Data = data[e.begin:e.end:e.end]
	}
	return a
}
