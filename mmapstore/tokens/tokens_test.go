package tokens

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/cacheagent/cacheagent/bench/testenv"
	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// expectation is one file of expect.json, written by testdata/write_tokens.py
// from what numpy reads back.
type expectation struct {
	File    string   `json:"file"`
	Format  string   `json:"format"`
	DType   string   `json:"dtype"`
	Offset  int64    `json:"offset"`
	Version int      `json:"version"`
	Tokens  []uint64 `json:"tokens"`
}

// aligned copies b to an 8-byte aligned buffer, as a mapping would be.
func aligned(b []byte) []byte {
	words := make([]uint64, len(b)/8+1)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)[:len(b)]
	copy(buf, b)
	return buf
}

// values returns the tokens of a 1-D array through its typed view.
func values(t *testing.T, a array.Array) []uint64 {
	t.Helper()
	var out []uint64
	switch a.DType {
	case array.Uint16:
		v, err := a.Uint16s()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range v {
			out = append(out, uint64(x))
		}
	case array.Uint32:
		v, err := a.Uint32s()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range v {
			out = append(out, uint64(x))
		}
	default:
		t.Fatalf("no test view for %s", a.DType)
	}
	return out
}

func checkDir(t *testing.T, dir string) {
	es := testenv.Expectations[expectation](t, dir)
	for _, e := range es {
		t.Run(e.File, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(dir, e.File))
			if err != nil {
				t.Fatal(err)
			}
			b := aligned(raw)
			want := map[string]array.DType{"uint16": array.Uint16, "uint32": array.Uint32}[e.DType]
			var f File
			if e.Format == "raw" {
				f, err = Raw(b, want)
			} else {
				f, err = ParseLLMC(b)
			}
			if err != nil {
				t.Fatal(err)
			}
			// Detect agrees, whatever raw type it is offered for shards.
			if d, err := Detect(b, want); err != nil || d.Format != f.Format || d.NumTokens() != f.NumTokens() {
				t.Errorf("Detect = %+v, %v; want %+v", d, err, f)
			}
			if f.Format.String() != strings.Replace(e.Format, "llmc", "llm.c", 1) || f.DType != want ||
				f.Offset != e.Offset || f.Version != e.Version || f.NumTokens() != len(e.Tokens) {
				t.Fatalf("File = %v %s offset %d version %d, %d tokens; want %+v",
					f.Format, f.DType, f.Offset, f.Version, f.NumTokens(), e)
			}
			a, err := f.Slice(0, f.NumTokens())
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := values(t, a); len(got)+len(e.Tokens) > 0 && !slices.Equal(got, e.Tokens) {
				t.Errorf("tokens = %v; want %v", got, e.Tokens)
			}
			if n := f.NumTokens(); n >= 3 {
				s, err := f.Slice(1, 3)
				if err != nil {
					t.Fatal(err)
				}
				if got := values(t, s); !slices.Equal(got, e.Tokens[1:3]) || s.Offset != e.Offset+int64(f.DType.Size()) {
					t.Errorf("Slice(1, 3) = %v at %d", got, s.Offset)
				}
				bs, _ := f.Bytes(n-1, n)
				if &bs[0] != &b[len(b)-len(bs)] || cap(bs) != len(bs) {
					t.Error("Bytes(n-1, n) is not the end of the input, capped")
				}
			}
		})
	}
}

// TestCommittedFiles reads the files write_tokens.py wrote into testdata.
func TestCommittedFiles(t *testing.T) {
	checkDir(t, "testdata")
}

// TestWrittenByPython runs write_tokens.py now and reads what it writes.
func TestWrittenByPython(t *testing.T) {
	testenv.NeedPython(t, "numpy")
	dir := t.TempDir()
	testenv.RunPython(t, filepath.Join("testdata", "write_tokens.py"), dir)
	checkDir(t, dir)
}

// shard returns an llm.c shard with the given header values and n bytes of
// tokens.
func shard(magic, version, count int32, n int) []byte {
	b := make([]byte, LLMCHeaderSize+n)
	binary.LittleEndian.PutUint32(b, uint32(magic))
	binary.LittleEndian.PutUint32(b[4:], uint32(version))
	binary.LittleEndian.PutUint32(b[8:], uint32(count))
	return b
}

