package array

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// view reinterprets a.Data as a []T without copying, after checking that a
// holds elements of type want in host byte order, that Data has exactly
// the size its shape implies, and that Data is aligned for T. It allocates
// only on failure.
func view[T any](a Array, want DType) ([]T, error) {
	if a.DType != want {
		return nil, fmt.Errorf("%w: array holds %s, view wants %s", ErrDType, a.DType, want)
	}
	if want.Size() > 1 && a.ByteOrder != hostOrder {
		return nil, fmt.Errorf("%w: %s stored %s-endian on a %s-endian host",
			ErrByteOrder, want, a.ByteOrder, hostOrder)
	}
	if err := a.checkSize(); err != nil {
		return nil, err
	}
	n := len(a.Data) / want.Size()
	if n == 0 {
		return []T{}, nil
	}
	var zero T
	p := unsafe.Pointer(unsafe.SliceData(a.Data))
	if align := unsafe.Alignof(zero); uintptr(p)%align != 0 {
		return nil, fmt.Errorf("%w: %s at offset %d needs %d-byte alignment",
			ErrAlignment, want, a.Offset, align)
	}
	return unsafe.Slice((*T)(p), n), nil
}

// Bools returns the elements of a Bool array as a []bool aliasing Data.
// Go requires every bool to be the byte 0 or 1, and reading any other byte
// as a bool gives undefined results, so Bools first scans Data (one pass,
// eight bytes at a time, no allocation) and fails with ErrBoolValue if any
// byte is neither. Data itself remains available for raw access to such
// files.
func (a Array) Bools() ([]bool, error) {
	v, err := view[bool](a, Bool)
	if err != nil {
		return nil, err
	}
	if err := checkBools(a.Data); err != nil {
		return nil, err
	}
	return v, nil
}

// checkBools returns an error wrapping ErrBoolValue if a byte of b is
// neither 0 nor 1.
func checkBools(b []byte) error {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:])&0xfefefefefefefefe != 0 {
			break // the loop below finds the byte
		}
	}
	for ; i < len(b); i++ {
		if b[i] > 1 {
			return fmt.Errorf("%w: byte %d of the data is %d", ErrBoolValue, i, b[i])
		}
	}
	return nil
}

// Int8s returns the elements of an Int8 array as a []int8 aliasing Data.
func (a Array) Int8s() ([]int8, error) { return view[int8](a, Int8) }

// Int16s returns the elements of an Int16 array as a []int16 aliasing Data.
func (a Array) Int16s() ([]int16, error) { return view[int16](a, Int16) }

// Int32s returns the elements of an Int32 array as a []int32 aliasing Data.
func (a Array) Int32s() ([]int32, error) { return view[int32](a, Int32) }

// Int64s returns the elements of an Int64 array as a []int64 aliasing Data.
func (a Array) Int64s() ([]int64, error) { return view[int64](a, Int64) }

// Uint8s returns the elements of a Uint8 array as a []uint8 aliasing Data.
// It is Data itself once the checks pass.
func (a Array) Uint8s() ([]uint8, error) { return view[uint8](a, Uint8) }

// Uint16s returns the elements of a Uint16 array as a []uint16 aliasing
// Data.
func (a Array) Uint16s() ([]uint16, error) { return view[uint16](a, Uint16) }

// Uint32s returns the elements of a Uint32 array as a []uint32 aliasing
// Data.
func (a Array) Uint32s() ([]uint32, error) { return view[uint32](a, Uint32) }

// Uint64s returns the elements of a Uint64 array as a []uint64 aliasing
// Data.
func (a Array) Uint64s() ([]uint64, error) { return view[uint64](a, Uint64) }

// Float16s returns the elements of a Float16 array as their raw IEEE 754
// half-precision bits, a []uint16 aliasing Data.
func (a Array) Float16s() ([]uint16, error) { return view[uint16](a, Float16) }

// BFloat16s returns the elements of a BFloat16 array as their raw bits (the
// upper half of a float32), a []uint16 aliasing Data.
func (a Array) BFloat16s() ([]uint16, error) { return view[uint16](a, BFloat16) }

// Float32s returns the elements of a Float32 array as a []float32 aliasing
// Data.
func (a Array) Float32s() ([]float32, error) { return view[float32](a, Float32) }

// Float64s returns the elements of a Float64 array as a []float64 aliasing
// Data.
func (a Array) Float64s() ([]float64, error) { return view[float64](a, Float64) }

// Complex64s returns the elements of a Complex64 array (pairs of float32:
// real, imaginary) as a []complex64 aliasing Data.
func (a Array) Complex64s() ([]complex64, error) { return view[complex64](a, Complex64) }

// Complex128s returns the elements of a Complex128 array (pairs of float64:
// real, imaginary) as a []complex128 aliasing Data.
func (a Array) Complex128s() ([]complex128, error) { return view[complex128](a, Complex128) }
