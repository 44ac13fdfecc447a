// Package array describes an n-dimensional array whose bytes live in a
// read-only memory mapping of a cached file, and gives zero-copy access to
// them.
//
// An Array is a small value: element type, shape, memory order, byte order
// and the data bytes, which alias the mapping. Nothing in this package copies
// the data or allocates per element. Parsers for file formats (mmapstore/npy,
// mmapstore/safetensors) build Arrays; this package only interprets them.
//
// # Lifetime
//
// The bytes of an Array, and every slice returned by Row or a typed view,
// belong to the mapping they were parsed from. They must not be modified (the
// mapping is read-only: a write faults), and they are invalid once the lease
// on the mapping is released. Copy what must outlive the lease.
//
// # Typed views
//
// Float32s, Int64s and the other typed views reinterpret Data as a slice of
// Go values without copying. A view succeeds only when the element type
// matches exactly (ErrDType), the byte order is the host's for multi-byte
// types (ErrByteOrder), the first byte is aligned for the Go type
// (ErrAlignment), and Data has exactly the size the shape implies
// (ErrInvalid). Views return the elements in memory order: C order or
// Fortran order as Order says. Float16 and BFloat16 views return raw bits.
//
// # Errors
//
// Conditions callers test are the Err sentinels below; errors wrap them with
// the details (indices, types, shapes). Test them with errors.Is.
package array

import (
	"errors"
	"fmt"
	"math"
)

// Errors returned by Array methods, wrapped with details.
var (
	// ErrIndex means a row index is out of range, or the array is 0-d
	// and has no rows.
	ErrIndex = errors.New("array: index out of range")
	// ErrNotContiguous means the rows of the array are not contiguous
	// byte ranges in C layout (a Fortran-order array with more than one
	// non-trivial trailing dimension).
	ErrNotContiguous = errors.New("array: rows are not contiguous")
	// ErrDType means a typed view was asked for a different element type.
	ErrDType = errors.New("array: dtype mismatch")
	// ErrByteOrder means a multi-byte element type is not in the host's
	// byte order, so it cannot be viewed without a copy.
	ErrByteOrder = errors.New("array: byte order is not native")
	// ErrAlignment means the data does not start at an address aligned for
	// the Go element type, so it cannot be viewed without a copy.
	ErrAlignment = errors.New("array: data is not aligned for the element type")
	// ErrBoolValue means a bool array holds a byte other than 0 or 1.
	ErrBoolValue = errors.New("array: bool byte is neither 0 nor 1")
	// ErrInvalid means the Array value is inconsistent: an invalid element
	// type, order or byte order, a negative dimension, a size that
	// overflows, or Data whose length does not match the shape. Arrays
	// built by the parsers are always valid.
	ErrInvalid = errors.New("array: invalid array")
)

// Array is an n-dimensional array over bytes it does not own. It is an
// immutable value: copying it is cheap and shares the data. Its fields,
// including the Shape slice and the bytes of Data, must not be modified;
// Data is invalid after the lease on the underlying mapping is released.
// An Array is safe for concurrent use by multiple goroutines.
type Array struct {
	// DType is the element type.
	DType DType
	// Shape holds the dimensions; empty for a 0-d (scalar) array. A
	// dimension may be 0, in which case the array has no elements.
	Shape []int
	// Order is the memory layout of the elements.
	Order Order
	// ByteOrder is the byte order of each element; NotApplicable for
	// single-byte types.
	ByteOrder ByteOrder
	// Data holds exactly NumElements()*DType.Size() bytes, aliasing the
	// mapping.
	Data []byte
	// Offset is the position of Data[0] in the file.
	Offset int64
}

// DataSize returns the number of bytes an array of type d and the given
// shape occupies. It returns false for an invalid d, a negative dimension,
// or a size that does not fit in an int, so parsers can validate untrusted
// shapes without wrapping around.
func DataSize(d DType, shape []int) (int, bool) {
	if !d.Valid() {
		return 0, false
	}
	n, ok := product(shape)
	if !ok || n > math.MaxInt/d.Size() {
		return 0, false
	}
	return n * d.Size(), true
}

