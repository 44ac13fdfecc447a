package cputime

import "testing"

func TestSelfGrowsWithWork(t *testing.T) {
	before := Self()
	if before <= 0 {
		t.Fatalf("Self() = %v at start; want a positive CPU time", before)
	}
	x := 0
	for i := range 50_000_000 {
		x ^= i
	}
	_ = x
	if after := Self(); after < before {
		t.Errorf("Self() went back from %v to %v", before, after)
	}
}
