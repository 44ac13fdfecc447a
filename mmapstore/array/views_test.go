package array

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"
	"unsafe"
)

// otherOrder is the byte order that is not the host's.
var otherOrder = map[ByteOrder]ByteOrder{Little: Big, Big: Little}[hostOrder]

// native returns an Array of type d and shape {len(vals)} whose aligned
// Data holds vals in host byte order, encoded by encoding/binary.
func native[T any](tb testing.TB, d DType, vals []T) Array {
	tb.Helper()
	enc, err := binary.Append(nil, binary.NativeEndian, vals)
	if err != nil {
		tb.Fatalf("encoding %T: %v", vals, err)
	}
	data := alignedBytes(len(enc))
	copy(data, enc)
	bo := hostOrder
	if d.Size() == 1 {
		bo = NotApplicable
	}
	return Array{DType: d, Shape: []int{len(vals)}, ByteOrder: bo, Data: data}
}

// checkView checks that get returns vals aliasing a.Data, and that the
// view fails with ErrByteOrder, ErrAlignment and ErrInvalid when it should.
func checkView[T comparable](t *testing.T, d DType, vals []T, get func(Array) ([]T, error)) {
	t.Helper()
	a := native(t, d, vals)
	got, err := get(a)
	if err != nil {
		t.Fatalf("%s view: %v", d, err)
	}
	if !slices.Equal(got, vals) {
		t.Errorf("%s view = %v; want %v", d, got, vals)
	}
	if unsafe.Pointer(&got[0]) != unsafe.Pointer(&a.Data[0]) {
		t.Errorf("%s view does not alias Data", d)
	}

	swapped := a
	swapped.ByteOrder = otherOrder
	_, err = get(swapped)
	if d.Size() > 1 && !errors.Is(err, ErrByteOrder) {
		t.Errorf("%s view of %v-endian data: error = %v; want ErrByteOrder", d, otherOrder, err)
	}
	if d.Size() == 1 && err != nil {
		t.Errorf("%s view ignoring byte order: error = %v; want nil", d, err)
	}

	if unsafe.Alignof(vals[0]) > 1 {
		shifted := a
		shifted.Data = a.Data[1 : len(a.Data)+1]
		if _, err := get(shifted); !errors.Is(err, ErrAlignment) {
			t.Errorf("%s view of misaligned data: error = %v; want ErrAlignment", d, err)
		}
	}

	short := a
	short.Data = a.Data[:len(a.Data)-1]
	if _, err := get(short); !errors.Is(err, ErrInvalid) {
		t.Errorf("%s view of short data: error = %v; want ErrInvalid", d, err)
	}

	empty := Array{DType: d, Shape: []int{2, 0}, ByteOrder: a.ByteOrder, Data: a.Data[:0]}
	if got, err := get(empty); err != nil || got == nil || len(got) != 0 {
		t.Errorf("%s view of shape (2, 0) = %v, %v; want [], nil", d, got, err)
	}

	scalar := Array{DType: d, ByteOrder: a.ByteOrder, Data: a.Data[:d.Size()]}
	if got, err := get(scalar); err != nil || len(got) != 1 || got[0] != vals[0] {
		t.Errorf("%s view of a 0-d array = %v, %v; want [%v], nil", d, got, err, vals[0])
	}
}

func TestViews(t *testing.T) {
	t.Run("bool", func(t *testing.T) { checkView(t, Bool, []bool{true, false, true}, Array.Bools) })
	t.Run("int8", func(t *testing.T) { checkView(t, Int8, []int8{-128, 0, 127}, Array.Int8s) })
	t.Run("int16", func(t *testing.T) { checkView(t, Int16, []int16{-32768, 1, 32767}, Array.Int16s) })
	t.Run("int32", func(t *testing.T) { checkView(t, Int32, []int32{math.MinInt32, 2, math.MaxInt32}, Array.Int32s) })
	t.Run("int64", func(t *testing.T) { checkView(t, Int64, []int64{math.MinInt64, 3, math.MaxInt64}, Array.Int64s) })
	t.Run("uint8", func(t *testing.T) { checkView(t, Uint8, []uint8{0, 1, 255}, Array.Uint8s) })
	t.Run("uint16", func(t *testing.T) { checkView(t, Uint16, []uint16{0, 1, 65535}, Array.Uint16s) })
	t.Run("uint32", func(t *testing.T) { checkView(t, Uint32, []uint32{0, 1, math.MaxUint32}, Array.Uint32s) })
	t.Run("uint64", func(t *testing.T) { checkView(t, Uint64, []uint64{0, 1, math.MaxUint64}, Array.Uint64s) })
	t.Run("float16", func(t *testing.T) { checkView(t, Float16, []uint16{0x3c00, 0xc000, 0x7bff}, Array.Float16s) })
	t.Run("bfloat16", func(t *testing.T) { checkView(t, BFloat16, []uint16{0x3f80, 0xc000, 0x7f7f}, Array.BFloat16s) })
	t.Run("float32", func(t *testing.T) { checkView(t, Float32, []float32{-1.5, 0, math.MaxFloat32}, Array.Float32s) })
	t.Run("float64", func(t *testing.T) { checkView(t, Float64, []float64{-1.5, 0, math.MaxFloat64}, Array.Float64s) })
	t.Run("complex64", func(t *testing.T) { checkView(t, Complex64, []complex64{1 + 2i, -3i, 4}, Array.Complex64s) })
	t.Run("complex128", func(t *testing.T) { checkView(t, Complex128, []complex128{1 + 2i, -3i, 4}, Array.Complex128s) })
}

