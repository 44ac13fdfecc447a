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

// dtypeInfo is the size in bytes, the numpy-style name and the numpy type
// string (kind and size, without the byte order; "" where numpy has none)
// of each DType: the one table of them.
var dtypeInfo = [...]struct {
	size    int
	name    string
	typestr string
}{
	0:          {0, "invalid", ""},
	Bool:       {1, "bool", "b1"},
	Int8:       {1, "int8", "i1"},
	Int16:      {2, "int16", "i2"},
	Int32:      {4, "int32", "i4"},
	Int64:      {8, "int64", "i8"},
	Uint8:      {1, "uint8", "u1"},
	Uint16:     {2, "uint16", "u2"},
	Uint32:     {4, "uint32", "u4"},
	Uint64:     {8, "uint64", "u8"},
	Float16:    {2, "float16", "f2"},
	BFloat16:   {2, "bfloat16", ""},
	Float32:    {4, "float32", "f4"},
	Float64:    {8, "float64", "f8"},
	Complex64:  {8, "complex64", "c8"},
	Complex128: {16, "complex128", "c16"},
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

// Typestr returns numpy's type string for elements of d in byte order bo,
// such as "<f4" or "|u1" (single-byte types and NotApplicable have '|'),
// and false for a type numpy does not have (BFloat16, invalid).
func (d DType) Typestr(bo ByteOrder) (string, bool) {
	if !d.Valid() || dtypeInfo[d].typestr == "" {
		return "", false
	}
	order := "|"
	if d.Size() > 1 {
		switch bo {
		case Little:
			order = "<"
		case Big:
			order = ">"
		}
	}
	return order + dtypeInfo[d].typestr, true
}

// ParseTypestr parses a simple numpy type string such as "<f4" into an
// element type and byte order. It returns a zero DType for types it does
// not support. As in numpy, '|', '=' and no byte-order character mean the
// host's order; single-byte types have no byte order.
func ParseTypestr(s string) (DType, ByteOrder) {
	order := HostByteOrder()
	if s != "" {
		switch s[0] {
		case '<':
			order, s = Little, s[1:]
		case '>':
			order, s = Big, s[1:]
		case '|', '=':
			s = s[1:]
		}
	}
	if s == "" {
		return 0, NotApplicable
	}
	for d := Bool; int(d) < len(dtypeInfo); d++ {
		if dtypeInfo[d].typestr == s {
			if d.Size() == 1 {
				order = NotApplicable
			}
			return d, order
		}
	}
	return 0, NotApplicable
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
