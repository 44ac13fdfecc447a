package array

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"
	"unsafe"
)

// alignedBytes returns n zero bytes starting at an 8-byte aligned address
// with one spare byte after them, so tests can misalign on purpose.
func alignedBytes(n int) []byte {
	words := make([]uint64, n/8+2)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)[:n]
}

// seq returns n aligned bytes holding 0, 1, 2, ... (mod 256).
func seq(n int) []byte {
	b := alignedBytes(n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func TestDType(t *testing.T) {
	tests := []struct {
		d    DType
		size int
		name string
	}{
		{0, 0, "invalid"},
		{Bool, 1, "bool"},
		{Int8, 1, "int8"},
		{Int16, 2, "int16"},
		{Int32, 4, "int32"},
		{Int64, 8, "int64"},
		{Uint8, 1, "uint8"},
		{Uint16, 2, "uint16"},
		{Uint32, 4, "uint32"},
		{Uint64, 8, "uint64"},
		{Float16, 2, "float16"},
		{BFloat16, 2, "bfloat16"},
		{Float32, 4, "float32"},
		{Float64, 8, "float64"},
		{Complex64, 8, "complex64"},
		{Complex128, 16, "complex128"},
		{Complex128 + 1, 0, "invalid"},
		{255, 0, "invalid"},
	}
	for _, tt := range tests {
		if got := tt.d.Size(); got != tt.size {
			t.Errorf("DType(%d).Size() = %d; want %d", tt.d, got, tt.size)
		}
		if got := tt.d.String(); got != tt.name {
			t.Errorf("DType(%d).String() = %q; want %q", tt.d, got, tt.name)
		}
		if got, want := tt.d.Valid(), tt.size != 0; got != want {
			t.Errorf("DType(%d).Valid() = %v; want %v", tt.d, got, want)
		}
	}
}

func TestOrderStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{C.String(), "C"},
		{Fortran.String(), "Fortran"},
		{Order(9).String(), "invalid"},
		{Little.String(), "little"},
		{Big.String(), "big"},
		{NotApplicable.String(), "not applicable"},
		{ByteOrder(9).String(), "invalid"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("String() = %q; want %q", tt.got, tt.want)
		}
	}
}

func TestHostByteOrder(t *testing.T) {
	x := uint32(0x01020304)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&x)), 4)
	want := Little
	if b[0] == 1 {
		want = Big
	}
	if got := HostByteOrder(); got != want {
		t.Errorf("HostByteOrder() = %v; want %v", got, want)
	}
}

func TestDataSize(t *testing.T) {
	tests := []struct {
		d      DType
		shape  []int
		want   int
		wantOK bool
	}{
		{Float32, nil, 4, true},
		{Float32, []int{}, 4, true},
		{Float32, []int{3, 4}, 48, true},
		{Complex128, []int{2, 3, 4}, 384, true},
		{Int8, []int{0}, 0, true},
		{Int8, []int{3, 0, 5}, 0, true},
		{Int8, []int{math.MaxInt, math.MaxInt, 0}, 0, true},
		{Int8, []int{math.MaxInt}, math.MaxInt, true},
		{Int16, []int{math.MaxInt}, 0, false},
		{Int16, []int{math.MaxInt / 2}, math.MaxInt / 2 * 2, true},
		{Int8, []int{1 << 32, 1 << 32}, 0, false},
		{Int8, []int{-1}, 0, false},
		{Int8, []int{0, -1}, 0, false},
		{0, []int{3}, 0, false},
	}
	for _, tt := range tests {
		got, ok := DataSize(tt.d, tt.shape)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("DataSize(%v, %v) = %d, %v; want %d, %v", tt.d, tt.shape, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		a       Array
		wantErr bool
	}{
		{"ok", Array{DType: Float32, Shape: []int{2}, ByteOrder: Little, Data: make([]byte, 8)}, false},
		{"ok scalar", Array{DType: Int8, Data: make([]byte, 1)}, false},
		{"ok empty", Array{DType: Float64, Shape: []int{0, 3}, ByteOrder: Big}, false},
		{"invalid dtype", Array{Shape: []int{0}}, true},
		{"invalid order", Array{DType: Int8, Order: 2, Data: make([]byte, 1)}, true},
		{"invalid byte order", Array{DType: Int8, ByteOrder: 3, Data: make([]byte, 1)}, true},
		{"missing byte order", Array{DType: Int16, Data: make([]byte, 2)}, true},
		{"negative offset", Array{DType: Int8, Data: make([]byte, 1), Offset: -1}, true},
		{"negative dim", Array{DType: Int8, Shape: []int{-1}}, true},
		{"short data", Array{DType: Float32, Shape: []int{2}, ByteOrder: Little, Data: make([]byte, 7)}, true},
		{"long data", Array{DType: Float32, Shape: []int{2}, ByteOrder: Little, Data: make([]byte, 9)}, true},
		{"overflow", Array{DType: Int8, Shape: []int{math.MaxInt, 2}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.a.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v; want error %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("Validate() = %v; want ErrInvalid", err)
			}
		})
	}
}

