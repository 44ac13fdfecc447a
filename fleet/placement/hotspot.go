package placement

import "fmt"

// HotSpot describes one object read by every node of a fleet at once, with
// its chunks striped over their owners. The time model: the object is
// already cached by its owners; every node reads all of it; a node reads its
// own chunks locally and the rest from their owners; each node's upload and
// download are each limited to the same peer rate r_p, and nothing else
// limits. The busiest owner must upload its chunks to the N-1 other nodes,
// and the node owning least must download the rest, so the read completes in
//
//	T = max(max_o owned_o * (N-1), S - min_o owned_o) / r_p
//
// for an object of S bytes, against S/r_p for a node reading alone. With
// perfect striping T = (N-1)/N * S/r_p; with one owner (whole-object
// placement) T = (N-1) * S/r_p.
type HotSpot struct {
	// Nodes is the fleet size N.
	Nodes int
	// ObjectSize is S, in bytes.
	ObjectSize int64
	// ChunkSize is the placement unit, in bytes.
	ChunkSize int64
	// Chunks is the object's chunk count.
	Chunks int
	// Owners is the number of distinct nodes owning at least one chunk: at
	// most min(N, Chunks).
	Owners int
	// MaxOverMean is the busiest owner's bytes over the mean S/N.
	MaxOverMean float64
	// Time is T in units of S/r_p, the model above. The goal is at most 1.5.
	Time float64
}

// SimulateHotSpot returns the [HotSpot] of one object of objectSize bytes,
// cut into chunks of chunkSize bytes, on a fleet of nodes equal-weight
// members named as in [Simulate]; seed picks its generation. It fails with
// [ErrBadConfig] for fewer than 2 nodes or sizes that are not positive.
func SimulateHotSpot(nodes int, objectSize, chunkSize int64, seed uint64) (HotSpot, error) {
	if nodes < 2 {
		return HotSpot{}, fmt.Errorf("placement: hot spot on %d nodes, want at least 2: %w", nodes, ErrBadConfig)
	}
	t, err := New(simNodes(nodes, 1))
	if err != nil {
		return HotSpot{}, err
	}
	return hotSpot(t, objectSize, chunkSize, seed)
}

// hotSpot computes the HotSpot of one object on t.
func hotSpot(t *Table, objectSize, chunkSize int64, seed uint64) (HotSpot, error) {
	if objectSize <= 0 || chunkSize <= 0 {
		return HotSpot{}, fmt.Errorf("placement: hot spot of %d bytes in chunks of %d: %w", objectSize, chunkSize, ErrBadConfig)
	}
	n := t.Len()
	hs := HotSpot{Nodes: n, ObjectSize: objectSize, ChunkSize: chunkSize, Chunks: Chunks(objectSize, chunkSize)}
	owned := make([]int64, n)
	k := Key{Bucket: "sim", Object: "hot-object", Generation: simGeneration(seed, -1)}
	for c := range hs.Chunks {
		k.Chunk = c
		_, size := ChunkRange(objectSize, chunkSize, c)
		owned[t.OwnerIndex(k)] += size
	}
	minOwned, maxOwned := objectSize, int64(0)
	for _, b := range owned {
		if b > 0 {
			hs.Owners++
		}
		minOwned, maxOwned = min(minOwned, b), max(maxOwned, b)
	}
	s := float64(objectSize)
	hs.MaxOverMean = float64(maxOwned) * float64(n) / s
	hs.Time = max(float64(maxOwned)*float64(n-1), s-float64(minOwned)) / s
	return hs, nil
}
