package megatron

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// idxFile is an index to encode: its fields are written as given, so they
// may contradict each other.
type idxFile struct {
	version    uint64
	code       uint8
	nseq, ndoc uint64
	lens       []int32
	ptrs       []int64
	docs       []int64
	modes      []int8
	extra      []byte
}

// goodIdx returns a valid index of three int16 sequences (3, 0 and 2
// tokens) in two documents, for a 10-byte .bin file.
func goodIdx() idxFile {
	return idxFile{version: 1, code: 3, nseq: 3, ndoc: 3,
		lens: []int32{3, 0, 2}, ptrs: []int64{0, 6, 6}, docs: []int64{0, 2, 3}}
}

func (f idxFile) bytes() []byte {
	le := binary.LittleEndian
	b := []byte(Magic)
	b = le.AppendUint64(b, f.version)
	b = append(b, f.code)
	b = le.AppendUint64(b, f.nseq)
	b = le.AppendUint64(b, f.ndoc)
	for _, v := range f.lens {
		b = le.AppendUint32(b, uint32(v))
	}
	for _, v := range f.ptrs {
		b = le.AppendUint64(b, uint64(v))
	}
	for _, v := range f.docs {
		b = le.AppendUint64(b, uint64(v))
	}
	for _, v := range f.modes {
		b = append(b, byte(v))
	}
	return append(b, f.extra...)
}

func TestParseIndexErrors(t *testing.T) {
	with := func(edit func(*idxFile)) []byte {
		f := goodIdx()
		edit(&f)
		return f.bytes()
	}
	good := goodIdx().bytes()
	tests := []struct {
		name string
		b    []byte
		want error
		text string
	}{
		{"empty", nil, ErrTruncated, "0 bytes"},
		{"bad magic", append([]byte("MMIDIDY"), good[7:]...), ErrNotIndex, `"MMIDIDY`},
		{"magic only", good[:9], ErrTruncated, "9 bytes"},
		{"header cut", good[:33], ErrTruncated, "33 bytes"},
		{"version 0", with(func(f *idxFile) { f.version = 0 }), ErrVersion, "version 0"},
		{"version 2", with(func(f *idxFile) { f.version = 2 }), ErrVersion, "version 2"},
		{"dtype 0", with(func(f *idxFile) { f.code = 0 }), ErrDType, "code 0"},
		{"dtype 9", with(func(f *idxFile) { f.code = 9 }), ErrDType, "code 9"},
		{"dtype 255", with(func(f *idxFile) { f.code = 255 }), ErrDType, "code 255"},
		{"absurd sequence count", with(func(f *idxFile) { f.nseq = math.MaxUint64 }), ErrSize, "18446744073709551615 sequences"},
		{"sequence count 2^60", with(func(f *idxFile) { f.nseq = 1 << 60 }), ErrSize, "12 bytes each"},
		{"absurd document count", with(func(f *idxFile) { f.ndoc = math.MaxUint64 / 2 }), ErrSize, "document index entries"},
		{"one document too many", with(func(f *idxFile) { f.ndoc = 4 }), ErrSize, "document index entries"},
		{"cut in the arrays", good[:len(good)-1], ErrSize, ""},
		{"stray trailing byte", append(good, 0), ErrSize, "1 bytes after the document index, want 0 or 3"},
		{"one mode short", with(func(f *idxFile) { f.modes = []int8{1, 2} }), ErrSize, "2 bytes after"},
		{"negative length", with(func(f *idxFile) { f.lens[2] = -1 }), ErrSequence, "sequence 2 has length -1"},
		{"no documents", with(func(f *idxFile) { f.ndoc, f.docs, f.extra = 0, nil, make([]byte, 24) }), ErrSize, ""},
		{"empty document index", idxFile{version: 1, code: 1}.bytes(), ErrDocuments, "no entries"},
		{"documents start at 1", with(func(f *idxFile) { f.docs[0] = 1 }), ErrDocuments, "entry 0 is 1"},
		{"decreasing documents", with(func(f *idxFile) { f.docs = []int64{0, 2, 1} }), ErrDocuments, "entry 2 is 1, below entry 1 (2)"},
		{"negative document entry", with(func(f *idxFile) { f.docs = []int64{0, -1, 3} }), ErrDocuments, "entry 1 is -1"},
		{"documents end early", with(func(f *idxFile) { f.docs[2] = 2 }), ErrDocuments, "last entry 2 is 2, want the sequence count 3"},
		{"documents end late", with(func(f *idxFile) { f.docs = []int64{0, 2, 4} }), ErrDocuments, "last entry 2 is 4"},
		{"huge document entry", with(func(f *idxFile) { f.docs = []int64{0, math.MaxInt64, 3} }), ErrDocuments, "below entry 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := ParseIndex(tt.b)
			if !errors.Is(err, tt.want) || x != nil {
				t.Fatalf("ParseIndex = %v, %v; want %v", x, err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("error %q does not say %q", err, tt.text)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*idxFile)
		binSize int64
		want    error
		text    string
	}{
		{"exact", nil, 10, nil, ""},
		{"larger bin", nil, 11, nil, ""},
		{"truncated bin", nil, 9, ErrSequence, "sequence 2 of 2 tokens at byte 6 ends past the 9-byte .bin file"},
		{"empty bin", nil, 0, ErrSequence, "sequence 0 of 3 tokens at byte 0"},
		{"negative bin size", nil, -1, ErrSequence, "negative"},
		{"pointer past the end", func(f *idxFile) { f.ptrs[1] = 11 }, 10, ErrSequence, "sequence 1 of 0 tokens at byte 11"},
		{"empty sequence at the end", func(f *idxFile) { f.ptrs[1] = 10 }, 10, nil, ""},
		{"negative pointer", func(f *idxFile) { f.ptrs[0] = -2 }, 10, ErrSequence, "sequence 0 has pointer -2"},
		{"huge pointer", func(f *idxFile) { f.ptrs[2] = math.MaxInt64 }, 10, ErrSequence, "sequence 2"},
		{"overflowing end", func(f *idxFile) { f.ptrs[2], f.lens[2] = math.MaxInt64-2, math.MaxInt32 }, math.MaxInt64, ErrSequence, "sequence 2"},
		{"huge length", func(f *idxFile) { f.lens[0] = math.MaxInt32 }, 1 << 31, ErrSequence, "sequence 0 of 2147483647 tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := goodIdx()
			if tt.edit != nil {
				tt.edit(&f)
			}
			x, err := ParseIndex(f.bytes())
			if err != nil {
				t.Fatalf("ParseIndex: %v", err)
			}
			err = x.Validate(tt.binSize)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Validate(%d) = %v; want %v", tt.binSize, err, tt.want)
			}
			if err != nil && !strings.Contains(err.Error(), tt.text) {
				t.Errorf("error %q does not say %q", err, tt.text)
			}
		})
	}
}