func TestShapeAccessors(t *testing.T) {
	tests := []struct {
		name     string
		a        Array
		len      int
		elems    int
		rowSize  int
		cStrides []int
		fStrides []int
	}{
		{"scalar", Array{DType: Float64}, 0, 1, 0, []int{}, []int{}},
		{"empty", Array{DType: Float32, Shape: []int{0}}, 0, 0, 4, []int{4}, []int{4}},
		{"vector", Array{DType: Int16, Shape: []int{5}}, 5, 5, 2, []int{2}, []int{2}},
		{"matrix", Array{DType: Float32, Shape: []int{3, 4}}, 3, 12, 16, []int{16, 4}, []int{4, 12}},
		{"cube", Array{DType: Complex128, Shape: []int{2, 3, 4}}, 2, 24, 192, []int{192, 64, 16}, []int{16, 32, 96}},
		{"zero rows", Array{DType: Int8, Shape: []int{0, 3}}, 0, 0, 3, []int{3, 1}, []int{1, 0}},
		{"empty rows", Array{DType: Int8, Shape: []int{3, 0}}, 3, 0, 0, []int{0, 1}, []int{1, 3}},
		{"negative", Array{DType: Int8, Shape: []int{2, -1}}, 2, -1, -1, []int{-1, 1}, []int{1, 2}},
		{"byte overflow", Array{DType: Int64, Shape: []int{2, math.MaxInt / 4}}, 2, 2 * (math.MaxInt / 4), -1, nil, nil},
		{"overflow", Array{DType: Int8, Shape: []int{3, math.MaxInt / 2}}, 3, -1, math.MaxInt / 2, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.a
			if got := a.Len(); got != tt.len {
				t.Errorf("Len() = %d; want %d", got, tt.len)
			}
			if got := a.NumElements(); got != tt.elems {
				t.Errorf("NumElements() = %d; want %d", got, tt.elems)
			}
			if got := a.RowSize(); got != tt.rowSize {
				t.Errorf("RowSize() = %d; want %d", got, tt.rowSize)
			}
			if tt.cStrides == nil {
				a.Strides() // must not panic
				return
			}
			if got := a.Strides(); !slices.Equal(got, tt.cStrides) {
				t.Errorf("C Strides() = %v; want %v", got, tt.cStrides)
			}
			a.Order = Fortran
			if got := a.Strides(); !slices.Equal(got, tt.fStrides) {
				t.Errorf("Fortran Strides() = %v; want %v", got, tt.fStrides)
			}
		})
	}
}

func TestRow(t *testing.T) {
	tests := []struct {
		name    string
		dtype   DType
		shape   []int
		order   Order
		i       int
		want    []byte // nil means an error
		wantErr error
	}{
		{"C matrix first", Int8, []int{3, 4}, C, 0, []byte{0, 1, 2, 3}, nil},
		{"C matrix last", Int8, []int{3, 4}, C, 2, []byte{8, 9, 10, 11}, nil},
		{"C int16 cube", Int16, []int{2, 2, 2}, C, 1, []byte{8, 9, 10, 11, 12, 13, 14, 15}, nil},
		{"vector", Int16, []int{3}, C, 1, []byte{2, 3}, nil},
		{"Fortran vector", Int16, []int{3}, Fortran, 2, []byte{4, 5}, nil},
		{"Fortran n by 1", Int8, []int{3, 1}, Fortran, 1, []byte{1}, nil},
		{"Fortran n by 1 by 1", Int8, []int{3, 1, 1}, Fortran, 2, []byte{2}, nil},
		{"Fortran 1 by n", Int8, []int{1, 4}, Fortran, 0, []byte{0, 1, 2, 3}, nil},
		{"Fortran 1 by 1 by n", Int8, []int{1, 1, 3}, Fortran, 0, []byte{0, 1, 2}, nil},
		{"Fortran empty rows", Int8, []int{2, 0, 3}, Fortran, 1, []byte{}, nil},
		{"C empty rows", Int8, []int{2, 0}, C, 1, []byte{}, nil},
		{"Fortran matrix", Int8, []int{3, 4}, Fortran, 0, nil, ErrNotContiguous},
		{"Fortran 1 by n by m", Int8, []int{1, 2, 3}, Fortran, 0, nil, ErrNotContiguous},
		{"invalid order", Int8, []int{3, 4}, Order(5), 0, nil, ErrNotContiguous},
		{"negative index", Int8, []int{3, 4}, C, -1, nil, ErrIndex},
		{"index past end", Int8, []int{3, 4}, C, 3, nil, ErrIndex},
		{"no rows", Int8, []int{0, 4}, C, 0, nil, ErrIndex},
		{"scalar", Int8, []int{}, C, 0, nil, ErrIndex},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, _ := DataSize(tt.dtype, tt.shape)
			a := Array{DType: tt.dtype, Shape: tt.shape, Order: tt.order, ByteOrder: hostOrder, Data: seq(n)}
			got, err := a.Row(tt.i)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Row(%d) error = %v; want %v", tt.i, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Row(%d) error = %v", tt.i, err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("Row(%d) = %v; want %v", tt.i, got, tt.want)
			}
			if cap(got) != len(got) {
				t.Errorf("Row(%d) cap = %d; want %d (capped)", tt.i, cap(got), len(got))
			}
		})
	}
}

func TestRowInvalid(t *testing.T) {
	for _, a := range []Array{
		{DType: Int8, Shape: []int{3, 4}, Data: make([]byte, 11)},
		{DType: 0, Shape: []int{3, 4}, Data: make([]byte, 12)},
		{DType: Int8, Shape: []int{2, -4}, Data: make([]byte, 12)},
		{DType: Int64, Shape: []int{2, math.MaxInt / 8}},
	} {
		if _, err := a.Row(1); !errors.Is(err, ErrInvalid) {
			t.Errorf("Row(1) on %+v error = %v; want ErrInvalid", a, err)
		}
	}
}

func TestRowAllocs(t *testing.T) {
	a := Array{DType: Float32, Shape: []int{8, 16}, ByteOrder: hostOrder, Data: seq(8 * 16 * 4)}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := a.Row(5); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Row allocates %v times per call; want 0", allocs)
	}
}
