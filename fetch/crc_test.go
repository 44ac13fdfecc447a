package fetch

import (
	"hash/crc32"
	"testing"

	"github.com/cacheagent/cacheagent/bench/emulator"
)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func TestCRC32CCombine(t *testing.T) {
	data := emulator.Pattern(7, 3<<20+12345)
	cases := []struct {
		name       string
		lenA, lenB int
	}{
		{"both empty", 0, 0},
		{"empty A", 0, 100},
		{"empty B", 100, 0},
		{"one byte each", 1, 1},
		{"odd lengths", 7, 13},
		{"word boundary", 8, 4096},
		{"large B", 5, 3 << 20},
		{"large A", 3 << 20, 12345},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := data[:tc.lenA], data[tc.lenA:tc.lenA+tc.lenB]
			got := crc32cCombine(crc32c(a), crc32c(b), int64(len(b)))
			want := crc32c(data[:tc.lenA+tc.lenB])
			if got != want {
				t.Errorf("crc32cCombine(|A|=%d, |B|=%d) = %08x; want %08x", tc.lenA, tc.lenB, got, want)
			}
		})
	}
}

// TestCRC32CCombineMany folds many uneven parts, including empty ones, the
// way Fetch folds slices.
func TestCRC32CCombineMany(t *testing.T) {
	data := emulator.Pattern(11, 1<<20)
	sizes := []int{0, 1, 0, 4095, 65536, 0, 3, 300000, 7}
	var crc uint32
	off := 0
	for _, n := range sizes {
		part := data[off : off+n]
		crc = crc32cCombine(crc, crc32c(part), int64(n))
		off += n
	}
	crc = crc32cCombine(crc, crc32c(data[off:]), int64(len(data)-off))
	if want := crc32c(data); crc != want {
		t.Errorf("combined CRC = %08x; want %08x", crc, want)
	}
}

// TestXPowBytesHuge checks the square-and-multiply path for lengths far
// beyond any test buffer against repeated combination.
func TestXPowBytesHuge(t *testing.T) {
	// x^(8·2^40) computed two ways: directly, and as (x^(8·2^39))².
	half := xPowBytes(1 << 39)
	if got, want := xPowBytes(1<<40), gfMul(half, half); got != want {
		t.Errorf("xPowBytes(2^40) = %08x; want %08x", got, want)
	}
	if got, want := xPowBytes(0), uint32(1)<<31; got != want {
		t.Errorf("xPowBytes(0) = %08x; want %08x (the polynomial 1)", got, want)
	}
}

func BenchmarkCRC32CCombine(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		crc32cCombine(uint32(i), 0xdeadbeef, 32<<20+int64(i&1023))
	}
}
