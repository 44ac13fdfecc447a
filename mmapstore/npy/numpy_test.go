package npy

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"unsafe"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// expectation is one entry of testdata/expect.json, written by
// testdata/gen.py from what numpy knows about the file it wrote.
type expectation struct {
	File       string      `json:"file"`
	Version    [2]int      `json:"version"`
	Descr      string      `json:"descr"`
	DType      *string     `json:"dtype"` // nil: unsupported
	Kind       string      `json:"kind"`  // b, i, u, f or c
	ByteOrder  string      `json:"byte_order"`
	Shape      []int       `json:"shape"`
	Fortran    bool        `json:"fortran"`
	Strides    []int       `json:"strides"`
	DataOffset int         `json:"data_offset"`
	Add        json.Number `json:"add"`
	Mul        json.Number `json:"mul"`
}

func loadExpectations(t testing.TB) []expectation {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "expect.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.UseNumber()
	var es []expectation
	if err := dec.Decode(&es); err != nil {
		t.Fatalf("decoding expect.json: %v", err)
	}
	return es
}

// readAligned returns the contents of a test file at an 8-byte aligned
// address, as a page-aligned mapping would be.
func readAligned(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return aligned(raw)
}

// aligned copies b to an 8-byte aligned buffer.
func aligned(b []byte) []byte {
	words := make([]uint64, len(b)/8+1)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)[:len(b)]
	copy(buf, b)
	return buf
}

func TestNumpyFiles(t *testing.T) {
	for _, e := range loadExpectations(t) {
		t.Run(e.File, func(t *testing.T) {
			b := readAligned(t, e.File)
			h, err := ParseHeader(b)
			if e.DType == nil {
				checkUnsupported(t, e, b, h, err)
				return
			}
			if err != nil {
				t.Fatalf("ParseHeader: %v", err)
			}
			if h.Major != e.Version[0] || h.Minor != e.Version[1] || h.Descr != e.Descr {
				t.Errorf("ParseHeader = version %d.%d descr %q; want %d.%d %q",
					h.Major, h.Minor, h.Descr, e.Version[0], e.Version[1], e.Descr)
			}
			a, err := Parse(b)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			checkArray(t, e, b, a)
			checkValues(t, e, a)
		})
	}
}

func checkUnsupported(t *testing.T, e expectation, b []byte, h Header, err error) {
	t.Helper()
	if !errors.Is(err, ErrUnsupportedDType) {
		t.Fatalf("ParseHeader error = %v; want ErrUnsupportedDType", err)
	}
	if h.Descr != e.Descr || !slices.Equal(h.Shape, e.Shape) || h.DataOffset != e.DataOffset {
		t.Errorf("ParseHeader = descr %q shape %v offset %d; want %q %v %d",
			h.Descr, h.Shape, h.DataOffset, e.Descr, e.Shape, e.DataOffset)
	}
	if h.Major != e.Version[0] || h.DType != 0 || h.DataSize != 0 {
		t.Errorf("ParseHeader = version %d dtype %v size %d; want %d, invalid, 0",
			h.Major, h.DType, h.DataSize, e.Version[0])
	}
	if _, err := Parse(b); !errors.Is(err, ErrUnsupportedDType) {
		t.Errorf("Parse error = %v; want ErrUnsupportedDType", err)
	}
}

