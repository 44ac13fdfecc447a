package tier

import (
	"errors"
	"math"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	tests := []record{
		{},
		{gen: 1, size: 0, blocks: 0},
		{gen: 1700000000123456, size: 1 << 40, blocks: 1<<40 + 4096, crc: 0xdeadbeef, hasCRC: true,
			updated: 1700000000000000000, checked: 1700000000000000001, access: 1700000000000000002},
		{gen: math.MaxInt64, size: 1 << 62, blocks: 1 << 62, pinned: true, crc: 0, hasCRC: true},
		{gen: -5, updated: -1, checked: math.MinInt64, access: math.MaxInt64, pinned: true},
		{gen: 9, size: 10, blocks: 4096, inShm: true},
		{gen: 9, size: 10, blocks: 4096, pinned: true, hotPin: true, inShm: true},
		{gen: 9, size: 100 << 10, blocks: 100 << 10, crc: 7, hasCRC: true, packed: true, seg: 3, off: 1 << 30},
		{gen: 9, size: 1, blocks: 4096, packed: true, seg: math.MaxUint64, off: 0},
	}
	for _, r := range tests {
		b := appendRecord(nil, r)
		got, err := decodeRecord(b)
		if err != nil || got != r {
			t.Errorf("decodeRecord(appendRecord(%+v)) = %+v, %v; want the same, nil", r, got, err)
		}
	}
	if n := len(appendRecord(nil, tests[2])); n > 56 {
		t.Errorf("a typical record takes %d bytes; want it compact (≤ 56)", n)
	}
}

func TestDecodeRecordRejectsGarbage(t *testing.T) {
	good := appendRecord(nil, record{gen: 7, size: 100, blocks: 4096, crc: 1, hasCRC: true, access: 9})
	tests := map[string][]byte{
		"empty":          nil,
		"unknown flag":   append([]byte{0x80}, good[1:]...),
		"hot pin alone":  append([]byte{good[0] | flagHotPin}, good[1:]...),
		"truncated":      good[:len(good)-1],
		"truncated crc":  good[:6],
		"trailing bytes": append(append([]byte{}, good...), 0),
		"huge size":      {0, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0},
		"unaligned offset": appendRecord(nil, record{gen: 7, size: 100, blocks: 4096, packed: true, seg: 1,
			off: 4097}),
		"packed, no place": append([]byte{good[0] | flagPacked}, good[1:]...),
	}
	for name, b := range tests {
		if _, err := decodeRecord(b); !errors.Is(err, errBadRecord) {
			t.Errorf("%s: decodeRecord(%x) = %v; want errBadRecord", name, b, err)
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendRecord(nil, record{gen: 7, size: 100, blocks: 4096, crc: 1, hasCRC: true, access: 9}))
	f.Add([]byte{flagPinned, 0, 0, 0, 0, 0, 0})
	f.Add(appendRecord(nil, record{gen: 7, size: 100, blocks: 4096, packed: true, seg: 2, off: 8192}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil {
			return
		}
		if r.size < 0 || r.blocks < 0 || r.off < 0 || r.off%pageSize != 0 {
			t.Fatalf("decodeRecord(%x) = %+v: negative size", b, r)
		}
		if again, err := decodeRecord(appendRecord(nil, r)); err != nil || again != r {
			t.Fatalf("re-encoding %+v gives %+v, %v", r, again, err)
		}
	})
}

func TestIDsAndKeys(t *testing.T) {
	a, b := idOf("bkt", "x", 1), idOf("bkt", "x", 2)
	if a == b || idOf("bk", "tx", 1) == a || idOf("bkt", "x", 1) != a {
		t.Errorf("idOf does not separate (bucket, name, generation)")
	}
	s := a.String()
	if got, ok := parseID(s); !ok || got != a {
		t.Errorf("parseID(%s) = %v, %v; want %v, true", s, got, ok, a)
	}
	for _, bad := range []string{"", "xyz", s[:31], s + "0", "ABCDEF0123456789ABCDEF0123456789", s[:30] + "zz"} {
		if _, ok := parseID(bad); ok {
			t.Errorf("parseID(%q) = ok; want rejected", bad)
		}
	}
	if bkt, name, ok := splitKey(indexKey("bkt", "a\x00b")); !ok || bkt != "bkt" || name != "a\x00b" {
		t.Errorf("splitKey = %q, %q, %v; want bkt, a\\x00b, true", bkt, name, ok)
	}
}