func TestViewDTypeMismatch(t *testing.T) {
	views := map[DType]func(Array) error{
		Bool:       func(a Array) error { _, err := a.Bools(); return err },
		Int8:       func(a Array) error { _, err := a.Int8s(); return err },
		Int16:      func(a Array) error { _, err := a.Int16s(); return err },
		Int32:      func(a Array) error { _, err := a.Int32s(); return err },
		Int64:      func(a Array) error { _, err := a.Int64s(); return err },
		Uint8:      func(a Array) error { _, err := a.Uint8s(); return err },
		Uint16:     func(a Array) error { _, err := a.Uint16s(); return err },
		Uint32:     func(a Array) error { _, err := a.Uint32s(); return err },
		Uint64:     func(a Array) error { _, err := a.Uint64s(); return err },
		Float16:    func(a Array) error { _, err := a.Float16s(); return err },
		BFloat16:   func(a Array) error { _, err := a.BFloat16s(); return err },
		Float32:    func(a Array) error { _, err := a.Float32s(); return err },
		Float64:    func(a Array) error { _, err := a.Float64s(); return err },
		Complex64:  func(a Array) error { _, err := a.Complex64s(); return err },
		Complex128: func(a Array) error { _, err := a.Complex128s(); return err },
	}
	for have := DType(0); have <= Complex128; have++ {
		a := Array{DType: have, Shape: []int{2}, ByteOrder: hostOrder, Data: alignedBytes(2 * have.Size())}
		for want, view := range views {
			err := view(a)
			if want == have && err != nil {
				t.Errorf("%s view of %s array: error = %v; want nil", want, have, err)
			}
			if want != have && !errors.Is(err, ErrDType) {
				t.Errorf("%s view of %s array: error = %v; want ErrDType", want, have, err)
			}
		}
	}
}

func TestBoolsRejectsOtherBytes(t *testing.T) {
	for _, n := range []int{1, 7, 8, 9, 16, 17, 64} {
		for pos := 0; pos < n; pos++ {
			data := alignedBytes(n)
			data[pos] = 2
			a := Array{DType: Bool, Shape: []int{n}, Data: data}
			if _, err := a.Bools(); !errors.Is(err, ErrBoolValue) {
				t.Errorf("Bools() with byte %d of %d set to 2: error = %v; want ErrBoolValue", pos, n, err)
			}
			data[pos] = 1
			if _, err := a.Bools(); err != nil {
				t.Errorf("Bools() with byte %d of %d set to 1: error = %v; want nil", pos, n, err)
			}
		}
	}
}

func TestViewAllocs(t *testing.T) {
	f32 := native(t, Float32, make([]float32, 64))
	c128 := native(t, Complex128, make([]complex128, 64))
	bools := native(t, Bool, make([]bool, 64))
	empty := Array{DType: Int64, Shape: []int{0}, ByteOrder: hostOrder}
	allocs := testing.AllocsPerRun(100, func() {
		_, err1 := f32.Float32s()
		_, err2 := c128.Complex128s()
		_, err3 := bools.Bools()
		_, err4 := empty.Int64s()
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("typed views allocate %v times per call; want 0", allocs)
	}
}

func BenchmarkFloat32s(b *testing.B) {
	a := native(b, Float32, make([]float32, 1<<20))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Float32s(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBools(b *testing.B) {
	a := native(b, Bool, make([]bool, 1<<20))
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Bools(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRow(b *testing.B) {
	a := native(b, Float32, make([]float32, 1<<20))
	a.Shape = []int{1 << 10, 32, 32}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := a.Row(i % 1024); err != nil {
			b.Fatal(err)
		}
	}
}