// product returns the product of dims (1 for none), or false if a dimension
// is negative or the product overflows int. A zero dimension makes the
// product 0 even when the other dimensions would overflow.
func product(dims []int) (int, bool) {
	zero := false
	for _, d := range dims {
		if d < 0 {
			return 0, false
		}
		if d == 0 {
			zero = true
		}
	}
	if zero {
		return 0, true
	}
	n := 1
	for _, d := range dims {
		if n > math.MaxInt/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// Validate reports whether a is consistent: a valid element type, order and
// byte order (Little or Big for multi-byte types), non-negative dimensions,
// a non-negative Offset, and Data of exactly the size the shape implies.
// The error wraps ErrInvalid.
func (a Array) Validate() error {
	switch {
	case !a.DType.Valid():
		return fmt.Errorf("%w: element type %d", ErrInvalid, a.DType)
	case a.Order != C && a.Order != Fortran:
		return fmt.Errorf("%w: order %d", ErrInvalid, a.Order)
	case a.ByteOrder > Big:
		return fmt.Errorf("%w: byte order %d", ErrInvalid, a.ByteOrder)
	case a.DType.Size() > 1 && a.ByteOrder == NotApplicable:
		return fmt.Errorf("%w: %s needs a byte order", ErrInvalid, a.DType)
	case a.Offset < 0:
		return fmt.Errorf("%w: offset %d", ErrInvalid, a.Offset)
	}
	return a.checkSize()
}

// checkSize reports whether the shape is valid and Data has its exact size.
func (a Array) checkSize() error {
	want, ok := DataSize(a.DType, a.Shape)
	if !ok {
		return fmt.Errorf("%w: shape %v of %s", ErrInvalid, a.Shape, a.DType)
	}
	if want != len(a.Data) {
		return fmt.Errorf("%w: shape %v of %s needs %d bytes, have %d",
			ErrInvalid, a.Shape, a.DType, want, len(a.Data))
	}
	return nil
}

// Len returns the number of rows, Shape[0]. A 0-d array (a scalar, with an
// empty Shape) has no rows: Len returns 0 although the array holds one
// element; use Data or a typed view to read it.
func (a Array) Len() int {
	if len(a.Shape) == 0 {
		return 0
	}
	return a.Shape[0]
}

// NumElements returns the number of elements: the product of Shape, 1 for
// a 0-d array, 0 when a dimension is 0. It returns -1 for a shape that
// Validate rejects (a negative dimension or an overflowing product).
func (a Array) NumElements() int {
	n, ok := product(a.Shape)
	if !ok {
		return -1
	}
	return n
}

// RowSize returns the size in bytes of one row, the subarray a[i]: the
// product of Shape[1:] times the element size. It returns 0 for a 0-d
// array, and -1 for an invalid element type or shape.
func (a Array) RowSize() int {
	if len(a.Shape) == 0 {
		return 0
	}
	n, ok := DataSize(a.DType, a.Shape[1:])
	if !ok {
		return -1
	}
	return n
}

// Strides returns, for each dimension, the distance in bytes between
// consecutive indices along it, for the layout Order gives. It returns an
// empty slice for a 0-d array. Strides allocates; the values are meaningful
// only for a valid array. For arrays with no elements the strides follow
// the same formula and may be 0.
func (a Array) Strides() []int {
	s := make([]int, len(a.Shape))
	step := a.DType.Size()
	if a.Order == Fortran {
		for i, d := range a.Shape {
			s[i] = step
			step *= d
		}
		return s
	}
	for i := len(a.Shape) - 1; i >= 0; i-- {
		s[i] = step
		step *= a.Shape[i]
	}
	return s
}

// Row returns the bytes of row i, the subarray a[i], in C layout, as a
// sub-slice of Data capped at its end (append never writes into Data). It
// fails with ErrIndex if i is out of range or a is 0-d, and with
// ErrNotContiguous unless the rows are contiguous byte ranges in C layout:
// always for C order and 1-d arrays; for Fortran order only when every
// trailing dimension is 1, as in shape (n, 1), when there is a single row
// with at most one trailing dimension above 1, as in (1, n), or when the
// rows are empty. Row does not allocate on success.
func (a Array) Row(i int) ([]byte, error) {
	if len(a.Shape) == 0 {
		return nil, fmt.Errorf("%w: row %d of a 0-d array", ErrIndex, i)
	}
	if n := a.Shape[0]; i < 0 || i >= n {
		return nil, fmt.Errorf("%w: row %d of %d", ErrIndex, i, n)
	}
	if !a.rowsContiguous() {
		return nil, fmt.Errorf("%w: %s-order shape %v", ErrNotContiguous, a.Order, a.Shape)
	}
	if err := a.checkSize(); err != nil {
		return nil, err
	}
	// Shape[0] > i >= 0 and the total size fits in an int, so the row size
	// does too and off+rs <= len(Data).
	rs, _ := DataSize(a.DType, a.Shape[1:])
	off := i * rs
	return a.Data[off : off+rs : off+rs], nil
}

// rowsContiguous reports whether every row a[i] is one contiguous byte
// range whose layout is the C layout of the subarray.
func (a Array) rowsContiguous() bool {
	switch {
	case a.Order == C || len(a.Shape) <= 1:
		return a.Order == C || a.Order == Fortran
	case a.Order != Fortran:
		return false
	}
	big := 0
	for _, d := range a.Shape[1:] {
		if d == 0 {
			return true // rows are empty
		}
		if d > 1 {
			big++
		}
	}
	return big == 0 || (big == 1 && a.Shape[0] == 1)
}