func TestIndexAccessors(t *testing.T) {
	f := goodIdx()
	f.modes = []int8{-1, 0, 7}
	x, err := ParseIndex(f.bytes())
	if err != nil {
		t.Fatal(err)
	}
	if x.DType != array.Int16 || x.ItemSize != 2 || x.NumSequences() != 3 || x.NumDocuments() != 2 || x.TotalTokens() != 5 {
		t.Errorf("index = %s %d %d %d %d", x.DType, x.ItemSize, x.NumSequences(), x.NumDocuments(), x.TotalTokens())
	}
	if m := x.Modes(); len(m) != 3 || m[0] != -1 || m[2] != 7 {
		t.Errorf("Modes = %v", m)
	}
	if first, end := x.Document(1); first != 2 || end != 3 {
		t.Errorf("Document(1) = %d, %d", first, end)
	}
	bin := aligned([]byte{1, 0, 2, 0, 3, 0, 4, 0, 5, 0})
	a, err := x.Tokens(bin, 2)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := a.Int16s(); err != nil || len(v) != 2 || v[0] != 4 || v[1] != 5 || a.Offset != 6 {
		t.Errorf("Tokens(2) = %v, %v at %d", v, err, a.Offset)
	}
	for _, i := range []int{-1, 3} {
		if _, err := x.Tokens(bin, i); !errors.Is(err, ErrSequence) {
			t.Errorf("Tokens(%d) error = %v", i, err)
		}
	}
	if _, err := x.Tokens(bin[:9], 2); !errors.Is(err, ErrSequence) || !strings.Contains(err.Error(), "sequence 2") {
		t.Errorf("Tokens on a truncated bin: %v", err)
	}
	for _, i := range []int{-1, 3} {
		func() {
			defer func() { recover() }()
			x.Sequence(i)
			t.Errorf("Sequence(%d) did not panic", i)
		}()
	}
	func() {
		defer func() { recover() }()
		x.Document(2)
		t.Error("Document(2) did not panic")
	}()
}

func TestTokens(t *testing.T) {
	bin := aligned(make([]byte, 16))
	tests := []struct {
		dt     array.DType
		off, n int64
		ok     bool
	}{
		{array.Uint16, 0, 8, true},
		{array.Uint16, 16, 0, true},
		{array.Uint8, 15, 1, true},
		{array.Uint16, 0, 9, false},
		{array.Uint16, 15, 1, false},
		{array.Uint16, 17, 0, false},
		{array.Int64, -8, 1, false},
		{array.Int64, 0, -1, false},
		{array.Int64, 8, math.MaxInt64, false},
	}
	for _, tt := range tests {
		a, err := Tokens(bin, tt.dt, tt.off, tt.n)
		if tt.ok != (err == nil) {
			t.Errorf("Tokens(%s, %d, %d) error = %v", tt.dt, tt.off, tt.n, err)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrSequence) {
				t.Errorf("Tokens(%s, %d, %d) error %v is not ErrSequence", tt.dt, tt.off, tt.n, err)
			}
			continue
		}
		if err := a.Validate(); err != nil || a.Len() != int(tt.n) {
			t.Errorf("Tokens(%s, %d, %d) = %v, %v", tt.dt, tt.off, tt.n, a, err)
		}
	}
	if _, err := Tokens(bin, 0, 0, 1); !errors.Is(err, ErrDType) {
		t.Errorf("Tokens of an invalid dtype: %v", err)
	}
}

func TestDTypeOf(t *testing.T) {
	want := []array.DType{0, array.Uint8, array.Int8, array.Int16, array.Int32, array.Int64, array.Float64, array.Float32, array.Uint16, 0}
	for code, w := range want {
		got, ok := DTypeOf(uint8(code))
		if got != w || ok != (w != 0) {
			t.Errorf("DTypeOf(%d) = %s, %v; want %s", code, got, ok, w)
		}
	}
}
