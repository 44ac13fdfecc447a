package sampler

import (
	"math/rand/v2"
	"sort"
	"testing"
)

// TestGroupIndex checks groupIndex.of against a binary search over the
// offsets for every id, on datasets of even, uneven, tiny and empty groups.
func TestGroupIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	cases := [][]int{
		{1}, {5}, {0, 3}, {3, 0}, {0, 0, 1, 0},
		{8192, 8192, 8192, 8192},
		{1, 1000, 1, 0, 0, 7, 64, 1},
	}
	for range 50 {
		rows := make([]int, 1+rng.IntN(300))
		for i := range rows {
			switch rng.IntN(4) {
			case 0:
				rows[i] = 0
			case 1:
				rows[i] = 1 + rng.IntN(3)
			default:
				rows[i] = rng.IntN(5000)
			}
		}
		rows[rng.IntN(len(rows))]++ // at least one sample
		cases = append(cases, rows)
	}
	for _, rows := range cases {
		off, err := Offsets(rows)
		if err != nil {
			t.Fatal(err)
		}
		x := newGroupIndex(off)
		for id := range off[len(rows)] {
			want := sort.Search(len(rows), func(g int) bool { return off[g+1] > id })
			if got := x.of(id); got != want {
				t.Fatalf("rows %v: group of id %d = %d; want %d", rows, id, got, want)
			}
		}
	}
}
