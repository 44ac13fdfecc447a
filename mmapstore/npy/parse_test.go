package npy

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// npyFile assembles an npy file of the given major version from a header
// dict text and data, without numpy's padding.
func npyFile(major int, header string, data []byte) []byte {
	b := append([]byte("\x93NUMPY"), byte(major), 0)
	if major == 1 {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(header)))
	} else {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(header)))
	}
	b = append(b, header...)
	return aligned(append(b, data...))
}

// pad pads a header dict with spaces and a newline to n bytes, as numpy
// pads to its alignment.
func pad(dict string, n int) string {
	return dict + strings.Repeat(" ", n-len(dict)-1) + "\n"
}

// dictText returns a header dict with the given descr, fortran_order and
// shape source texts.
func dictText(descr, fortran, shape string) string {
	return "{'descr': " + descr + ", 'fortran_order': " + fortran + ", 'shape': " + shape + ", }"
}

func TestParseHeaderVariants(t *testing.T) {
	host := array.HostByteOrder()
	tests := []struct {
		name   string
		major  int
		header string
		dtype  array.DType
		order  array.ByteOrder
		shape  []int
		layout array.Order
	}{
		{"numpy style", 1, dictText("'<f4'", "False", "(2,)") + "   \n", array.Float32, array.Little, []int{2}, array.C},
		{"native order", 1, dictText("'=f4'", "False", "(2,)"), array.Float32, host, []int{2}, array.C},
		{"no order char", 2, dictText("'f8'", "False", "(2,)"), array.Float64, host, []int{2}, array.C},
		{"bar on multi-byte", 1, dictText("'|i4'", "False", "(2,)"), array.Int32, host, []int{2}, array.C},
		{"order on one byte", 1, dictText("'<u1'", "False", "(2,)"), array.Uint8, array.NotApplicable, []int{2}, array.C},
		{"big-endian", 1, dictText("'>u2'", "False", "(2,)"), array.Uint16, array.Big, []int{2}, array.C},
		{"double quotes", 1, `{"descr": "<f4", "fortran_order": True, "shape": (2, 1)}`, array.Float32, array.Little, []int{2, 1}, array.Fortran},
		{"key order", 1, "{'shape': (1, 2), 'fortran_order': False, 'descr': '<c8'}", array.Complex64, array.Little, []int{1, 2}, array.C},
		{"python 2 longs", 1, dictText("'<i2'", "False", "(2L, 1l)"), array.Int16, array.Little, []int{2, 1}, array.C},
		{"whitespace", 3, "\n{ 'descr' :\t'<i8' ,\n 'fortran_order' : False , 'shape' : ( 2 , ) ,\r\n}\n", array.Int64, array.Little, []int{2}, array.C},
		{"escapes", 3, dictText(`'<\x66\u0034'`, "False", "(2,)"), array.Float32, array.Little, []int{2}, array.C},
		{"scalar", 1, dictText("'<f8'", "False", "()"), array.Float64, array.Little, nil, array.C},
		{"parenthesised dims", 1, dictText("'|b1'", "False", "((2), (1),)"), array.Bool, array.NotApplicable, []int{2, 1}, array.C},
		{"zero dims", 1, dictText("'<f4'", "False", "(0, 0)"), array.Float32, array.Little, []int{0, 0}, array.C},
		{"header at the limit", 2, pad(dictText("'<i4'", "False", "(2,)"), maxHeaderLen), array.Int32, array.Little, []int{2}, array.C},
		{"no trailing comma", 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (3,)}", array.Float16, array.Little, []int{3}, array.C},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, _ := array.DataSize(tt.dtype, tt.shape)
			b := npyFile(tt.major, tt.header, make([]byte, n))
			a, err := Parse(b)
			if err != nil {
				t.Fatalf("Parse(%q) error = %v", tt.header, err)
			}
			if a.DType != tt.dtype || a.ByteOrder != tt.order || a.Order != tt.layout || !slices.Equal(a.Shape, tt.shape) {
				t.Errorf("Parse(%q) = %v %v %v %v; want %v %v %v %v", tt.header,
					a.DType, a.ByteOrder, a.Order, a.Shape, tt.dtype, tt.order, tt.layout, tt.shape)
			}
			if want := len(b) - n; a.Offset != int64(want) {
				t.Errorf("Offset = %d; want %d", a.Offset, want)
			}
		})
	}
}

// errorCase is a malformed file and the sentinel Parse must fail with.
type errorCase struct {
	name string
	b    []byte
	want error
}

