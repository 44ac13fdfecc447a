package plan

import "testing"

// BenchmarkPolicy replays a shuffling loader's shard trace (64 shards, a
// fresh random order every epoch, 10 epochs) through a cache holding half
// the shards, and reports both policies' hit ratios and their ratio.
func BenchmarkPolicy(b *testing.B) {
	trace := epochTrace(64, 10, 1)
	var lru, bel Result
	for range b.N {
		lru = Simulate(trace, nil, 32, LRU)
		bel = Simulate(trace, nil, 32, Belady)
	}
	b.ReportMetric(lru.HitRatio(), "lru-hit")
	b.ReportMetric(bel.HitRatio(), "belady-hit")
	b.ReportMetric(bel.HitRatio()/lru.HitRatio(), "belady/lru")
}

// BenchmarkOrder measures ranking 10,000 eviction candidates against two
// plans of 100,000 positions: the cost of one eviction in a large cache.
func BenchmarkOrder(b *testing.B) {
	x := NewIndex[int]()
	for p, seed := range []uint64{1, 2} {
		keys := epochTrace(10_000, 10, seed)
		x.Announce(string(rune('a'+p)), keys)
	}
	cands := make([]Candidate[int], 10_000)
	b.ResetTimer()
	for range b.N {
		for i := range cands {
			cands[i] = Candidate[int]{Key: i, Size: 1, LastUse: int64(i)}
		}
		x.Order(cands)
	}
}
