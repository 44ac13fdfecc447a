// Package npy parses NumPy .npy files in place: Parse returns an
// array.Array whose Data aliases the input, which is normally a read-only
// memory mapping of a cached file. Nothing is copied, and nothing is
// allocated per element.
//
// # Supported files
//
// Format versions 1.0, 2.0 (4-byte header length) and 3.0 (UTF-8 header).
// The header, a Python dict literal, is read by a small strict parser that
// accepts what numpy writes, including Python 2 long ints (3L) in versions
// 1.0 and 2.0, and rejects anything else; it never evaluates code. Element
// types: b1, i1, i2, i4, i8, u1, u2, u4, u8, f2, f4, f8, c8 and c16, with
// byte order '<' (little-endian), '>' (big-endian), or '|', '=' or none,
// which mean the host's order as in numpy. Big-endian arrays parse, and
// their raw bytes and rows are usable, but typed views fail with
// array.ErrByteOrder on a little-endian host. C and Fortran order are both
// supported. Headers longer than 64 KiB are rejected, which bounds the
// memory a hostile header can make the parser use (numpy itself refuses
// headers over 10,000 bytes by default).
//
// # Errors
//
// Every error wraps one sentinel, so callers can tell a file that is not
// npy (ErrNotNPY), a version from the future (ErrVersion), a malformed
// header (ErrHeader), a file cut short (ErrTruncated), a data section of
// the wrong size or a shape too large to address (ErrSize), and a valid
// file whose element type this package does not handle
// (ErrUnsupportedDType: structured, object, string, datetime, float128 and
// the like). Trailing bytes after the data are an error (ErrSize): a cached
// object is the exact file, so extra bytes mean corruption.
//
// # Concurrency
//
// Parse and ParseHeader are pure functions of their input, safe for
// concurrent use; they never modify b.
package npy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// Errors returned by Parse and ParseHeader, wrapped with details.
var (
	// ErrNotNPY means the input does not start with the npy magic string.
	ErrNotNPY = errors.New("npy: not an npy file")
	// ErrVersion means the format version is not 1.0, 2.0 or 3.0.
	ErrVersion = errors.New("npy: unsupported format version")
	// ErrHeader means the header is malformed: not a dict literal with
	// exactly the keys 'descr', 'fortran_order' and 'shape' and values of
	// the right types, a negative dimension, or a header over 64 KiB.
	ErrHeader = errors.New("npy: malformed header")
	// ErrTruncated means the input ends before the header or the data
	// does. ParseHeader needs only the header: a caller reading a prefix
	// of the file can read more and retry.
	ErrTruncated = errors.New("npy: truncated file")
	// ErrSize means the data section is longer than the shape implies
	// (trailing bytes), or the shape is too large to address.
	ErrSize = errors.New("npy: bad data size")
	// ErrUnsupportedDType means the file is well-formed but its element
	// type is not one this package supports.
	ErrUnsupportedDType = errors.New("npy: unsupported dtype")
)

// magic starts every npy file.
var magic = []byte("\x93NUMPY")

// maxHeaderLen bounds the header dict, far above what numpy writes for
// the types this package supports.
const maxHeaderLen = 64 << 10

// Header describes an npy file: everything but the data.
type Header struct {
	// Major and Minor are the format version: 1.0, 2.0 or 3.0.
	Major, Minor int
	// Descr is the dtype description as written: the string's value for
	// simple types ("<f4"), the literal's source text for others (the
	// list of a structured type).
	Descr string
	// DType is the element type; zero if unsupported.
	DType array.DType
	// ByteOrder is the byte order of the elements; NotApplicable for
	// single-byte types.
	ByteOrder array.ByteOrder
	// Shape holds the dimensions; empty for a 0-d array.
	Shape []int
	// Order is the memory layout: Fortran if the header says
	// fortran_order True.
	Order array.Order
	// DataOffset is the offset of the data section from the start of
	// the file.
	DataOffset int
	// DataSize is the size of the data section in bytes; 0 if the dtype
	// is unsupported.
	DataSize int
}

// ParseHeader parses the header of the npy file that b holds or starts
// with; b needs to hold the header but not the data. If the only problem is
// an unsupported element type, the error wraps ErrUnsupportedDType and the
// returned Header is complete except for DType and DataSize, so tools can
// still describe the file.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	prelude, hlen, err := parsePrelude(b, &h)
	if err != nil {
		return Header{}, err
	}
	text := b[prelude : prelude+hlen]
	if h.Major == 3 && !utf8.Valid(text) {
		return Header{}, fmt.Errorf("%w: version 3.0 header is not valid UTF-8", ErrHeader)
	}
	d, err := parseDict(text, h.Major < 3)
	if err != nil {
		return Header{}, err
	}
	h.DataOffset = prelude + hlen
	if err := h.interpret(d, text); err != nil {
		return Header{}, err
	}
	if h.DType == 0 {
		return h, fmt.Errorf("%w %q", ErrUnsupportedDType, h.Descr)
	}
	size, ok := array.DataSize(h.DType, h.Shape)
	if !ok || size > math.MaxInt-h.DataOffset {
		return Header{}, fmt.Errorf("%w: shape %v of %s is too large", ErrSize, h.Shape, h.DType)
	}
	h.DataSize = size
	return h, nil
}

