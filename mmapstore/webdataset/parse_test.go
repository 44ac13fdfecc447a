package webdataset

import (
	"archive/tar"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestIndexErrors(t *testing.T) {
	badSum := header("a.jpg", 0, '0')
	badSum[0] = 'b'
	withSize := func(f string) []byte {
		h := header("a.jpg", 0, '0')
		copy(h[offSize:offSize+12], f)
		return fixSum(h)
	}
	tests := []struct {
		name string
		b    []byte
		want error
		text string
	}{
		{"bad checksum", cat(badSum, pad("x"), zeros), ErrChecksum, "header at byte 0"},
		{"garbage checksum field", cat(func() []byte { h := header("a.jpg", 0, '0'); h[offChecksum] = 'z'; return h }(), zeros), ErrChecksum, "checksum field"},
		{"member past the object", cat(header("a.jpg", 1000, '0'), pad("x")), ErrTruncated, "entry at byte 0 has 1000 bytes of data, the object has 512"},
		{"second member past the object", cat(header("a.jpg", 1, '0'), pad("x"), header("b.jpg", 513, '0'), pad("y")), ErrTruncated, "entry at byte 1024 has 513 bytes"},
		{"absurd octal size", cat(withSize("77777777777\x00"), zeros), ErrTruncated, "8589934591 bytes"},
		{"absurd base-256 size", cat(withSize("\x80\x00\x00\x00\x7f\xff\xff\xff\xff\xff\xff\xff"), zeros), ErrTruncated, "9223372036854775807 bytes"},
		{"overflowing base-256 size", cat(withSize("\x80\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), zeros), ErrHeader, "overflows"},
		{"negative base-256 size", cat(withSize("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"), zeros), ErrHeader, "negative"},
		{"bad octal size", cat(withSize("00000000x12\x00"), zeros), ErrHeader, "bad octal"},
		{"digits after a space", cat(withSize("0000 0000012"), zeros), ErrHeader, "bad octal"},
		{"data without padding", cat(header("a.jpg", 3, '0'), []byte("abc")), ErrTruncated, "lacks the padding"},
		{"header cut", cat(header("a.jpg", 0, '0'), make([]byte, 300)), ErrTruncated, "300 bytes at byte 512"},
		{"lone zero block", cat(header("a.jpg", 0, '0'), make([]byte, blockSize), header("b.jpg", 0, '0')), ErrHeader, "lone zero block at byte 512"},
		{"empty name", cat(header("", 0, '0'), zeros), ErrHeader, "empty name"},
		{"pax then the end", cat(header("p", 0, 'x'), zeros), ErrTruncated, "after a pax or GNU entry"},
		{"long name then nothing", cat(header("p", 6, 'L'), pad("a.jpg\x00")), ErrTruncated, "after a pax or GNU entry"},
		{"empty long name", cat(header("p", 1, 'L'), pad("\x00"), header("a.jpg", 0, '0'), zeros), ErrHeader, "long name at byte 0 is empty"},
		{"pax record without length", cat(header("p", 8, 'x'), pad("path=a\n\n"), header("a", 0, '0'), zeros), ErrHeader, "no length"},
		{"pax record too long", cat(header("p", 11, 'x'), pad("12 path=ab\n"), header("a", 0, '0'), zeros), ErrHeader, "bad length"},
		{"pax record not ending in a newline", cat(header("p", 11, 'x'), pad("11 path=abx"), header("a", 0, '0'), zeros), ErrHeader, "bad length"},
		{"pax record without key", cat(header("p", 8, 'x'), pad("8 =abcd\n"), header("a", 0, '0'), zeros), ErrHeader, "no key"},
		{"pax bad size", cat(paxEntry(paxRecord("size", "-12")), header("a", 0, '0'), zeros), ErrHeader, "pax size"},
		{"pax empty path", cat(header("p", 8, 'x'), pad("8 path=\n"), header("a", 0, '0'), zeros), ErrHeader, "pax path"},
		{"pax size past the object", cat(paxEntry(paxRecord("size", "1000000")), header("a.jpg", 0, '0'), zeros), ErrTruncated, "1000000 bytes"},
		{"pax sparse", cat(paxEntry(paxRecord("GNU.sparse.major", "1")), header("a", 0, '0'), zeros), ErrUnsupported, "GNU.sparse.major"},
		{"GNU sparse", cat(header("a", 0, 'S'), zeros), ErrUnsupported, "sparse"},
		{"duplicate field", tarOf(t, tar.FormatPAX, entry{name: "x.jpg", data: "1"}, entry{name: "x.jpg", data: "2"}), ErrSample, `sample "x" has two "jpg" members, the second at byte 1536`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Index(tt.b)
			if !errors.Is(err, tt.want) || s != nil {
				t.Fatalf("Index = %v, %v; want %v", s, err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("error %q does not say %q", err, tt.text)
			}
		})
	}
}

func TestIndex(t *testing.T) {
	signed := header("\xe9.jpg", 0, '0')
	copy(signed[offChecksum:offChecksum+8], "        ")
	sum := 0
	for _, c := range signed {
		sum += int(int8(c))
	}
	copy(signed[offChecksum:], fmt.Sprintf("%06o\x00 ", sum))
	base256 := header("b.bin", 0, '0')
	copy(base256[offSize:offSize+12], "\x80\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05")
	fixSum(base256)
	prefixed := header("x.cls", 1, '0')
	copy(prefixed[offPrefix:], "some/dir")
	fixSum(prefixed)
	gnuPrefix := header("y.cls", 1, '0')
	copy(gnuPrefix[offMagic:], "ustar  \x00")
	copy(gnuPrefix[offPrefix:], "atime")
	fixSum(gnuPrefix)
	tests := []struct {
		name string
		b    []byte
		want []Member
	}{
		{"empty object", nil, nil},
		{"only the end", zeros, nil},
		{"one zero block", make([]byte, blockSize), nil},
		{"no end blocks", cat(header("a.jpg", 2, '0'), pad("ab")), []Member{{"a.jpg", 512, 2}}},
		{"padding after the end", cat(header("a.jpg", 0, '0'), zeros, []byte("junk")), []Member{{"a.jpg", 512, 0}}},
		{"signed checksum", cat(signed, zeros), []Member{{"\xe9.jpg", 512, 0}}},
		{"base-256 size", cat(base256, pad("12345"), zeros), []Member{{"b.bin", 512, 5}}},
		{"ustar prefix", cat(prefixed, pad("1"), zeros), []Member{{"some/dir/x.cls", 512, 1}}},
		{"GNU header ignores the prefix", cat(gnuPrefix, pad("1"), zeros), []Member{{"y.cls", 512, 1}}},
		{"old regular file and contiguous file", cat(header("a.txt", 1, 0), pad("a"), header("b.txt", 1, '7'), pad("b"), zeros),
			[]Member{{"a.txt", 512, 1}, {"b.txt", 1536, 1}}},
		{"link with a size field", cat(header("l", 700, '1'), header("a.txt", 1, '0'), pad("a"), zeros), []Member{{"a.txt", 1024, 1}}},
		{"link with a size past the object", cat(header("l", 1<<20, '2'), header("a.txt", 1, '0'), pad("a")), []Member{{"a.txt", 1024, 1}}},
		{"old-style directory", cat(header("d/", 512, 0), header("d/a.txt", 1, 0), pad("a")), []Member{{"d/a.txt", 1024, 1}}},
		{"directory skipped", cat(header("d/", 0, '5'), header("d/a.txt", 1, '0'), pad("a"), zeros), []Member{{"d/a.txt", 1024, 1}}},
		{"pax path and size", cat(paxEntry(paxRecord("path", "long/name.jpg"), paxRecord("size", "3"), paxRecord("mtime", "1.5")),
			header("short", 99, '0'), pad("abc"), zeros), []Member{{"long/name.jpg", 1536, 3}}},
		{"global pax header ignored", cat(header("g", 13, 'g'), pad(paxRecord("path", "nope")), header("a.jpg", 0, '0'), zeros), []Member{{"a.jpg", 1536, 0}}},
		{"GNU long name", cat(header("././@LongLink", 14, 'L'), pad("dir/long.jpg\x00\x00"), header("dir/lo", 1, '0'), pad("z"), zeros),
			[]Member{{"dir/long.jpg", 1536, 1}}},
		{"GNU long link name ignored", cat(header("././@LongLink", 5, 'K'), pad("targ\x00"), header("a.jpg", 0, '0'), zeros), []Member{{"a.jpg", 1536, 0}}},
		{"unknown type skipped with its data", cat(header("dump", 600, 'D'), pad(strings.Repeat("d", 600)), header("a.jpg", 0, '0'), zeros), []Member{{"a.jpg", 2048, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Index(tt.b)
			if err != nil {
				t.Fatalf("Index: %v", err)
			}
			if !slices.Equal(s.Members(), tt.want) {
				t.Errorf("members = %+v; want %+v", s.Members(), tt.want)
			}
		})
	}
}

func TestSamples(t *testing.T) {
	b := tarOf(t, tar.FormatGNU,
		entry{name: "a/x.jpg", data: "1"},
		entry{name: "a/x.seg.png", data: "22"},
		entry{name: "a/", flag: tar.TypeDir},
		entry{name: "README", data: "no key"},
		entry{name: "y.JPG", data: "333"},
		entry{name: "__meta__/k.json", data: "{}"},
		entry{name: "a/x.cls", data: "4"}, // the key again: a new sample
	)
	s, err := Index(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Members()) != 6 || s.NumSamples() != 3 {
		t.Fatalf("%d members, %d samples", len(s.Members()), s.NumSamples())
	}
	if got := s.Fields(); !slices.Equal(got, []string{"jpg", "seg.png", "JPG", "cls"}) {
		t.Errorf("Fields = %q", got)
	}
	x := s.Sample(0)
	if f, ok := x.Field("seg.png"); x.Key != "a/x" || len(x.Fields) != 2 || !ok || f.Size != 2 || string(b[f.Offset:f.Offset+f.Size]) != "22" {
		t.Errorf("sample 0 = %+v", x)
	}
	if _, ok := x.Field("cls"); ok {
		t.Error("sample 0 has a cls field")
	}
	if y, z := s.Sample(1), s.Sample(2); y.Key != "y" || z.Key != "a/x" || z.Fields[0].Name != "cls" {
		t.Errorf("samples 1 and 2 = %+v %+v", y, z)
	}
}

func TestSplitName(t *testing.T) {
	tests := []struct{ name, key, field string }{
		{"a/b/x001.seg.png", "a/b/x001", "seg.png"},
		{"x.jpg", "x", "jpg"},
		{"x.", "x", ""},
		{"a.b/c.d.e", "a.b/c", "d.e"},
		{"./x.jpg", "./x", "jpg"},
		{"__meta__.json", "__meta__", "json"},
		{"dir/__meta__/x.json", "dir/__meta__/x", "json"},
		{"README", "", ""},
		{"a/.hidden", "", ""},
		{"a.b/README", "", ""},
		{"__meta__/x.json", "", ""},
		{"____", "", ""},
		{"___.x", "___", "x"},
		{"", "", ""},
	}
	for _, tt := range tests {
		key, field, ok := SplitName(tt.name)
		if key != tt.key || field != tt.field || ok != (tt.key != "") {
			t.Errorf("SplitName(%q) = %q, %q, %v; want %q, %q", tt.name, key, field, ok, tt.key, tt.field)
		}
	}
}
