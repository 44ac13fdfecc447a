package megatron

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unsafe"

	"github.com/cacheagent/cacheagent/bench/testenv"
	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// expectation is one dataset of expect.json, written by
// testdata/write_megatron.py from what numpy reads back.
type expectation struct {
	Name      string `json:"name"`
	DType     string `json:"dtype"`
	ItemSize  int    `json:"itemsize"`
	BinSize   int64  `json:"bin_size"`
	Sequences []struct {
		Pointer int64     `json:"pointer"`
		Tokens  []float64 `json:"tokens"`
	} `json:"sequences"`
	Documents []struct {
		First  int       `json:"first"`
		End    int       `json:"end"`
		Tokens []float64 `json:"tokens"`
	} `json:"documents"`
	Modes       []int8 `json:"modes"`
	TotalTokens int64  `json:"total_tokens"`
}

// aligned copies b to an 8-byte aligned buffer, as a mapping would be.
func aligned(b []byte) []byte {
	words := make([]uint64, len(b)/8+1)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)[:len(b)]
	copy(buf, b)
	return buf
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return aligned(b)
}

// values returns the elements of a 1-D token array through its typed view.
func values(a array.Array) ([]float64, error) {
	var out []float64
	add := func(n int, at func(int) float64) {
		for i := range n {
			out = append(out, at(i))
		}
	}
	switch a.DType {
	case array.Uint8:
		v, err := a.Uint8s()
		if err != nil {
			return nil, err
		}
		add(len(v), func(i int) float64 { return float64(v[i]) })
	case array.Uint16:
		v, err := a.Uint16s()
		if err != nil {
			return nil, err
		}
		add(len(v), func(i int) float64 { return float64(v[i]) })
	case array.Int32:
		v, err := a.Int32s()
		if err != nil {
			return nil, err
		}
		add(len(v), func(i int) float64 { return float64(v[i]) })
	case array.Float32:
		v, err := a.Float32s()
		if err != nil {
			return nil, err
		}
		add(len(v), func(i int) float64 { return float64(v[i]) })
	default:
		return nil, fmt.Errorf("no test view for %s", a.DType)
	}
	return out, nil
}

// checkDir checks every dataset of dir/expect.json.
func checkDir(t *testing.T, dir string) {
	es := testenv.Expectations[expectation](t, dir)
	for _, e := range es {
		t.Run(e.Name, func(t *testing.T) {
			idx := readFile(t, filepath.Join(dir, e.Name+".idx"))
			bin := readFile(t, filepath.Join(dir, e.Name+".bin"))
			x, err := ParseIndex(idx)
			if err != nil {
				t.Fatalf("ParseIndex: %v", err)
			}
			if err := x.Validate(int64(len(bin))); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			checkIndex(t, e, x, bin)
		})
	}
}

func checkIndex(t *testing.T, e expectation, x *Index, bin []byte) {
	t.Helper()
	if x.DType.String() != e.DType || x.ItemSize != e.ItemSize || int64(len(bin)) != e.BinSize {
		t.Errorf("dtype %s itemsize %d bin %d; want %s %d %d",
			x.DType, x.ItemSize, len(bin), e.DType, e.ItemSize, e.BinSize)
	}
	if x.NumSequences() != len(e.Sequences) || x.NumDocuments() != len(e.Documents) {
		t.Fatalf("%d sequences %d documents; want %d %d",
			x.NumSequences(), x.NumDocuments(), len(e.Sequences), len(e.Documents))
	}
	if x.TotalTokens() != e.TotalTokens {
		t.Errorf("TotalTokens = %d; want %d", x.TotalTokens(), e.TotalTokens)
	}
	if m := x.Modes(); !slices.Equal(m, e.Modes) || (m == nil) != (e.Modes == nil) {
		t.Errorf("Modes = %v; want %v", m, e.Modes)
	}
	for i, s := range e.Sequences {
		off, n := x.Sequence(i)
		if off != s.Pointer || n != int64(len(s.Tokens)) {
			t.Errorf("Sequence(%d) = %d, %d; want %d, %d", i, off, n, s.Pointer, len(s.Tokens))
		}
		a, err := x.Tokens(bin, i)
		if err != nil {
			t.Fatalf("Tokens(%d): %v", i, err)
		}
		if err := a.Validate(); err != nil {
			t.Fatalf("Tokens(%d) is invalid: %v", i, err)
		}
		got, err := values(a)
		if err != nil {
			t.Fatalf("Tokens(%d): %v", i, err)
		}
		if !slices.Equal(got, s.Tokens) && len(got)+len(s.Tokens) > 0 {
			t.Errorf("Tokens(%d) = %v; want %v", i, got, s.Tokens)
		}
	}
	for j, d := range e.Documents {
		first, end := x.Document(j)
		if first != d.First || end != d.End {
			t.Errorf("Document(%d) = %d, %d; want %d, %d", j, first, end, d.First, d.End)
		}
		var got []float64
		for i := first; i < end; i++ {
			a, _ := x.Tokens(bin, i)
			v, _ := values(a)
			got = append(got, v...)
		}
		if !slices.Equal(got, d.Tokens) && len(got)+len(d.Tokens) > 0 {
			t.Errorf("document %d tokens = %v; want %v", j, got, d.Tokens)
		}
	}
}

// TestCommittedFiles reads the files write_megatron.py wrote into testdata.
func TestCommittedFiles(t *testing.T) {
	checkDir(t, "testdata")
}

// TestWrittenByPython runs write_megatron.py now and reads what it writes.
func TestWrittenByPython(t *testing.T) {
	testenv.NeedPython(t, "numpy")
	dir := t.TempDir()
	testenv.RunPython(t, filepath.Join("testdata", "write_megatron.py"), dir)
	checkDir(t, dir)
}
