package plan

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSelectMatchesOrder checks Select against sorting everything.
func TestSelectMatchesOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 500 {
		x := NewIndex[int]()
		keys := 5 + rng.IntN(40)
		for p := range 1 + rng.IntN(3) {
			plan := make([]int, rng.IntN(60))
			for i := range plan {
				plan[i] = rng.IntN(keys)
			}
			x.Announce(string(rune('a'+p)), plan)
			x.Advance(string(rune('a'+p)), rng.IntN(len(plan)+1))
		}
		cands := make([]Candidate[int], rng.IntN(keys))
		ages := rng.Perm(len(cands))
		for i := range cands {
			cands[i] = Candidate[int]{Key: rng.IntN(keys), Size: 1 + rng.Int64N(5), LastUse: int64(ages[i]), Tag: i,
				Due: rng.IntN(4) == 0, Keep: rng.IntN(3) == 0}
		}
		need := rng.Int64N(30)
		farther := rng.IntN(20) - 1
		ref := slices.Clone(cands)
		x.Order(ref)
		wantN, wantFreed := Victims(ref, need, farther)
		got := slices.Clone(cands)
		n, freed := x.Select(got, need, farther)
		if n != wantN || freed != wantFreed {
			t.Fatalf("trial %d: Select = %d, %d; Order+Victims = %d, %d", trial, n, freed, wantN, wantFreed)
		}
		for i := range n {
			if got[i].Tag != ref[i].Tag || got[i].Next != ref[i].Next {
				t.Fatalf("trial %d: victim %d is %+v; want %+v", trial, i, got[i], ref[i])
			}
		}
		if len(got) != len(cands) {
			t.Fatalf("Select changed the length")
		}
	}
}

// BenchmarkSelect is BenchmarkOrder's eviction done by Select, freeing
// four entries.
func BenchmarkSelect(b *testing.B) {
	x := NewIndex[int]()
	for p, seed := range []uint64{1, 2} {
		x.Announce(string(rune('a'+p)), epochTrace(10_000, 10, seed))
	}
	cands := make([]Candidate[int], 10_000)
	b.ResetTimer()
	for range b.N {
		for i := range cands {
			cands[i] = Candidate[int]{Key: i, Size: 1, LastUse: int64(i)}
		}
		x.Select(cands, 4, -1)
	}
}
