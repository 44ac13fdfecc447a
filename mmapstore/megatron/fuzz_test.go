package megatron

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func FuzzParseIndex(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.idx"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no test files: %v", err)
	}
	for _, name := range files {
		idx, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		bin, err := os.ReadFile(name[:len(name)-4] + ".bin")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(idx, int64(len(bin)))
	}
	g := goodIdx()
	g.modes = []int8{1, 2, 3}
	f.Add(g.bytes(), int64(10))
	f.Add(goodIdx().bytes(), int64(3))
	f.Fuzz(func(t *testing.T, idx []byte, binSize int64) {
		x, err := ParseIndex(idx)
		if cerr := CheckSize(idx[:min(len(idx), HeaderSize)], int64(len(idx))); cerr != nil && err == nil {
			t.Fatalf("CheckSize: %v; ParseIndex accepts the index", cerr)
		} else if cerr != nil && !errors.Is(err, errors.Unwrap(cerr)) {
			t.Fatalf("CheckSize: %v; ParseIndex: %v", cerr, err)
		}
		if err != nil {
			for _, s := range []error{ErrNotIndex, ErrVersion, ErrDType, ErrTruncated, ErrSize, ErrDocuments, ErrSequence} {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("error %v wraps no sentinel", err)
		}
		var total int64
		for i := range x.NumSequences() {
			_, n := x.Sequence(i)
			if n < 0 {
				t.Fatalf("sequence %d has length %d", i, n)
			}
			total += n
		}
		if total != x.TotalTokens() {
			t.Fatalf("lengths sum to %d, TotalTokens = %d", total, x.TotalTokens())
		}
		prev := 0
		for j := range x.NumDocuments() {
			first, end := x.Document(j)
			if first != prev || end < first || end > x.NumSequences() {
				t.Fatalf("Document(%d) = %d, %d after %d", j, first, end, prev)
			}
			prev = end
		}
		if prev != x.NumSequences() {
			t.Fatalf("documents end at %d of %d", prev, x.NumSequences())
		}
		if m := x.Modes(); m != nil && len(m) != x.NumSequences() {
			t.Fatalf("%d modes for %d sequences", len(m), x.NumSequences())
		}
		size := min(max(binSize, 0), 1<<16)
		bin := make([]byte, size)
		verr := x.Validate(size)
		if verr != nil && !errors.Is(verr, ErrSequence) {
			t.Fatalf("Validate error %v is not ErrSequence", verr)
		}
		for i := range x.NumSequences() {
			a, err := x.Tokens(bin, i)
			if err != nil {
				if verr == nil {
					t.Fatalf("Validate passed but Tokens(%d) failed: %v", i, err)
				}
				continue
			}
			if err := a.Validate(); err != nil {
				t.Fatalf("Tokens(%d) is invalid: %v", i, err)
			}
		}
	})
}
