package array

import "unsafe"

// DType is the element type of an Array. The zero DType is invalid: it has
// size 0 and the name "invalid".
type DType uint8

// The element types an Array can hold. Float16 and BFloat16 have no Go
// counterpart; their typed views return the raw bits as uint16.
const (
	Bool DType = iota + 1
	Int8
	Int16
	Int32
	Int64
	Uint8
	Uint16
	Uint32
	Uint64
	Float16
	BFloat16
	Float32
	Float64
	Complex64
	Complex128
)

// dtypeInfo is the size in bytes and the numpy-style name of each DType.
var dtypeInfo = [...]struct {
	size int
	name string
}{
	0:          {0, "invalid"},
	Bool:       {1, "bool"},
	Int8:       {1, "int8"},
	Int16:      {2, "int16"},
	Int32:      {4, "int32"},
	Int64:      {8, "int64"},
	Uint8:      {1, "uint8"},
	Uint16:     {2, "uint16"},
	Uint32:     {4, "uint32"},
	Uint64:     {8, "uint64"},
	Float16:    {2, "float16"},
	BFloat16:   {2, "bfloat16"},
	Float32:    {4, "float32"},
	Float64:    {8, "float64"},
	Complex64:  {8, "complex64"},
	Complex128: {16, "complex128"},
}

// Valid reports whether d is one of the defined element types.
func (d DType) Valid() bool {
	return d != 0 && int(d) < len(dtypeInfo)
}

// Size returns the size of one element in bytes, or 0 for an invalid DType.
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeInfo[d].size
}

// String returns the numpy-style name of d, such as "float32" or "bfloat16",
// or "invalid".
func (d DType) String() string {
	if !d.Valid() {
		return "invalid"
	}
	return dtypeInfo[d].name
}

// Order is the memory layout of a multi-dimensional Array. The zero Order
// is C.
type Order uint8

const (
	// C is row-major order: the last index varies fastest.
	C Order = iota
	// Fortran is column-major order: the first index varies fastest.
	Fortran
)

// String returns "C" or "Fortran".
func (o Order) String() string {
	switch o {
	case C:
		return "C"
	case Fortran:
		return "Fortran"
	}
	return "invalid"
}

// ByteOrder is the byte order of the elements of an Array. The zero
// ByteOrder is NotApplicable.
type ByteOrder uint8

const (
	// NotApplicable is the byte order of single-byte element types.
	NotApplicable ByteOrder = iota
	// Little is little-endian: least significant byte first.
	Little
	// Big is big-endian: most significant byte first.
	Big
)

// String returns "little", "big" or "not applicable".
func (b ByteOrder) String() string {
	switch b {
	case NotApplicable:
		return "not applicable"
	case Little:
		return "little"
	case Big:
		return "big"
	}
	return "invalid"
}

// hostOrder is the byte order of the machine we run on.
var hostOrder = func() ByteOrder {
	x := uint16(1)
	if *(*byte)(unsafe.Pointer(&x)) == 1 {
		return Little
	}
	return Big
}()

// HostByteOrder returns the byte order of the machine the program runs on
// (Little on amd64 and arm64). Typed views require it for multi-byte types.
func HostByteOrder() ByteOrder {
	return hostOrder
}
