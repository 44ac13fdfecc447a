package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// stFile assembles a safetensors file from a header text and data.
func stFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return aligned(append(b, data...))
}

// tensorJSON returns one header entry.
func tensorJSON(name, dtype, shape string, begin, end int) string {
	return fmt.Sprintf(`%q:{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`, name, dtype, shape, begin, end)
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		name     string
		header   string
		dataLen  int
		names    []string
		metadata map[string]string
	}{
		{"empty", "{}", 0, []string{}, nil},
		{"padded", "{}      ", 0, []string{}, nil},
		{"null metadata", `{"__metadata__":null}`, 0, []string{}, nil},
		{"empty metadata", `{"__metadata__":{}}`, 0, []string{}, map[string]string{}},
		{"metadata escapes", `{"__metadata__":{"k\u00e9":"v\n\"x\""}}`, 0, []string{}, map[string]string{"ké": "v\n\"x\""}},
		{"offset order", "{" + tensorJSON("b", "F32", "[2]", 8, 16) + "," + tensorJSON("a", "F32", "[2]", 0, 8) + "}",
			16, []string{"a", "b"}, nil},
		{"metadata anywhere", "{" + tensorJSON("a", "U8", "[3]", 0, 3) + `,"__metadata__":{"format":"pt"}}`,
			3, []string{"a"}, map[string]string{"format": "pt"}},
		{"empty tensors share offsets", "{" + tensorJSON("z", "I32", "[0]", 4, 4) + "," + tensorJSON("y", "F16", "[2, 0]", 4, 4) +
			"," + tensorJSON("x", "F32", "[]", 0, 4) + "}", 4, []string{"x", "y", "z"}, nil},
		{"extra keys ignored", `{"w":{"dtype":"BOOL","comment":[1,{}],"shape":[1],"data_offsets":[0,1]}}`, 1, []string{"w"}, nil},
		{"whitespace", "{ \"w\" : { \"dtype\" : \"I8\" , \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 2 ] } }\n\t ", 2, []string{"w"}, nil},
		{"empty name", "{" + tensorJSON("", "U16", "[1]", 0, 2) + "}", 2, []string{""}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(stFile(tt.header, make([]byte, tt.dataLen)))
			if err != nil {
				t.Fatalf("Parse(%s) error = %v", tt.header, err)
			}
			if !slices.Equal(f.Names, tt.names) || len(f.Tensors) != len(tt.names) {
				t.Errorf("Names = %q, %d tensors; want %q", f.Names, len(f.Tensors), tt.names)
			}
			if fmt.Sprint(f.Metadata) != fmt.Sprint(tt.metadata) || (f.Metadata == nil) != (tt.metadata == nil) {
				t.Errorf("Metadata = %#v; want %#v", f.Metadata, tt.metadata)
			}
			if want := int64(8 + len(tt.header)); f.DataOffset != want {
				t.Errorf("DataOffset = %d; want %d", f.DataOffset, want)
			}
			for _, name := range f.Names {
				if err := f.Tensors[name].Validate(); err != nil {
					t.Errorf("tensor %q: Validate() = %v", name, err)
				}
			}
		})
	}
}

