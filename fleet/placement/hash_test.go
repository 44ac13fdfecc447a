package placement

import (
	"math"
	"testing"
)

func TestUnitOpenInterval(t *testing.T) {
	for _, x := range []uint64{0, 1, 1 << 51, 1<<52 - 2, 1<<52 - 1} {
		u := unit(x)
		if !(u > 0 && u < 1) {
			t.Errorf("unit(%d) = %v; want in (0, 1)", x, u)
		}
	}
	if unit(1<<52-1) == unit(1<<52-2) {
		t.Errorf("unit does not separate the two largest draws")
	}
	// The largest possible draw: mix output all ones.
	if x := uint64(math.MaxUint64) >> 12; unit(x) >= 1 {
		t.Errorf("unit(%d) = %v; want < 1", x, unit(x))
	}
}

func TestNegLnUnit(t *testing.T) {
	xs := []uint64{0, 1, 2, 3, 1 << 20, 1<<51 - 1, 1 << 51, 1<<52 - 2, 1<<52 - 1}
	for h := uint64(1); len(xs) < 100_000; h++ {
		xs = append(xs, mix(h)>>12)
	}
	for _, x := range xs {
		got := negLnUnit(x)
		want := -math.Log(unit(x))
		if !(got > 0) || math.IsInf(got, 0) {
			t.Fatalf("negLnUnit(%d) = %v; want positive and finite", x, got)
		}
		if rel := math.Abs(got-want) / want; rel > 1e-13 {
			t.Fatalf("negLnUnit(%d) = %v; math.Log gives %v (relative error %g)", x, got, want, rel)
		}
	}
}

func TestNegLnUnitPinned(t *testing.T) {
	// Bit patterns, so a change in the arithmetic (or a fused multiply-add
	// on some architecture) fails here rather than moving owners.
	tests := []struct {
		x    uint64
		want uint64
	}{
		{0, 0x40425e4f7b2737fa},         // u = 2^-53: 53 ln 2
		{1 << 51, 0x3fe62e42fefa39ed},   // u = 1/2 + 2^-53: ln 2 - 2^-52
		{1<<52 - 1, 0x3ca0000000000000}, // u = 1 - 2^-53: 2^-53
		{12345678901234, 0x401798e8f4d21bed},
	}
	for _, tt := range tests {
		if got := math.Float64bits(negLnUnit(tt.x)); got != tt.want {
			t.Errorf("negLnUnit(%d) bits = %#x; want %#x", tt.x, got, tt.want)
		}
	}
}