// checkArray checks everything about a but its values.
func checkArray(t *testing.T, e expectation, b []byte, a array.Array) {
	t.Helper()
	wantOrder := array.C
	if e.Fortran {
		wantOrder = array.Fortran
	}
	if a.DType.String() != *e.DType || a.ByteOrder.String() != e.ByteOrder || a.Order != wantOrder {
		t.Errorf("Parse = %v %v-endian %v order; want %s %s-endian %v order",
			a.DType, a.ByteOrder, a.Order, *e.DType, e.ByteOrder, wantOrder)
	}
	if !slices.Equal(a.Shape, e.Shape) {
		t.Errorf("Shape = %v; want %v", a.Shape, e.Shape)
	}
	if a.Offset != int64(e.DataOffset) || len(a.Data) != len(b)-e.DataOffset {
		t.Errorf("Offset, len(Data) = %d, %d; want %d, %d", a.Offset, len(a.Data), e.DataOffset, len(b)-e.DataOffset)
	}
	if len(a.Data) > 0 && &a.Data[0] != &b[e.DataOffset] {
		t.Errorf("Data does not alias the input")
	}
	if err := a.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	// numpy reports zero strides for arrays with no elements.
	if got := a.Strides(); a.NumElements() > 0 && !slices.Equal(got, e.Strides) {
		t.Errorf("Strides() = %v; want %v", got, e.Strides)
	}
	for i := range a.Len() {
		row, err := a.Row(i)
		switch {
		case a.Order == array.Fortran && len(a.Shape) > 1:
			if !errors.Is(err, array.ErrNotContiguous) {
				t.Errorf("Row(%d) error = %v; want ErrNotContiguous", i, err)
			}
		case err != nil:
			t.Errorf("Row(%d) error = %v", i, err)
		case len(row) > 0 && &row[0] != &a.Data[i*len(row)]:
			t.Errorf("Row(%d) is not Data[%d:]", i, i*len(row))
		case len(row) != a.RowSize():
			t.Errorf("len(Row(%d)) = %d; want %d", i, len(row), a.RowSize())
		}
	}
}

// scalar holds one element of any type, for comparisons.
type scalar struct {
	b bool
	i int64
	u uint64
	c complex128 // floats in the real part
}

// want returns the value gen.py stored at flat C-order index k.
func (e expectation) want(t *testing.T, k int) scalar {
	t.Helper()
	switch e.Kind {
	case "b":
		return scalar{b: k%3 == 0}
	case "i", "u":
		add, err1 := strconv.ParseInt(string(e.Add), 10, 64)
		mul, err2 := strconv.ParseInt(string(e.Mul), 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if e.Kind == "u" {
			return scalar{u: uint64(int64(k)+add) * uint64(mul)}
		}
		return scalar{i: (int64(k) + add) * mul}
	}
	add, err1 := e.Add.Float64()
	mul, err2 := e.Mul.Float64()
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	re := (float64(k) + add) * mul
	if e.Kind == "c" {
		return scalar{c: complex(re, float64(k)*mul)}
	}
	return scalar{c: complex(re, 0)}
}

// checkValues walks the array in logical C order, locating each element
// through the strides, and checks it both decoded from the raw bytes and,
// where the byte order allows, through the typed view.
func checkValues(t *testing.T, e expectation, a array.Array) {
	t.Helper()
	strides := a.Strides()
	idx := make([]int, len(a.Shape))
	var order binary.ByteOrder = binary.LittleEndian
	if a.ByteOrder == array.Big {
		order = binary.BigEndian
	}
	native := a.DType.Size() == 1 || a.ByteOrder == array.HostByteOrder()
	if _, err := viewElem(a, 0); !native && !errors.Is(err, array.ErrByteOrder) {
		t.Errorf("typed view of %v-endian data: error = %v; want ErrByteOrder", a.ByteOrder, err)
	}
	for k := range a.NumElements() {
		off := 0
		for d, i := range idx {
			off += i * strides[d]
		}
		want := e.want(t, k)
		if got := decode(a.DType, order, a.Data[off:off+a.DType.Size()]); got != want {
			t.Fatalf("element %v decoded = %+v; want %+v", idx, got, want)
		}
		if native {
			got, err := viewElem(a, off/a.DType.Size())
			if err != nil || got != want {
				t.Fatalf("element %v via typed view = %+v, %v; want %+v", idx, got, err, want)
			}
		}
		for d := len(idx) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < a.Shape[d] {
				break
			}
			idx[d] = 0
		}
	}
}

