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
		r := &rowReader{rowSize: []int{rs}, ds: Dataset{Specs: make([]Spec, 1)}}
		g := &Gather{Buffers: [][]byte{make([]byte, n*rs)}, Shapes: [][]int{{0}}, Batch: &Batch{Arrays: make([]array.Array, 1)}}
		for range shards {
			data := make([]byte, rows*rs)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			g.Shards = append(g.Shards, &rowShard{arrays: []array.Array{{Data: data}}})
		}
		for i := 0; i < n; {
			sh, row := rng.IntN(shards), rng.IntN(rows)
			run := 1 + rng.IntN(4) // sometimes a run of consecutive rows
			for k := 0; k < run && row+k < rows && i < n; k++ {
				g.Picks = append(g.Picks, Pick{Shard: sh, Row: row + k})
				i++
			}
		}
		r.copyRows(g)
		got := g.Batch.Arrays[0].Data
		for i, p := range g.Picks {
			want := g.Shards[p.Shard].(*rowShard).arrays[0].Data[p.Row*rs : (p.Row+1)*rs]
			if !bytes.Equal(got[i*rs:(i+1)*rs], want) {
				t.Fatalf("row size %d: sample %d (shard %d row %d) differs", rs, i, p.Shard, p.Row)
			}
		}
		if g.Shapes[0][0] != n || len(got) != n*rs || g.Copied != int64(n*rs) {
			t.Fatalf("row size %d: shape %v, %d bytes, %d copied", rs, g.Shapes[0], len(got), g.Copied)
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
	r := &rowReader{rowSize: sizes, ds: Dataset{Specs: make([]Spec, len(sizes))}}
	g := &Gather{Batch: &Batch{Arrays: make([]array.Array, len(sizes))}}
	for _, rs := range sizes {
		g.Buffers = append(g.Buffers, make([]byte, n*rs))
		g.Shapes = append(g.Shapes, []int{0})
	}
	for range shards {
		sh := &rowShard{}
		for _, rs := range sizes {
			data := make([]byte, rows*rs)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			sh.arrays = append(sh.arrays, array.Array{Data: data})
		}
		g.Shards = append(g.Shards, sh)
	}
	for range n {
		g.Picks = append(g.Picks, Pick{Shard: rng.IntN(shards), Row: rng.IntN(rows)})
	}
	r.copyRows(g)
	for j, rs := range sizes {
		got := g.Batch.Arrays[j].Data
		for i, p := range g.Picks {
			want := g.Shards[p.Shard].(*rowShard).arrays[j].Data[p.Row*rs : (p.Row+1)*rs]
			if !bytes.Equal(got[i*rs:(i+1)*rs], want) {
				t.Fatalf("array %d (rows of %d bytes): sample %d differs", j, rs, i)
			}
		}
		if g.Shapes[j][0] != n {
			t.Fatalf("array %d: shape %v", j, g.Shapes[j])
		}
	}
}
