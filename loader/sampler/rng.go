package sampler

import (
	"math/bits"
	"math/rand/v2"
)

// Streams of random numbers, one per use, so that changing how one is
// consumed never shifts another. Their values are part of the output
// contract: changing them changes every shuffle.
const (
	streamShards = 1 // the shard order (ShardWindow)
	streamRows   = 2 // a shard's row order (ShardWindow), keyed by shard
	streamWindow = 3 // the draws from the window (ShardWindow)
	streamGlobal = 4 // the permutation of every sample (Global)
	streamNodes  = 5 // the shard order before partitioning (Node), keyed by the node count
)

// mix is SplitMix64's finaliser: a bijection that spreads nearby inputs
// (epoch 0, 1, 2 …) over all 64 bits.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// newPCG returns the generator for one stream of one epoch: PCG-DXSM
// (math/rand/v2.PCG, whose output is fixed by its algorithm) seeded with
// (seed, mix(mix(epoch) ^ stream<<56 ^ key)).
func newPCG(seed uint64, epoch int, stream, key uint64) *rand.PCG {
	return rand.NewPCG(seed, mix(mix(uint64(epoch))^stream<<56^key))
}

// below returns a uniform integer in [0, n), n > 0, by Lemire's
// multiply-and-reject method. It is written here rather than taken from
// math/rand/v2 so that the sample order depends only on PCG's outputs.
func below(src *rand.PCG, n uint64) uint64 {
	hi, lo := bits.Mul64(src.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(src.Uint64(), n)
		}
	}
	return hi
}

// shuffle permutes s uniformly (Fisher–Yates, from the end).
func shuffle[T any](src *rand.PCG, s []T) {
	for i := len(s) - 1; i > 0; i-- {
		j := below(src, uint64(i+1))
		s[i], s[j] = s[j], s[i]
	}
}

// fenwick is a binary indexed tree of counts: add and find in O(log n).
type fenwick []int64

// add adds d to the count at i.
func (f fenwick) add(i int, d int64) {
	for i++; i <= len(f); i += i & -i {
		f[i-1] += d
	}
}

// find returns the index i such that the counts before i sum to at most r
// and through i to more than r: the slot holding the r-th unit, counting
// from 0. r must be below the total.
func (f fenwick) find(r int64) int {
	pos := 0
	for step := 1 << (bits.Len(uint(len(f))) - 1); step > 0; step >>= 1 {
		if next := pos + step; next <= len(f) && f[next-1] <= r {
			pos = next
			r -= f[next-1]
		}
	}
	return pos
}