// decode decodes one element from its bytes.
func decode(d array.DType, order binary.ByteOrder, b []byte) scalar {
	switch d {
	case array.Bool:
		return scalar{b: b[0] == 1}
	case array.Int8:
		return scalar{i: int64(int8(b[0]))}
	case array.Int16:
		return scalar{i: int64(int16(order.Uint16(b)))}
	case array.Int32:
		return scalar{i: int64(int32(order.Uint32(b)))}
	case array.Int64:
		return scalar{i: int64(order.Uint64(b))}
	case array.Uint8:
		return scalar{u: uint64(b[0])}
	case array.Uint16:
		return scalar{u: uint64(order.Uint16(b))}
	case array.Uint32:
		return scalar{u: uint64(order.Uint32(b))}
	case array.Uint64:
		return scalar{u: order.Uint64(b)}
	case array.Float16:
		return scalar{c: complex(half(order.Uint16(b)), 0)}
	case array.Float32:
		return scalar{c: complex(float64(math.Float32frombits(order.Uint32(b))), 0)}
	case array.Float64:
		return scalar{c: complex(math.Float64frombits(order.Uint64(b)), 0)}
	case array.Complex64:
		re, im := math.Float32frombits(order.Uint32(b)), math.Float32frombits(order.Uint32(b[4:]))
		return scalar{c: complex(float64(re), float64(im))}
	case array.Complex128:
		return scalar{c: complex(math.Float64frombits(order.Uint64(b)), math.Float64frombits(order.Uint64(b[8:])))}
	}
	return scalar{}
}

// half converts IEEE 754 half-precision bits to a float64.
func half(bits uint16) float64 {
	sign := 1.0
	if bits&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(bits>>10)&0x1f, float64(bits&0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 0x1f:
		if frac == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	}
	return sign * math.Ldexp(1+frac/1024, exp-15)
}

// viewElem returns element j of a's typed view.
func viewElem(a array.Array, j int) (scalar, error) {
	var (
		s   scalar
		err error
	)
	switch a.DType {
	case array.Bool:
		v, e := a.Bools()
		s, err = pick(v, j, e, func(x bool) scalar { return scalar{b: x} })
	case array.Int8:
		v, e := a.Int8s()
		s, err = pick(v, j, e, func(x int8) scalar { return scalar{i: int64(x)} })
	case array.Int16:
		v, e := a.Int16s()
		s, err = pick(v, j, e, func(x int16) scalar { return scalar{i: int64(x)} })
	case array.Int32:
		v, e := a.Int32s()
		s, err = pick(v, j, e, func(x int32) scalar { return scalar{i: int64(x)} })
	case array.Int64:
		v, e := a.Int64s()
		s, err = pick(v, j, e, func(x int64) scalar { return scalar{i: x} })
	case array.Uint8:
		v, e := a.Uint8s()
		s, err = pick(v, j, e, func(x uint8) scalar { return scalar{u: uint64(x)} })
	case array.Uint16:
		v, e := a.Uint16s()
		s, err = pick(v, j, e, func(x uint16) scalar { return scalar{u: uint64(x)} })
	case array.Uint32:
		v, e := a.Uint32s()
		s, err = pick(v, j, e, func(x uint32) scalar { return scalar{u: uint64(x)} })
	case array.Uint64:
		v, e := a.Uint64s()
		s, err = pick(v, j, e, func(x uint64) scalar { return scalar{u: x} })
	default:
		return viewFloat(a, j)
	}
	return s, err
}

// viewFloat is viewElem for floating-point and complex types.
func viewFloat(a array.Array, j int) (scalar, error) {
	switch a.DType {
	case array.Float16:
		v, err := a.Float16s()
		return pick(v, j, err, func(x uint16) scalar { return scalar{c: complex(half(x), 0)} })
	case array.Float32:
		v, err := a.Float32s()
		return pick(v, j, err, func(x float32) scalar { return scalar{c: complex(float64(x), 0)} })
	case array.Float64:
		v, err := a.Float64s()
		return pick(v, j, err, func(x float64) scalar { return scalar{c: complex(x, 0)} })
	case array.Complex64:
		v, err := a.Complex64s()
		return pick(v, j, err, func(x complex64) scalar { return scalar{c: complex128(x)} })
	case array.Complex128:
		v, err := a.Complex128s()
		return pick(v, j, err, func(x complex128) scalar { return scalar{c: x} })
	}
	return scalar{}, errors.New("no view for " + a.DType.String())
}

// pick returns conv(v[j]), or err, or a zero scalar past the end.
func pick[T any](v []T, j int, err error, conv func(T) scalar) (scalar, error) {
	if err != nil || j >= len(v) {
		return scalar{}, err
	}
	return conv(v[j]), nil
}
