package loader

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// TestCopyRows checks every copy path of the gather (word rows, small
// rows with prefetching, large rows, runs of consecutive rows) against a
// row-by-row copy, for random picks over several shards.
func TestCopyRows(t *testing.T) {
	for _, rs := range []int{1, 3, 4, 8, 24, 1 << 10, prefetchRowMax + 8} {
		const shards, rows, n = 5, 50, 64
		rng := rand.New(rand.NewPCG(uint64(rs), 1))
		var groups []*group
		for range shards {
			data := make([]byte, rows*rs)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			groups = append(groups, &group{arrays: []array.Array{{Data: data}}})
		}
		l := &Loader{rowSize: []int{rs}}
		l.ds.Specs = make([]Spec, 1)
		s := &slot{bufs: [][]byte{make([]byte, n*rs)}, shapes: [][]int{{0}}, batch: Batch{Arrays: make([]array.Array, 1)}}
		s.groups = append(s.groups, groups...)
		for i := 0; i < n; {
			g, row := rng.IntN(shards), rng.IntN(rows)
			run := 1 + rng.IntN(4) // sometimes a run of consecutive rows
			for k := 0; k < run && row+k < rows && i < n; k++ {
				s.picks = append(s.picks, pick{g: g, row: row + k})
				i++
			}
		}
		l.copyRows(s)
		got := s.batch.Arrays[0].Data
		for i, p := range s.picks {
			want := groups[p.g].arrays[0].Data[p.row*rs : (p.row+1)*rs]
			if !bytes.Equal(got[i*rs:(i+1)*rs], want) {
				t.Fatalf("row size %d: sample %d (shard %d row %d) differs", rs, i, p.g, p.row)
			}
		}
		if s.shapes[0][0] != n || len(got) != n*rs {
			t.Fatalf("row size %d: shape %v, %d bytes", rs, s.shapes[0], len(got))
		}
	}
}

// TestCopyRowsArrays copies a batch of several arrays at once, large and
// small rows mixed in any order (copyRows copies the small ones last),
// and checks each against a row-by-row copy.
func TestCopyRowsArrays(t *testing.T) {
	sizes := []int{8, 1 << 10, 24, 4, 64, 65}
	const shards, rows, n = 4, 40, 50
	rng := rand.New(rand.NewPCG(3, 3))
	l := &Loader{rowSize: sizes}
	l.ds.Specs = make([]Spec, len(sizes))
	s := &slot{batch: Batch{Arrays: make([]array.Array, len(sizes))}}
	for _, rs := range sizes {
		s.bufs = append(s.bufs, make([]byte, n*rs))
		s.shapes = append(s.shapes, []int{0})
	}
	for range shards {
		g := &group{}
		for _, rs := range sizes {
			data := make([]byte, rows*rs)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			g.arrays = append(g.arrays, array.Array{Data: data})
		}
		s.groups = append(s.groups, g)
	}
	for range n {
		s.picks = append(s.picks, pick{g: rng.IntN(shards), row: rng.IntN(rows)})
	}
	l.copyRows(s)
	for j, rs := range sizes {
		got := s.batch.Arrays[j].Data
		for i, p := range s.picks {
			want := s.groups[p.g].arrays[j].Data[p.row*rs : (p.row+1)*rs]
			if !bytes.Equal(got[i*rs:(i+1)*rs], want) {
				t.Fatalf("array %d (rows of %d bytes): sample %d differs", j, rs, i)
			}
		}
		if s.shapes[j][0] != n {
			t.Fatalf("array %d: shape %v", j, s.shapes[j])
		}
	}
}
