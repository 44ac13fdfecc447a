package safetensors

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"unsafe"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// fileExpectation is one entry of testdata/expect.json, written by
// testdata/gen.py.
type fileExpectation struct {
	File       string              `json:"file"`
	Metadata   map[string]string   `json:"metadata"`
	DataOffset int64               `json:"data_offset"`
	Tensors    []tensorExpectation `json:"tensors"`
}

type tensorExpectation struct {
	Name  string      `json:"name"`
	DType string      `json:"dtype"`
	Shape []int       `json:"shape"`
	Begin int64       `json:"begin"`
	End   int64       `json:"end"`
	Add   json.Number `json:"add"`
	Mul   json.Number `json:"mul"`
}

func loadExpectations(t testing.TB) []fileExpectation {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "expect.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fs []fileExpectation
	if err := json.Unmarshal(raw, &fs); err != nil {
		t.Fatalf("decoding expect.json: %v", err)
	}
	return fs
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

func TestFiles(t *testing.T) {
	for _, fe := range loadExpectations(t) {
		t.Run(fe.File, func(t *testing.T) {
			b := readAligned(t, fe.File)
			f, err := Parse(b)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if f.DataOffset != fe.DataOffset {
				t.Errorf("DataOffset = %d; want %d", f.DataOffset, fe.DataOffset)
			}
			if !maps.Equal(f.Metadata, fe.Metadata) || (f.Metadata == nil) != (fe.Metadata == nil) {
				t.Errorf("Metadata = %v; want %v", f.Metadata, fe.Metadata)
			}
			slices.SortFunc(fe.Tensors, func(a, b tensorExpectation) int {
				return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End), cmp.Compare(a.Name, b.Name))
			})
			var names []string
			for _, te := range fe.Tensors {
				names = append(names, te.Name)
			}
			if !slices.Equal(f.Names, names) || len(f.Tensors) != len(names) {
				t.Errorf("Names = %q (%d tensors); want %q", f.Names, len(f.Tensors), names)
			}
			for _, te := range fe.Tensors {
				a, ok := f.Tensors[te.Name]
				if !ok {
					t.Errorf("tensor %q missing", te.Name)
					continue
				}
				checkTensor(t, te, b, fe.DataOffset, a)
			}
		})
	}
}

// checkTensor checks one tensor against its expectation, element by
// element, both from the raw bytes and through the typed view.
func checkTensor(t *testing.T, te tensorExpectation, b []byte, dataOffset int64, a array.Array) {
	t.Helper()
	if a.DType != dtypes[te.DType] || !slices.Equal(a.Shape, te.Shape) || a.Order != array.C {
		t.Errorf("%s = %v %v %v; want %s %v C", te.Name, a.DType, a.Shape, a.Order, te.DType, te.Shape)
	}
	wantOrder := array.Little
	if a.DType.Size() == 1 {
		wantOrder = array.NotApplicable
	}
	off := dataOffset + te.Begin
	if a.ByteOrder != wantOrder || a.Offset != off || int64(len(a.Data)) != te.End-te.Begin {
		t.Errorf("%s: byte order %v, offset %d, %d bytes; want %v, %d, %d",
			te.Name, a.ByteOrder, a.Offset, len(a.Data), wantOrder, off, te.End-te.Begin)
	}
	if len(a.Data) > 0 && &a.Data[0] != &b[off] {
		t.Errorf("%s: Data does not alias the input", te.Name)
	}
	if err := a.Validate(); err != nil {
		t.Errorf("%s: Validate() = %v", te.Name, err)
	}
	size := a.DType.Size()
	viewable := array.HostByteOrder() == array.Little && off%int64(min(size, 8)) == 0
	if _, err := view(a, 0); !viewable && err == nil {
		t.Errorf("%s: typed view at offset %d succeeded; want an error", te.Name, off)
	}
	for k := range a.NumElements() {
		want := te.want(t, k)
		if got := decode(a.DType, a.Data[k*size:]); got != want {
			t.Fatalf("%s[%d] decoded = %v; want %v", te.Name, k, got, want)
		}
		if viewable {
			if got, err := view(a, k); err != nil || got != want {
				t.Fatalf("%s[%d] via typed view = %v, %v; want %v", te.Name, k, got, err, want)
			}
		}
	}
}

