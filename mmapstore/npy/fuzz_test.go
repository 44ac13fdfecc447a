package npy

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// fuzzSeeds are inputs added to the corpus besides every committed test
// file and every errorCases file.
func fuzzSeeds() [][]byte {
	return [][]byte{
		npyFile(2, dictText(`'<\x66\u0034'`, "True", "(1L, 2L,)"), make([]byte, 8)),
		npyFile(1, dictText("[('a', '<i4', (2,))]", "False", "()"), nil),
		npyFile(1, dictText("'|b1'", "False", "(3,)"), []byte{0, 1, 2}),
		npyFile(1, dictText("'>c16'", "True", "(1, 1)"), make([]byte, 16)),
		npyFile(3, dictText("'<u8'", "True", "(1, 0, 2)"), nil),
	}
}

func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.npy"))
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
		if len(c.b) <= 4<<10 { // large seeds slow mutation down
			f.Add(c.b)
		}
	}
	for _, b := range fuzzSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = aligned(b)
		h, herr := ParseHeader(b)
		a, err := Parse(b)
		if err != nil {
			checkParseError(t, herr, err)
			return
		}
		if herr != nil {
			t.Fatalf("Parse succeeded but ParseHeader failed: %v", herr)
		}
		if err := a.Validate(); err != nil {
			t.Fatalf("Parse returned an invalid array: %v", err)
		}
		if a.Offset != int64(h.DataOffset) || h.DataOffset+len(a.Data) != len(b) {
			t.Fatalf("Parse data = [%d, +%d) of %d bytes", a.Offset, len(a.Data), len(b))
		}
		exercise(a)
	})
}

// checkParseError checks that a Parse error wraps a sentinel, and agrees
// with the ParseHeader error herr.
func checkParseError(t *testing.T, herr, err error) {
	t.Helper()
	known := false
	for _, s := range []error{ErrNotNPY, ErrVersion, ErrHeader, ErrTruncated, ErrSize, ErrUnsupportedDType} {
		known = known || errors.Is(err, s)
		if herr != nil && errors.Is(herr, s) != errors.Is(err, s) {
			t.Fatalf("ParseHeader error %v and Parse error %v differ", herr, err)
		}
	}
	if !known {
		t.Fatalf("Parse error %v wraps no sentinel", err)
	}
	if herr == nil && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrSize) {
		t.Fatalf("ParseHeader succeeded but Parse failed: %v", err)
	}
}

// exercise calls every accessor of a, which must not panic.
func exercise(a array.Array) {
	a.Strides()
	a.RowSize()
	for i := range min(a.Len(), 4) {
		a.Row(i)
	}
	a.Row(a.Len())
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
	a.Complex64s()
	a.Complex128s()
}
