package loader

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// mapShards maps n files of size bytes each, made in /dev/shm, as the shm
// tier's shards are.
func mapShards(b *testing.B, n, size int) [][]byte {
	dir := shmDir(b)
	srcs := make([][]byte, n)
	data := make([]byte, size)
	for j := range data {
		data[j] = byte(j * 7)
	}
	for i := range srcs {
		path := filepath.Join(dir, fmt.Sprintf("s%d", i))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { unix.Munmap(m) })
		srcs[i] = m
	}
	return srcs
}

// batches is how many batches of picks the gather benchmarks cycle through.
const batches = 4096

// randomPicks returns n picks of a random row of a random shard, the same
// ones on every call.
func randomPicks(n, shards, rows int) []Pick {
	rng := rand.New(rand.NewPCG(1, 2))
	picks := make([]Pick, n)
	for i := range picks {
		picks[i] = Pick{Shard: rng.IntN(shards), Row: rng.IntN(rows)}
	}
	return picks
}

// BenchmarkCopyWords gathers batches of 256 random 8-byte labels from 64
// shards of 8192, as the loader does for y arrays.
func BenchmarkCopyWords(b *testing.B) {
	const shards, rows, batch = 64, 8192, 256
	srcs := mapShards(b, shards, rows*8)
	picks := randomPicks(batches*batch, shards, rows)
	dst := make([]byte, batch*8)
	i := 0
	for b.Loop() {
		copyWords[uint64](picks[i*batch:(i+1)*batch], srcs, dst)
		i = (i + 1) % batches
	}
}

// BenchmarkCopyRuns gathers batches of 256 random rows (256 B, 1 KiB and 4
// KiB) from 64 shards of 8 MiB mapped from files in /dev/shm, as the
// loader's workers do under the global shuffle, on one goroutine: MB/s is
// the copy rate of one core. It is what prefetchLead was tuned on.
func BenchmarkCopyRuns(b *testing.B) {
	for _, rs := range []int{256, 1024, 4096} {
		b.Run(fmt.Sprint(rs), func(b *testing.B) { benchCopyRuns(b, rs) })
	}
}

// benchCopyRuns runs BenchmarkCopyRuns for rows of rs bytes.
func benchCopyRuns(b *testing.B, rs int) {
	const shards, shardBytes, batch = 64, 8 << 20, 256
	srcs := mapShards(b, shards, shardBytes)
	rows := shardBytes / rs
	picks := randomPicks(batches*batch, shards, rows)
	dst := make([]byte, batch*rs)
	b.SetBytes(int64(batch * rs))
	i := 0
	for b.Loop() {
		copyRuns(picks[i*batch:(i+1)*batch], srcs, rs, dst)
		i = (i + 1) % batches
	}
}

// BenchmarkCopyRunsParallel is BenchmarkCopyRuns's 1 KiB case on every P
// at once, each goroutine with a buffer of its own: MB/s is all of them
// together, the ceiling of the loader's workers gathering side by side on
// this machine's memory.
func BenchmarkCopyRunsParallel(b *testing.B) {
	const shards, shardBytes, rs, batch = 64, 8 << 20, 1 << 10, 256
	srcs := mapShards(b, shards, shardBytes)
	rows := shardBytes / rs
	picks := randomPicks(batches*batch, shards, rows)
	b.SetBytes(batch * rs)
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]byte, batch*rs)
		i := rand.IntN(batches)
		for pb.Next() {
			copyRuns(picks[i*batch:(i+1)*batch], srcs, rs, dst)
			i = (i + 1) % batches
		}
	})
}

// BenchmarkCopyBatch copies batches of 256 random samples of a 1 KiB row
// and an 8-byte label, each from 64 mapped shm shards, through copyRows,
// as a worker does under the global shuffle: MB/s is one core's rate.
func BenchmarkCopyBatch(b *testing.B) {
	const shards, rows, rs, batch = 64, 8192, 1 << 10, 256
	xs, ys := mapShards(b, shards, rows*rs), mapShards(b, shards, rows*8)
	r := &rowReader{rowSize: []int{rs, 8}, ds: Dataset{Specs: make([]Spec, 2)}}
	g := &Gather{Buffers: [][]byte{make([]byte, batch*rs), make([]byte, batch*8)}, Shapes: [][]int{{0}, {0}},
		Batch: &Batch{Arrays: make([]array.Array, 2)}}
	for k := range shards {
		g.Shards = append(g.Shards, &rowShard{arrays: []array.Array{{Data: xs[k]}, {Data: ys[k]}}})
	}
	picks := randomPicks(batches*batch, shards, rows)
	b.SetBytes(batch * (rs + 8))
	i := 0
	for b.Loop() {
		g.Picks = picks[i*batch : (i+1)*batch]
		r.copyRows(g)
		i = (i + 1) % batches
	}
}