func TestParseLLMCErrors(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		want error
		text string
	}{
		{"empty", nil, ErrNotLLMC, "0 bytes"},
		{"bad magic", shard(20240521, 1, 0, 0), ErrNotLLMC, "magic 20240521"},
		{"raw tokens", make([]byte, 2048), ErrNotLLMC, "magic 0"},
		{"header cut", shard(MagicUint16, 1, 0, 0)[:1023], ErrTruncated, "1023 bytes, the header needs 1024"},
		{"version 0", shard(MagicUint16, 0, 0, 0), ErrVersion, "version 0"},
		{"version 2", shard(MagicUint32, 2, 0, 0), ErrVersion, "version 2"},
		{"truncated shard", shard(MagicUint16, 1, 100, 199), ErrSize, "header says 100 uint16 tokens (200 bytes), 199 bytes follow it"},
		{"half a token short", shard(MagicUint32, 7, 10, 39), ErrSize, "10 uint32 tokens (40 bytes), 39 bytes"},
		{"trailing bytes", shard(MagicUint16, 1, 100, 202), ErrSize, "202 bytes follow"},
		{"negative count", shard(MagicUint16, 1, -1, 0), ErrSize, "-1 uint16"},
		{"absurd count", shard(MagicUint32, 7, math.MaxInt32, 8), ErrSize, "2147483647 uint32 tokens (8589934588 bytes), 8 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseLLMC(tt.b)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("ParseLLMC error = %v; want %v saying %q", err, tt.want, tt.text)
			}
		})
	}
	for _, v := range []int32{1, 7} {
		for _, m := range []int32{MagicUint16, MagicUint32} {
			f, err := ParseLLMC(shard(m, v, 3, 3*map[int32]int{MagicUint16: 2, MagicUint32: 4}[m]))
			if err != nil || f.NumTokens() != 3 || f.Version != int(v) {
				t.Errorf("ParseLLMC(magic %d, version %d) = %+v, %v", m, v, f, err)
			}
		}
	}
	// A shard with a bad header is not mistaken for raw tokens.
	if _, err := Detect(shard(MagicUint16, 1, 5, 4), array.Uint16); !errors.Is(err, ErrSize) {
		t.Errorf("Detect of a truncated shard: %v", err)
	}
}

func TestRaw(t *testing.T) {
	tests := []struct {
		n    int
		dt   array.DType
		want error
	}{
		{0, array.Uint16, nil},
		{6, array.Uint16, nil},
		{7, array.Uint16, ErrSize},
		{12, array.Uint32, nil},
		{10, array.Uint32, ErrSize},
		{3, array.Uint8, nil},
		{16, array.Int64, nil},
		{8, array.Float32, ErrDType},
		{8, array.Bool, ErrDType},
		{8, 0, ErrDType},
		{8, 200, ErrDType},
	}
	for _, tt := range tests {
		f, err := Raw(aligned(make([]byte, tt.n)), tt.dt)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("Raw(%d bytes, %s) error = %v; want %v", tt.n, tt.dt, err, tt.want)
			continue
		}
		if err == nil && f.NumTokens() != tt.n/tt.dt.Size() {
			t.Errorf("Raw(%d bytes, %s) has %d tokens", tt.n, tt.dt, f.NumTokens())
		}
	}
}

func TestRanges(t *testing.T) {
	f, err := Raw(aligned([]byte{1, 0, 2, 0, 3, 0}), array.Uint16)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int{{-1, 0}, {0, 4}, {2, 1}, {4, 4}} {
		if _, err := f.Slice(r[0], r[1]); !errors.Is(err, ErrRange) {
			t.Errorf("Slice(%d, %d) error = %v", r[0], r[1], err)
		}
		if _, err := f.Bytes(r[0], r[1]); !errors.Is(err, ErrRange) {
			t.Errorf("Bytes(%d, %d) error = %v", r[0], r[1], err)
		}
	}
	a, err := f.Slice(3, 3)
	if err != nil || a.Len() != 0 || a.Validate() != nil {
		t.Errorf("Slice(3, 3) = %v, %v", a, err)
	}
	var zero File
	if zero.NumTokens() != 0 {
		t.Error("the zero File has tokens")
	}
	if _, err := zero.Slice(0, 0); !errors.Is(err, ErrDType) {
		t.Errorf("zero File Slice error = %v", err)
	}
	b, err := zero.Bytes(0, 0)
	if err != nil || len(b) != 0 {
		t.Errorf("zero File Bytes = %v, %v", b, err)
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.bin"))
	if len(files) == 0 {
		f.Fatal("no test files")
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(array.Uint16))
	}
	f.Add(shard(MagicUint32, 7, 2, 8), uint8(array.Uint32))
	f.Add(shard(MagicUint16, 1, 5, 4), uint8(array.Int8))
	f.Fuzz(func(t *testing.T, b []byte, dt uint8) {
		b = aligned(b)
		for _, parse := range []func() (File, error){
			func() (File, error) { return ParseLLMC(b) },
			func() (File, error) { return Raw(b, array.DType(dt)) },
			func() (File, error) { return Detect(b, array.DType(dt)) },
		} {
			f, err := parse()
			if err != nil {
				known := false
				for _, s := range []error{ErrDType, ErrSize, ErrNotLLMC, ErrVersion, ErrTruncated} {
					known = known || errors.Is(err, s)
				}
				if !known {
					t.Fatalf("error %v wraps no sentinel", err)
				}
				continue
			}
			n := f.NumTokens()
			if f.Offset+int64(n*f.DType.Size()) != int64(len(b)) {
				t.Fatalf("%d tokens of %s at %d in %d bytes", n, f.DType, f.Offset, len(b))
			}
			for _, r := range [][2]int{{0, n}, {n / 2, n}, {0, n + 1}, {-1, 0}} {
				a, err := f.Slice(r[0], r[1])
				if err != nil {
					if !errors.Is(err, ErrRange) {
						t.Fatalf("Slice(%d, %d): %v", r[0], r[1], err)
					}
					continue
				}
				if err := a.Validate(); err != nil {
					t.Fatalf("Slice(%d, %d) is invalid: %v", r[0], r[1], err)
				}
			}
		}
	})
}