// errorCases returns the malformed files TestParseErrors checks, which
// also seed FuzzParse.
func errorCases() []errorCase {
	ok := dictText("'<f4'", "False", "(2,)")
	data := make([]byte, 8)
	return []errorCase{
		{"empty", nil, ErrTruncated},
		{"magic prefix", []byte("\x93NUM"), ErrTruncated},
		{"no version", []byte("\x93NUMPY\x01"), ErrTruncated},
		{"bad magic", []byte("\x93NUMPZ\x01\x00\x00\x00"), ErrNotNPY},
		{"zip", []byte("PK\x03\x04"), ErrNotNPY},
		{"version 4", []byte("\x93NUMPY\x04\x00\x00\x00\x00\x00"), ErrVersion},
		{"version 0", []byte("\x93NUMPY\x00\x00\x00\x00"), ErrVersion},
		{"version 1.1", []byte("\x93NUMPY\x01\x01\x00\x00"), ErrVersion},
		{"no header length", []byte("\x93NUMPY\x02\x00\x10\x00"), ErrTruncated},
		{"header past end", npyFile(1, ok, nil)[:30], ErrTruncated},
		{"huge header length", []byte("\x93NUMPY\x02\x00\xff\xff\xff\xff{}"), ErrHeader},
		{"header over limit", []byte("\x93NUMPY\x03\x00\x01\x00\x10\x00"), ErrHeader},
		{"header one over limit", npyFile(2, pad(ok, maxHeaderLen+1), data), ErrHeader},
		{"empty header", npyFile(1, "", nil), ErrHeader},
		{"not a dict", npyFile(1, "[1]", nil), ErrHeader},
		{"unclosed dict", npyFile(1, "{'descr': '<f4'", nil), ErrHeader},
		{"junk after dict", npyFile(1, ok+" x", data), ErrHeader},
		{"NUL padding", npyFile(1, ok+"\x00", data), ErrHeader},
		{"missing key", npyFile(1, "{'descr': '<f4', 'shape': (2,)}", data), ErrHeader},
		{"extra key", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", data), ErrHeader},
		{"duplicate key", npyFile(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", data), ErrHeader},
		{"non-string key", npyFile(1, "{1: 2}", nil), ErrHeader},
		{"missing colon", npyFile(1, "{'descr' '<f4'}", nil), ErrHeader},
		{"missing comma", npyFile(1, "{'descr': '<f4' 'shape': (2,)}", nil), ErrHeader},
		{"double comma", npyFile(1, "{'descr': '<f4',, 'shape': (2,)}", nil), ErrHeader},
		{"fortran_order int", npyFile(1, dictText("'<f4'", "0", "(2,)"), data), ErrHeader},
		{"fortran_order string", npyFile(1, dictText("'<f4'", "'False'", "(2,)"), data), ErrHeader},
		{"shape list", npyFile(1, dictText("'<f4'", "False", "[2]"), data), ErrHeader},
		{"shape int", npyFile(1, dictText("'<f4'", "False", "(2)"), data), ErrHeader},
		{"shape string dim", npyFile(1, dictText("'<f4'", "False", "('2',)"), data), ErrHeader},
		{"shape bool dim", npyFile(1, dictText("'<f4'", "False", "(True,)"), data), ErrHeader},
		{"shape float dim", npyFile(1, dictText("'<f4'", "False", "(2.0,)"), data), ErrHeader},
		{"shape hex dim", npyFile(1, dictText("'<f4'", "False", "(0x2,)"), data), ErrHeader},
		{"shape exponent", npyFile(1, dictText("'<f4'", "False", "(2e0,)"), data), ErrHeader},
		{"leading zero", npyFile(1, dictText("'<f4'", "False", "(02,)"), data), ErrHeader},
		{"bare minus", npyFile(1, dictText("'<f4'", "False", "(-,)"), data), ErrHeader},
		{"plus sign", npyFile(1, dictText("'<f4'", "False", "(+2,)"), data), ErrHeader},
		{"None", npyFile(1, dictText("'<f4'", "None", "(2,)"), data), ErrHeader},
		{"unknown name", npyFile(1, dictText("'<f4'", "false", "(2,)"), data), ErrHeader},
		{"empty tuple comma", npyFile(1, dictText("'<f4'", "False", "(,)"), data), ErrHeader},
		{"unclosed tuple", npyFile(1, "{'shape': (2,", nil), ErrHeader},
		{"long suffix in v3", npyFile(3, dictText("'<f4'", "False", "(2L,)"), data), ErrHeader},
		{"negative dim", npyFile(1, dictText("'<f4'", "False", "(-1,)"), nil), ErrHeader},
		{"negative zero ok but negative second", npyFile(1, dictText("'<f4'", "False", "(-0, -3)"), nil), ErrHeader},
		{"dim beyond int64", npyFile(1, dictText("'<f4'", "False", "(99999999999999999999,)"), data), ErrSize},
		{"shape overflow", npyFile(1, dictText("'<f4'", "False", "(4294967296, 4294967296)"), data), ErrSize},
		{"bytes overflow", npyFile(1, dictText("'<f8'", "False", "(2305843009213693952,)"), data), ErrSize},
		{"descr int", npyFile(1, dictText("5", "False", "(2,)"), data), ErrHeader},
		{"descr bool", npyFile(1, dictText("True", "False", "(2,)"), data), ErrHeader},
		{"unterminated string", npyFile(1, "{'descr: 1}", nil), ErrHeader},
		{"line break in string", npyFile(1, "{'des\ncr': 1}", nil), ErrHeader},
		{"unknown escape", npyFile(1, dictText(`'<\q4'`, "False", "(2,)"), data), ErrHeader},
		{"octal escape", npyFile(1, dictText(`'<\146'`, "False", "(2,)"), data), ErrHeader},
		{"short hex escape", npyFile(1, dictText(`'<\x6'`, "False", "(2,)"), data), ErrHeader},
		{"bad hex escape", npyFile(1, dictText(`'<\xzz'`, "False", "(2,)"), data), ErrHeader},
		{"escape past unicode", npyFile(3, dictText(`'\U00110000'`, "False", "(2,)"), data), ErrHeader},
		{"backslash at end", npyFile(1, `{'\`, nil), ErrHeader},
		{"deep nesting", npyFile(1, dictText(strings.Repeat("[", 100)+strings.Repeat("]", 100), "False", "(2,)"), data), ErrHeader},
		{"invalid UTF-8 in v3", npyFile(3, dictText("'<f4\xff'", "False", "(2,)"), data), ErrHeader},
		{"latin-1 in v1", npyFile(1, dictText("'<f4\xff'", "False", "(2,)"), data), ErrUnsupportedDType},
		{"unknown typestr", npyFile(1, dictText("'<f3'", "False", "(2,)"), data), ErrUnsupportedDType},
		{"empty descr", npyFile(1, dictText("''", "False", "(2,)"), data), ErrUnsupportedDType},
		{"type char", npyFile(1, dictText("'f'", "False", "(2,)"), data), ErrUnsupportedDType},
		{"structured", npyFile(1, dictText("[('a', '<i4')]", "False", "(2,)"), data), ErrUnsupportedDType},
		{"truncated data", npyFile(1, ok, data[:7]), ErrTruncated},
		{"no data", npyFile(1, ok, nil), ErrTruncated},
		{"trailing byte", npyFile(1, ok, make([]byte, 9)), ErrSize},
	}
}

func TestParseErrors(t *testing.T) {
	sentinels := []error{ErrNotNPY, ErrVersion, ErrHeader, ErrTruncated, ErrSize, ErrUnsupportedDType}
	for _, tt := range errorCases() {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.b)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Parse(%q) error = %v; want %v", tt.b, err, tt.want)
			}
			for _, s := range sentinels {
				if s != tt.want && errors.Is(err, s) {
					t.Errorf("Parse(%q) error = %v also matches %v", tt.b, err, s)
				}
			}
		})
	}
}

func TestParseHeaderPrefix(t *testing.T) {
	b := readAligned(t, "f4_lt_2x3x4_F_v1.npy")
	h, err := ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Header{Major: 1, Descr: "<f4", DType: array.Float32, ByteOrder: array.Little,
		Shape: []int{2, 3, 4}, Order: array.Fortran, DataOffset: 128, DataSize: 96}
	if !equalHeaders(h, want) {
		t.Errorf("ParseHeader() = %+v; want %+v", h, want)
	}
	prefix := b[:h.DataOffset]
	if h2, err := ParseHeader(prefix); err != nil || !equalHeaders(h2, h) {
		t.Errorf("ParseHeader(header only) = %+v, %v; want %+v, nil", h2, err, h)
	}
	if _, err := Parse(prefix); !errors.Is(err, ErrTruncated) {
		t.Errorf("Parse(header only) error = %v; want ErrTruncated", err)
	}
	if _, err := ParseHeader(b[:h.DataOffset-1]); !errors.Is(err, ErrTruncated) {
		t.Errorf("ParseHeader(short header) error = %v; want ErrTruncated", err)
	}
}

func equalHeaders(a, b Header) bool {
	return a.Major == b.Major && a.Minor == b.Minor && a.Descr == b.Descr &&
		a.DType == b.DType && a.ByteOrder == b.ByteOrder && a.Order == b.Order &&
		a.DataOffset == b.DataOffset && a.DataSize == b.DataSize && slices.Equal(a.Shape, b.Shape)
}

func TestParseMisaligned(t *testing.T) {
	b := readAligned(t, "f4_lt_3x4_C_v1.npy")
	shifted := make([]byte, len(b)+1)
	copy(shifted[1:], b)
	a, err := Parse(shifted[1:])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Float32s(); !errors.Is(err, array.ErrAlignment) {
		t.Errorf("Float32s() of misaligned data: error = %v; want ErrAlignment", err)
	}
	row, err := a.Row(1)
	if err != nil || len(row) != 16 {
		t.Errorf("Row(1) = %d bytes, %v; want 16 bytes, nil", len(row), err)
	}
}

func BenchmarkParse(b *testing.B) {
	file := readAligned(b, "f4_lt_2x3x4_C_v1.npy")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(file); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFloat32s(b *testing.B) {
	a, err := Parse(readAligned(b, "f4_lt_2x3x4_C_v1.npy"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Float32s(); err != nil {
			b.Fatal(err)
		}
	}
}
