package plan

import (
	"math/rand/v2"
	"testing"
)

// optimalHits returns the most hits any demand-filled cache of capacity
// unit-size entries can score on trace (each miss inserts its key and, if
// full, evicts one entry of the caller's choosing), by exhaustive search
// with memoisation over (position, resident set). Keys must be < 16.
func optimalHits(trace []int, capacity int) int {
	type state struct {
		i   int
		set uint16
	}
	memo := make(map[state]int)
	var best func(i int, set uint16) int
	best = func(i int, set uint16) int {
		if i == len(trace) {
			return 0
		}
		st := state{i, set}
		if v, ok := memo[st]; ok {
			return v
		}
		bit := uint16(1) << trace[i]
		var v int
		switch {
		case set&bit != 0:
			v = 1 + best(i+1, set)
		case popcount(set) < capacity:
			v = best(i+1, set|bit)
		default:
			for k := range 16 {
				if b := uint16(1) << k; set&b != 0 {
					v = max(v, best(i+1, set&^b|bit))
				}
			}
		}
		memo[st] = v
		return v
	}
	return best(0, 0)
}

func popcount(x uint16) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// TestBeladyIsOptimal checks the clairvoyant policy against brute force on
// random small traces, with the cache at half the key set.
func TestBeladyIsOptimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		keys := 4 + rng.IntN(5) // 4..8 keys
		capacity := keys / 2
		trace := make([]int, 8+rng.IntN(9))
		for i := range trace {
			trace[i] = rng.IntN(keys)
		}
		got := Simulate(trace, nil, int64(capacity), Belady)
		want := optimalHits(trace, capacity)
		if got.Hits != want {
			t.Fatalf("trial %d: trace %v, capacity %d: Belady hits = %d; optimal = %d",
				trial, trace, capacity, got.Hits, want)
		}
		if lru := Simulate(trace, nil, int64(capacity), LRU); lru.Hits > want {
			t.Fatalf("trial %d: LRU hits %d beat the optimum %d: brute force is wrong", trial, lru.Hits, want)
		}
		if got.Hits+got.Misses != len(trace) {
			t.Fatalf("trial %d: %d hits + %d misses for %d accesses", trial, got.Hits, got.Misses, len(trace))
		}
	}
}

// epochTrace returns the shard order of epochs random permutations of
// shards: what a shuffling loader reads, epoch after epoch.
func epochTrace(shards, epochs int, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, 0))
	var trace []int
	for range epochs {
		trace = append(trace, rng.Perm(shards)...)
	}
	return trace
}

func TestBeladyBeatsLRUOnEpochs(t *testing.T) {
	trace := epochTrace(40, 10, 7)
	capacity := int64(20) // half the dataset
	lru := Simulate(trace, nil, capacity, LRU)
	bel := Simulate(trace, nil, capacity, Belady)
	t.Logf("40 shards x 10 epochs, cache of 20: LRU %d hits (%.2f), Belady %d hits (%.2f)",
		lru.Hits, lru.HitRatio(), bel.Hits, bel.HitRatio())
	if bel.Hits <= lru.Hits {
		t.Errorf("Belady hits = %d; want more than LRU's %d", bel.Hits, lru.Hits)
	}
	// On a cyclic trace LRU keeps exactly the wrong half; the clairvoyant
	// cache keeps about half of each next epoch.
	if bel.HitRatio() < 0.35 {
		t.Errorf("Belady hit ratio %.2f; want at least 0.35", bel.HitRatio())
	}
}

func TestSimulateSizes(t *testing.T) {
	size := func(k string) int64 { return map[string]int64{"big": 10, "a": 3, "b": 3, "c": 4, "huge": 100}[k] }
	trace := []string{"a", "b", "c", "a", "huge", "big", "a", "b", "huge"}
	r := Simulate(trace, size, 10, Belady)
	// a,b,c miss (10 bytes); a hits; huge never fits; big evicts all three;
	// a and b miss again, evicting big; huge misses.
	want := Result{Hits: 1, Misses: 8, HitBytes: 3, MissBytes: 3 + 3 + 4 + 100 + 10 + 3 + 3 + 100, Evictions: 4}
	if r != want {
		t.Errorf("Simulate = %+v; want %+v", r, want)
	}
	if got := (Result{}).HitRatio(); got != 0 {
		t.Errorf("empty HitRatio = %v", got)
	}
	if LRU.String() != "lru" || Belady.String() != "belady" || Policy(7).String() != "invalid" {
		t.Errorf("Policy strings wrong")
	}
}