// want returns the value gen.py stored at flat index k, as a string.
func (te tensorExpectation) want(t *testing.T, k int) string {
	t.Helper()
	switch te.DType {
	case "BOOL":
		return strconv.FormatBool(k%3 == 0)
	case "F64", "F32", "F16", "BF16":
		add, err1 := te.Add.Float64()
		mul, err2 := te.Mul.Float64()
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		return strconv.FormatFloat((float64(k)+add)*mul, 'g', -1, 64)
	}
	add, err1 := strconv.ParseInt(string(te.Add), 10, 64)
	mul, err2 := strconv.ParseInt(string(te.Mul), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if te.DType[0] == 'U' {
		return strconv.FormatUint(uint64(int64(k)+add)*uint64(mul), 10)
	}
	return strconv.FormatInt((int64(k)+add)*mul, 10)
}

// decode formats the little-endian element at the start of b.
func decode(d array.DType, b []byte) string {
	le := binary.LittleEndian
	switch d {
	case array.Bool:
		return strconv.FormatBool(b[0] == 1)
	case array.Int8:
		return strconv.FormatInt(int64(int8(b[0])), 10)
	case array.Int16:
		return strconv.FormatInt(int64(int16(le.Uint16(b))), 10)
	case array.Int32:
		return strconv.FormatInt(int64(int32(le.Uint32(b))), 10)
	case array.Int64:
		return strconv.FormatInt(int64(le.Uint64(b)), 10)
	case array.Uint8:
		return strconv.FormatUint(uint64(b[0]), 10)
	case array.Uint16:
		return strconv.FormatUint(uint64(le.Uint16(b)), 10)
	case array.Uint32:
		return strconv.FormatUint(uint64(le.Uint32(b)), 10)
	case array.Uint64:
		return strconv.FormatUint(le.Uint64(b), 10)
	case array.Float16:
		return formatFloat(half(le.Uint16(b)))
	case array.BFloat16:
		return formatFloat(float64(math.Float32frombits(uint32(le.Uint16(b)) << 16)))
	case array.Float32:
		return formatFloat(float64(math.Float32frombits(le.Uint32(b))))
	case array.Float64:
		return formatFloat(math.Float64frombits(le.Uint64(b)))
	}
	return "unknown " + d.String()
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// half converts IEEE 754 half-precision bits to a float64 (finite values).
func half(bits uint16) float64 {
	sign := 1.0
	if bits&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(bits>>10)&0x1f, float64(bits&0x3ff)
	if exp == 0 {
		return sign * math.Ldexp(frac, -24)
	}
	return sign * math.Ldexp(1+frac/1024, exp-15)
}

// view formats element k of a's typed view.
func view(a array.Array, k int) (string, error) {
	var (
		s   string
		err error
	)
	switch a.DType {
	case array.Bool:
		s, err = pick(a.Bools, k, strconv.FormatBool)
	case array.Int8:
		s, err = pick(a.Int8s, k, func(x int8) string { return strconv.FormatInt(int64(x), 10) })
	case array.Int16:
		s, err = pick(a.Int16s, k, func(x int16) string { return strconv.FormatInt(int64(x), 10) })
	case array.Int32:
		s, err = pick(a.Int32s, k, func(x int32) string { return strconv.FormatInt(int64(x), 10) })
	case array.Int64:
		s, err = pick(a.Int64s, k, func(x int64) string { return strconv.FormatInt(x, 10) })
	case array.Uint8:
		s, err = pick(a.Uint8s, k, func(x uint8) string { return strconv.FormatUint(uint64(x), 10) })
	case array.Uint16:
		s, err = pick(a.Uint16s, k, func(x uint16) string { return strconv.FormatUint(uint64(x), 10) })
	case array.Uint32:
		s, err = pick(a.Uint32s, k, func(x uint32) string { return strconv.FormatUint(uint64(x), 10) })
	case array.Uint64:
		s, err = pick(a.Uint64s, k, func(x uint64) string { return strconv.FormatUint(x, 10) })
	case array.Float16:
		s, err = pick(a.Float16s, k, func(x uint16) string { return formatFloat(half(x)) })
	case array.BFloat16:
		s, err = pick(a.BFloat16s, k, func(x uint16) string {
			return formatFloat(float64(math.Float32frombits(uint32(x) << 16)))
		})
	case array.Float32:
		s, err = pick(a.Float32s, k, func(x float32) string { return formatFloat(float64(x)) })
	case array.Float64:
		s, err = pick(a.Float64s, k, formatFloat)
	default:
		err = errors.New("no view for " + a.DType.String())
	}
	return s, err
}

// pick returns format(v[k]) for the view v returns, or its error; an empty
// string past the end.
func pick[T any](get func() ([]T, error), k int, format func(T) string) (string, error) {
	v, err := get()
	if err != nil || k >= len(v) {
		return "", err
	}
	return format(v[k]), nil
}