// parsePrelude checks the magic string and the version, stores the version
// in h, and returns the length of the fixed prelude and of the header dict.
func parsePrelude(b []byte, h *Header) (prelude, hlen int, err error) {
	n := min(len(b), len(magic))
	if !bytes.Equal(b[:n], magic[:n]) {
		return 0, 0, fmt.Errorf("%w: bad magic %q", ErrNotNPY, b[:n])
	}
	if len(b) < len(magic)+2 {
		return 0, 0, fmt.Errorf("%w: %d bytes, too short for the version", ErrTruncated, len(b))
	}
	h.Major, h.Minor = int(b[6]), int(b[7])
	switch {
	case h.Minor != 0 || h.Major < 1 || h.Major > 3:
		return 0, 0, fmt.Errorf("%w %d.%d", ErrVersion, h.Major, h.Minor)
	case h.Major == 1:
		prelude = 10
	default:
		prelude = 12
	}
	if len(b) < prelude {
		return 0, 0, fmt.Errorf("%w: %d bytes, too short for the header length", ErrTruncated, len(b))
	}
	var n64 uint64
	if h.Major == 1 {
		n64 = uint64(binary.LittleEndian.Uint16(b[8:]))
	} else {
		n64 = uint64(binary.LittleEndian.Uint32(b[8:]))
	}
	if n64 > maxHeaderLen {
		return 0, 0, fmt.Errorf("%w: header length %d exceeds %d", ErrHeader, n64, maxHeaderLen)
	}
	hlen = int(n64)
	if hlen > len(b)-prelude {
		return 0, 0, fmt.Errorf("%w: header needs %d bytes, have %d", ErrTruncated, prelude+hlen, len(b))
	}
	return prelude, hlen, nil
}

// interpret checks the types of the header values and stores them in h.
// An unsupported but well-formed descr leaves h.DType zero.
func (h *Header) interpret(d dict, text []byte) error {
	if d.fortranOrder.kind != kindBool {
		return fmt.Errorf("%w: fortran_order is not True or False", ErrHeader)
	}
	if d.fortranOrder.flag {
		h.Order = array.Fortran
	}
	if d.shape.kind != kindTuple {
		return fmt.Errorf("%w: shape is not a tuple", ErrHeader)
	}
	h.Shape = make([]int, len(d.shape.items))
	for i, dim := range d.shape.items {
		switch {
		case dim.kind != kindInt:
			return fmt.Errorf("%w: shape has a non-integer dimension", ErrHeader)
		case dim.big:
			return fmt.Errorf("%w: dimension %d is too large", ErrSize, i)
		case dim.num < 0:
			return fmt.Errorf("%w: dimension %d is negative (%d)", ErrHeader, i, dim.num)
		}
		h.Shape[i] = dim.num
	}
	switch d.descr.kind {
	case kindString:
		h.Descr = d.descr.str
		h.DType, h.ByteOrder = array.ParseTypestr(h.Descr)
	case kindList, kindTuple:
		// Structured or subarray types: well-formed but unsupported.
		raw := text[d.descr.start:d.descr.end]
		if h.Major < 3 {
			h.Descr = latin1(raw)
		} else {
			h.Descr = string(raw)
		}
	default:
		return fmt.Errorf("%w: descr is not a string or a list", ErrHeader)
	}
	return nil
}

// Parse parses the npy file b and returns its array, whose Data aliases b
// (and whose Shape is freshly allocated). b must be exactly the file: a
// shorter b fails with ErrTruncated, a longer one with ErrSize. The Array
// is valid as long as b is.
func Parse(b []byte) (array.Array, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return array.Array{}, err
	}
	off, n := h.DataOffset, h.DataSize
	switch have := len(b) - off; {
	case have < n:
		return array.Array{}, fmt.Errorf("%w: shape %v of %s needs %d data bytes, have %d",
			ErrTruncated, h.Shape, h.DType, n, have)
	case have > n:
		return array.Array{}, fmt.Errorf("%w: %d bytes after the %d data bytes", ErrSize, have-n, n)
	}
	return array.Array{
		DType:     h.DType,
		Shape:     h.Shape,
		Order:     h.Order,
		ByteOrder: h.ByteOrder,
		Data:      b[off : off+n : off+n],
		Offset:    int64(off),
	}, nil
}