// errorCases are malformed files, with the sentinel each must fail with,
// and the tensor name the error must mention, if any.
func errorCases() []struct {
	name   string
	b      []byte
	want   error
	tensor string
} {
	w := func(dtype, shape string, begin, end int) string {
		return "{" + tensorJSON("w", dtype, shape, begin, end) + "}"
	}
	huge := binary.LittleEndian.AppendUint64(nil, 100<<20+1)
	return []struct {
		name   string
		b      []byte
		want   error
		tensor string
	}{
		{"empty", nil, ErrTruncated, ""},
		{"short length", []byte{2, 0, 0, 0, 0, 0, 0}, ErrTruncated, ""},
		{"header past end", stFile("{}", nil)[:9], ErrTruncated, ""},
		{"header over limit", append(huge, "{}"...), ErrHeader, ""},
		{"max length", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'}, ErrHeader, ""},
		{"empty header", stFile("", nil), ErrHeader, ""},
		{"leading space", stFile(" {}", nil), ErrHeader, ""},
		{"array header", stFile("[]", nil), ErrHeader, ""},
		{"invalid UTF-8", stFile("{\"\xff\":{}}", nil), ErrHeader, ""},
		{"invalid JSON", stFile("{", nil), ErrHeader, ""},
		{"junk after object", stFile("{}x", nil), ErrHeader, ""},
		{"two objects", stFile("{} {}", nil), ErrHeader, ""},
		{"NUL padding", stFile("{}\x00", nil), ErrHeader, ""},
		{"duplicate tensor", stFile("{"+tensorJSON("w", "U8", "[1]", 0, 1)+","+tensorJSON("w", "U8", "[1]", 1, 2)+"}", make([]byte, 2)), ErrHeader, ""},
		{"tensor not an object", stFile(`{"w":1}`, nil), ErrHeader, "w"},
		{"missing dtype", stFile(`{"w":{"shape":[1],"data_offsets":[0,1]}}`, make([]byte, 1)), ErrHeader, "w"},
		{"missing shape", stFile(`{"w":{"dtype":"U8","data_offsets":[0,1]}}`, make([]byte, 1)), ErrHeader, "w"},
		{"missing offsets", stFile(`{"w":{"dtype":"U8","shape":[1]}}`, make([]byte, 1)), ErrHeader, "w"},
		{"case-folded key", stFile(`{"w":{"DTYPE":"U8","shape":[1],"data_offsets":[0,1]}}`, make([]byte, 1)), ErrHeader, "w"},
		{"duplicate field", stFile(`{"w":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, make([]byte, 1)), ErrHeader, "w"},
		{"null shape", stFile(`{"w":{"dtype":"U8","shape":null,"data_offsets":[0,0]}}`, nil), ErrHeader, "w"},
		{"dtype not a string", stFile(`{"w":{"dtype":5,"shape":[1],"data_offsets":[0,1]}}`, make([]byte, 1)), ErrHeader, "w"},
		{"FP8 dtype", stFile(w("F8_E4M3", "[1]", 0, 1), make([]byte, 1)), ErrUnsupportedDType, "w"},
		{"lower-case dtype", stFile(w("f32", "[1]", 0, 4), make([]byte, 4)), ErrUnsupportedDType, "w"},
		{"negative dim", stFile(w("U8", "[-1]", 0, 0), nil), ErrHeader, "w"},
		{"float dim", stFile(w("U8", "[1.5]", 0, 1), make([]byte, 1)), ErrHeader, "w"},
		{"exponent dim", stFile(w("U8", "[1e3]", 0, 1000), make([]byte, 1000)), ErrHeader, "w"},
		{"string dim", stFile(w("U8", `["1"]`, 0, 1), make([]byte, 1)), ErrHeader, "w"},
		{"dim beyond int64", stFile(w("U8", "[99999999999999999999]", 0, 0), nil), ErrHeader, "w"},
		{"shape overflow", stFile(w("F32", "[4294967296,4294967296]", 0, 0), nil), ErrOffsets, "w"},
		{"bytes overflow", stFile(w("F64", "[2305843009213693952]", 0, 0), nil), ErrOffsets, "w"},
		{"three offsets", stFile(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, make([]byte, 2)), ErrHeader, ""},
		{"negative offset", stFile(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}`, nil), ErrHeader, "w"},
		{"offset beyond uint64", stFile(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551616]}}`, nil), ErrHeader, "w"},
		{"begin after end", stFile(w("U8", "[0]", 1, 0), make([]byte, 1)), ErrOffsets, "w"},
		{"end past data", stFile(w("U8", "[2]", 0, 2), make([]byte, 1)), ErrOffsets, "w"},
		{"huge end", stFile(w("U8", "[1]", 0, 1<<62), make([]byte, 1)), ErrOffsets, "w"},
		{"size mismatch", stFile(w("F32", "[2]", 0, 4), make([]byte, 4)), ErrOffsets, "w"},
		{"overlap", stFile("{"+tensorJSON("a", "U8", "[2]", 0, 2)+","+tensorJSON("b", "U8", "[2]", 1, 3)+"}", make([]byte, 3)), ErrOffsets, "b"},
		{"hole", stFile("{"+tensorJSON("a", "U8", "[1]", 0, 1)+","+tensorJSON("b", "U8", "[1]", 2, 3)+"}", make([]byte, 3)), ErrOffsets, "b"},
		{"late start", stFile(w("U8", "[1]", 1, 2), make([]byte, 2)), ErrOffsets, "w"},
		{"trailing bytes", stFile(w("U8", "[1]", 0, 1), make([]byte, 2)), ErrOffsets, ""},
		{"data without tensors", stFile("{}", make([]byte, 1)), ErrOffsets, ""},
		{"metadata not an object", stFile(`{"__metadata__":"x"}`, nil), ErrHeader, ""},
		{"metadata number", stFile(`{"__metadata__":{"k":1}}`, nil), ErrHeader, ""},
		{"metadata null value", stFile(`{"__metadata__":{"k":null}}`, nil), ErrHeader, ""},
		{"metadata duplicate", stFile(`{"__metadata__":{"k":"a","k":"b"}}`, nil), ErrHeader, ""},
		{"duplicate metadata", stFile(`{"__metadata__":{},"__metadata__":{}}`, nil), ErrHeader, ""},
	}
}

func TestParseErrors(t *testing.T) {
	sentinels := []error{ErrHeader, ErrTruncated, ErrOffsets, ErrUnsupportedDType}
	for _, tt := range errorCases() {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(tt.b)
			if !errors.Is(err, tt.want) || f != nil {
				t.Fatalf("Parse(%q) = %v, %v; want nil, %v", tt.b, f, err, tt.want)
			}
			for _, s := range sentinels {
				if s != tt.want && errors.Is(err, s) {
					t.Errorf("Parse(%q) error = %v also matches %v", tt.b, err, s)
				}
			}
			// The message must say which tensor is at fault.
			if tt.tensor != "" && !strings.Contains(err.Error(), fmt.Sprintf("tensor %q", tt.tensor)) {
				t.Errorf("Parse(%q) error = %q; want it to name tensor %q", tt.b, err, tt.tensor)
			}
		})
	}
}

func TestParseUnaligned(t *testing.T) {
	f, err := Parse(readAligned(t, "unaligned.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	a := f.Tensors["w"]
	if _, err := a.Float32s(); !errors.Is(err, array.ErrAlignment) {
		t.Errorf("Float32s() at offset %d: error = %v; want ErrAlignment", a.Offset, err)
	}
	if row, err := a.Row(1); err != nil || len(row) != 12 {
		t.Errorf("Row(1) = %d bytes, %v; want 12 bytes, nil", len(row), err)
	}
}

// checkpointFile returns a file shaped like a transformer checkpoint:
// n tensors of BF16 with metadata.
func checkpointFile(n int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"__metadata__":{"format":"pt"}`)
	off := 0
	for i := range n {
		size := 2 * 64 * (1 + i%4)
		name := fmt.Sprintf("model.layers.%d.self_attn.q_proj.weight", i)
		sb.WriteString("," + tensorJSON(name, "BF16", fmt.Sprintf("[64, %d]", 1+i%4), off, off+size))
		off += size
	}
	sb.WriteString("}")
	sb.WriteString(strings.Repeat(" ", -sb.Len()&7)) // 8-byte aligned data, as writers pad
	return stFile(sb.String(), make([]byte, off))
}

func BenchmarkParse(b *testing.B) {
	for _, n := range []int{10, 1000} {
		file := checkpointFile(n)
		b.Run(fmt.Sprintf("tensors=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(file); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBFloat16s(b *testing.B) {
	f, err := Parse(checkpointFile(10))
	if err != nil {
		b.Fatal(err)
	}
	a := f.Tensors[f.Names[3]]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.BFloat16s(); err != nil {
			b.Fatal(err)
		}
	}
}
