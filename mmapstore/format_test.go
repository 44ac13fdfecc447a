package mmapstore

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/mmapstore/npy"
	"github.com/cacheagent/cacheagent/mmapstore/safetensors"
)

// npyExpectation is the part of npy/testdata/expect.json this package
// checks.
type npyExpectation struct {
	File       string  `json:"file"`
	DType      *string `json:"dtype"` // nil: unsupported
	Shape      []int   `json:"shape"`
	Fortran    bool    `json:"fortran"`
	DataOffset int64   `json:"data_offset"`
}

// stExpectation is the part of safetensors/testdata/expect.json this
// package checks.
type stExpectation struct {
	File       string `json:"file"`
	DataOffset int64  `json:"data_offset"`
	Tensors    []struct {
		Name  string `json:"name"`
		Shape []int  `json:"shape"`
		Begin int64  `json:"begin"`
		End   int64  `json:"end"`
	} `json:"tensors"`
}

func loadJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestArrayOfTestdata reads every npy test file through the cache and the
// Store and checks what Array reports against numpy's description.
func TestArrayOfTestdata(t *testing.T) {
	var want []npyExpectation
	loadJSON(t, filepath.Join("npy", "testdata", "expect.json"), &want)
	e := newEnv(t, 0)
	s, _ := newStore(t, e.cache.Opener(), Config{})
	for _, w := range want {
		t.Run(w.File, func(t *testing.T) {
			raw, o := e.putFile(t, "npy/"+w.File, filepath.Join("npy", "testdata", w.File))
			l := acquire(t, s, o)
			defer release(t, l)
			a, err := l.Array()
			if w.DType == nil {
				if !errors.Is(err, npy.ErrUnsupportedDType) {
					t.Errorf("Array = %v; want npy.ErrUnsupportedDType", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Array: %v", err)
			}
			order := array.C
			if w.Fortran {
				order = array.Fortran
			}
			if a.DType.String() != *w.DType || !slices.Equal(a.Shape, w.Shape) || a.Order != order || a.Offset != w.DataOffset {
				t.Errorf("Array = %s %v %s at %d; want %s %v %s at %d",
					a.DType, a.Shape, a.Order, a.Offset, *w.DType, w.Shape, order, w.DataOffset)
			}
			if len(a.Data) > 0 && &a.Data[0] != &l.Bytes()[a.Offset] {
				t.Error("Array data does not alias the mapping")
			}
			if string(a.Data) != string(raw[w.DataOffset:]) {
				t.Error("Array data differs from the file's data section")
			}
			again, _ := l.Array()
			if len(a.Shape) > 0 && &again.Shape[0] != &a.Shape[0] {
				t.Error("second Array parsed again; want the mapping's cached array")
			}
		})
	}
}

func TestTensorsOfTestdata(t *testing.T) {
	var want []stExpectation
	loadJSON(t, filepath.Join("safetensors", "testdata", "expect.json"), &want)
	e := newEnv(t, 0)
	s, _ := newStore(t, e.cache.Opener(), Config{})
	for _, w := range want {
		t.Run(w.File, func(t *testing.T) {
			_, o := e.putFile(t, "st/"+w.File, filepath.Join("safetensors", "testdata", w.File))
			l := acquire(t, s, o)
			defer release(t, l)
			f, err := l.Tensors()
			if err != nil {
				t.Fatalf("Tensors: %v", err)
			}
			if f.DataOffset != w.DataOffset || len(f.Tensors) != len(w.Tensors) {
				t.Fatalf("Tensors: %d tensors at %d; want %d at %d", len(f.Tensors), f.DataOffset, len(w.Tensors), w.DataOffset)
			}
			for _, wt := range w.Tensors {
				a, ok := f.Tensors[wt.Name]
				if !ok {
					t.Errorf("tensor %q missing", wt.Name)
					continue
				}
				if !slices.Equal(a.Shape, wt.Shape) || a.Offset != w.DataOffset+wt.Begin ||
					int64(len(a.Data)) != wt.End-wt.Begin {
					t.Errorf("tensor %q: shape %v at %d, %d bytes; want %v at %d, %d bytes", wt.Name,
						a.Shape, a.Offset, len(a.Data), wt.Shape, w.DataOffset+wt.Begin, wt.End-wt.Begin)
				}
			}
			if _, err := l.Array(); !errors.Is(err, ErrFormat) {
				t.Errorf("Array of a safetensors file = %v; want ErrFormat", err)
			}
		})
	}
}

func TestMalformedFiles(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("npy", "testdata", "f4_lt_3x4_C_v1.npy"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		data      []byte
		arrayErr  error
		tensorErr error
	}{
		{"trunc.npy", good[:len(good)-3], npy.ErrTruncated, safetensors.ErrHeader},
		{"long.npy", append(slices.Clip(good), 0), npy.ErrSize, safetensors.ErrHeader},
		{"noise.npy", pattern(1, 300), npy.ErrNotNPY, nil},
		{"noise.bin", []byte("plain text, not an array"), ErrFormat, nil},
		{"bad.safetensors", stFile(`{"a": 1}`), ErrFormat, safetensors.ErrHeader},
		{"short.safetensors", []byte("\xff\x00\x00\x00\x00\x00\x00\x00{"), ErrFormat, safetensors.ErrTruncated},
	}
	e := newEnv(t, 0)
	s, _ := newStore(t, e.cache.Opener(), Config{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := acquire(t, s, e.put(t, "bad/"+tc.name, tc.data))
			defer release(t, l)
			if _, err := l.Array(); !errors.Is(err, tc.arrayErr) {
				t.Errorf("Array = %v; want %v", err, tc.arrayErr)
			}
			_, err := l.Tensors()
			if err == nil {
				t.Error("Tensors succeeded; want an error")
			} else if tc.tensorErr != nil && !errors.Is(err, tc.tensorErr) {
				t.Errorf("Tensors = %v; want %v", err, tc.tensorErr)
			}
		})
	}
}

func TestDetect(t *testing.T) {
	st := stFile("{}")
	tests := []struct {
		name string
		b    []byte
		want Format
	}{
		{"x.bin", []byte("\x93NUMPY\x01\x00"), NPY},
		{"x.safetensors", []byte("\x93NUMPY\x01\x00"), NPY},
		{"x.bin", st, Safetensors},
		{"x.npy", st, Safetensors}, // content wins
		{"x.npy", []byte("junk"), NPY},
		{"x.safetensors", []byte("junk"), Safetensors},
		{"x.safetensors", nil, Safetensors},
		{"x.bin", []byte("\xff\x00\x00\x00\x00\x00\x00\x00{"), Unknown}, // header length past the end
		{"x.bin", nil, Unknown},
	}
	for _, tc := range tests {
		if got := Detect(tc.name, tc.b); got != tc.want {
			t.Errorf("Detect(%q, %q) = %s; want %s", tc.name, tc.b, got, tc.want)
		}
	}
}

// stFile returns a safetensors file with the given JSON header and no data.
func stFile(header string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, uint64(len(header))), header...)
}
