package safetensors

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unsafe"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.safetensors"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no test files: %v", err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, c := range errorCases() {
		f.Add(c.b)
	}
	f.Add(checkpointFile(3))
	f.Fuzz(func(t *testing.T, b []byte) {
		b = aligned(b)
		file, err := Parse(b)
		checkHeader(t, b, file, err)
		if err != nil {
			if !errors.Is(err, ErrHeader) && !errors.Is(err, ErrTruncated) &&
				!errors.Is(err, ErrOffsets) && !errors.Is(err, ErrUnsupportedDType) {
				t.Fatalf("Parse error %v wraps no sentinel", err)
			}
			return
		}
		checkFile(t, b, file)
	})
}

// checkFile checks the invariants of a successfully parsed file: every
// tensor is valid, lies inside b at its Offset, and the tensors, in Names
// order, tile the data section.
func checkFile(t *testing.T, b []byte, f *File) {
	t.Helper()
	if len(f.Names) != len(f.Tensors) {
		t.Fatalf("%d names for %d tensors", len(f.Names), len(f.Tensors))
	}
	next := f.DataOffset
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for _, name := range f.Names {
		a, ok := f.Tensors[name]
		if !ok {
			t.Fatalf("tensor %q listed but missing", name)
		}
		if err := a.Validate(); err != nil {
			t.Fatalf("tensor %q: %v", name, err)
		}
		if a.Offset != next {
			t.Fatalf("tensor %q at %d; want %d", name, a.Offset, next)
		}
		if len(a.Data) > 0 && uintptr(unsafe.Pointer(&a.Data[0]))-base != uintptr(a.Offset) {
			t.Fatalf("tensor %q Data is not b[%d:]", name, a.Offset)
		}
		next += int64(len(a.Data))
		exercise(a)
	}
	if next != int64(len(b)) {
		t.Fatalf("tensors end at %d of %d bytes", next, len(b))
	}
}

// exercise calls every accessor of a, which must not panic.
func exercise(a array.Array) {
	a.Strides()
	for i := range min(a.Len(), 4) {
		a.Row(i)
	}
	a.Bools()
	a.Int8s()
	a.Int16s()
	a.Int32s()
	a.Int64s()
	a.Uint8s()
	a.Uint16s()
	a.Uint32s()
	a.Uint64s()
	a.Float16s()
	a.BFloat16s()
	a.Float32s()
	a.Float64s()
}

// checkHeader checks that ParseHeader, given the file's size and only its
// header's bytes, agrees with Parse's result (file, err) on b.
func checkHeader(t *testing.T, b []byte, file *File, err error) {
	t.Helper()
	hs, herr := HeaderSize(b)
	head := b
	if herr == nil && hs <= int64(len(b)) {
		head = b[:hs]
	}
	h, err2 := ParseHeader(head, int64(len(b)))
	if (err == nil) != (err2 == nil) {
		t.Fatalf("Parse error %v, ParseHeader error %v", err, err2)
	}
	if err != nil {
		return
	}
	if !slices.Equal(h.Names, file.Names) || h.DataOffset != file.DataOffset {
		t.Fatalf("ParseHeader: names %v at %d; Parse: %v at %d", h.Names, h.DataOffset, file.Names, file.DataOffset)
	}
	for name, a := range file.Tensors {
		ha := h.Tensors[name]
		if ha.DType != a.DType || !slices.Equal(ha.Shape, a.Shape) || ha.Offset != a.Offset || ha.Data != nil {
			t.Fatalf("tensor %q: ParseHeader %+v; Parse %v %v at %d", name, ha, a.DType, a.Shape, a.Offset)
		}
	}
}
