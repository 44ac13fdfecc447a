package sampler

import (
	"fmt"
	"testing"
)

// BenchmarkEpoch reads whole epochs of 64 shards of 8192 rows in each mode,
// events included, as the loader's dispatcher does: ns/sample is the
// sampler's share of the dispatcher's time per sample.
func BenchmarkEpoch(b *testing.B) {
	rows := make([]int, 64)
	for i := range rows {
		rows[i] = 8192
	}
	for _, mode := range []Mode{ShardWindow, Global, Sequential} {
		b.Run(fmt.Sprint(mode), func(b *testing.B) {
			n, ep := 0, 0
			for b.Loop() {
				e, err := NewEpoch(rows, Config{Mode: mode, Seed: 1}, ep)
				if err != nil {
					b.Fatal(err)
				}
				ep++
				for {
					if _, ok := e.Next(); !ok {
						break
					}
					n += len(e.Events())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64*8192), "ns/sample")
			_ = n
		})
	}
}

// BenchmarkNewEpoch measures building an epoch's order alone.
func BenchmarkNewEpoch(b *testing.B) {
	rows := make([]int, 64)
	for i := range rows {
		rows[i] = 8192
	}
	for _, mode := range []Mode{ShardWindow, Global} {
		b.Run(fmt.Sprint(mode), func(b *testing.B) {
			ep := 0
			for b.Loop() {
				if _, err := NewEpoch(rows, Config{Mode: mode, Seed: 1}, ep); err != nil {
					b.Fatal(err)
				}
				ep++
			}
		})
	}
}

// BenchmarkPartition measures Node mode's partition of 100,000 shards of
// uneven sizes across 1024 nodes: every NewEpoch of the mode computes it.
func BenchmarkPartition(b *testing.B) {
	rows := make([]int, 100_000)
	for i := range rows {
		rows[i] = 1000 + i%977
	}
	for b.Loop() {
		if _, err := Partition(rows, 1024, 1); err != nil {
			b.Fatal(err)
		}
	}
}
