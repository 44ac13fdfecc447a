package sampler

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"
)

// Place returns Node mode's node count and rank's node from what a
// launcher knows: nodes if positive, else world/ranksPerNode (one node
// when ranksPerNode is not positive); node if not negative, else NodeOf
// (torchrun's numbering: rank = node*ranks-per-node + local rank). World
// 0 means 1. It fails with ErrConfig if the ranks cannot be shared evenly.
func Place(rank, world, ranksPerNode, nodes, node int) (int, int, error) {
	world = max(world, 1)
	if nodes <= 0 {
		switch {
		case ranksPerNode <= 0:
			nodes = 1
		case world%ranksPerNode != 0:
			return 0, 0, fmt.Errorf("%w: world of %d ranks is not a multiple of %d ranks per node", ErrConfig, world, ranksPerNode)
		default:
			nodes = world / ranksPerNode
		}
	}
	if world%nodes != 0 {
		return 0, 0, fmt.Errorf("%w: %d ranks cannot be shared by %d nodes", ErrConfig, world, nodes)
	}
	if node < 0 {
		node = NodeOf(rank, world, nodes)
	}
	return nodes, node, nil
}

// Partition returns Node mode's partition of the groups with the given row
// counts across nodes nodes: parts[k] lists node k's groups in increasing
// order. It depends only on the row counts, nodes and seed, never on the
// epoch, so a node keeps its share for the whole run. It fails with
// ErrConfig when fewer groups have rows than there are nodes.
//
// The construction, which other implementations (the Python client) may
// reproduce:
//
//  1. The groups with rows, in increasing order, are shuffled by
//     Fisher–Yates from the end (for i from len-1 down to 1, swap i with
//     j = below(i+1)), drawing from a PCG-DXSM generator (math/rand/v2's
//     PCG: 128-bit state hi=seed, lo=key) with key =
//     mix(mix(0) ^ 5<<56 ^ nodes), mix being SplitMix64's finaliser and
//     below(n) Lemire's multiply-and-reject bounded draw over the
//     generator's 64-bit outputs (the same draws ShardWindow uses).
//  2. The shuffled list is sorted by row count, largest first, stably
//     (equal counts keep their shuffled order).
//  3. In that order each group goes to the node with the fewest rows so
//     far, the lowest-numbered on a tie (longest-processing-time-first
//     greedy): the nodes' sample counts then differ by at most the
//     largest group's rows, and with equal groups the shuffled list is
//     dealt round-robin.
func Partition(rows []int, nodes int, seed uint64) ([][]int, error) {
	if nodes <= 0 {
		return nil, fmt.Errorf("%w: %d nodes", ErrConfig, nodes)
	}
	groups := nonEmpty(rows)
	if len(groups) < nodes {
		return nil, fmt.Errorf("%w: %d shards with samples cannot be partitioned across %d nodes",
			ErrConfig, len(groups), nodes)
	}
	shuffle(newPCG(seed, 0, streamNodes, uint64(nodes)), groups)
	// A stable sort by rows, largest first: equal rows keep their
	// shuffled position (pos), which an unstable sort on (rows, pos)
	// gives faster.
	keyed := make([]struct{ rows, pos, group int }, len(groups))
	for i, g := range groups {
		keyed[i].rows, keyed[i].pos, keyed[i].group = rows[g], i, g
	}
	slices.SortFunc(keyed, func(a, b struct{ rows, pos, group int }) int {
		return cmp.Or(cmp.Compare(b.rows, a.rows), cmp.Compare(a.pos, b.pos))
	})
	parts := make([][]int, nodes)
	h := make(loads, nodes)
	for k := range h {
		h[k].node = k
	}
	for _, kg := range keyed { // h[0] is the least loaded node: no reordering needed to start
		parts[h[0].node] = append(parts[h[0].node], kg.group)
		h[0].rows += int64(kg.rows)
		heap.Fix(&h, 0)
	}
	for _, p := range parts {
		slices.Sort(p)
	}
	return parts, nil
}

// load is a node's rows so far in Partition.
type load struct {
	rows int64
	node int
}

// loads is a min-heap of loads by (rows, node).
type loads []load

func (h loads) Len() int { return len(h) }
func (h loads) Less(i, j int) bool {
	return h[i].rows < h[j].rows || (h[i].rows == h[j].rows && h[i].node < h[j].node)
}
func (h loads) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *loads) Push(x any)   { *h = append(*h, x.(load)) }
func (h *loads) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// nodeShare is what Node mode gives one rank: its node's groups, the
// node's samples, the rank's place among the node's ranks and the
// per-rank length every rank of the world shares.
type nodeShare struct {
	groups      []int
	n           int64 // samples of the node's partition
	rank, world int   // the rank's place on the node, the node's ranks
	total       int64 // the node's positions after padding or dropping
}

// shareOf returns cfg's rank's nodeShare (cfg normalized, Mode Node).
func shareOf(rows []int, cfg Config) (nodeShare, error) {
	parts, err := Partition(rows, cfg.Nodes, cfg.Seed)
	if err != nil {
		return nodeShare{}, err
	}
	per := cfg.World / cfg.Nodes
	w := int64(per)
	var length int64 = -1 // per rank, the same for every rank of the world
	var mine int64
	for k, p := range parts {
		var n int64
		for _, g := range p {
			n += int64(rows[g])
		}
		if k == cfg.Node {
			mine = n
		}
		l := (n + w - 1) / w // Wrap: the largest partition's ceiling
		if cfg.Tail == Drop {
			l = n / w // Drop: the smallest partition's floor
		}
		if length < 0 || (cfg.Tail == Drop && l < length) || (cfg.Tail != Drop && l > length) {
			length = l
		}
	}
	s := nodeShare{groups: parts[cfg.Node], n: mine, rank: cfg.Rank % per, world: per, total: length * w}
	switch {
	case length == 0:
		return s, fmt.Errorf("%w: the smallest node's samples cannot be shared by its %d ranks", ErrConfig, per)
	case s.total > 2*mine:
		return s, fmt.Errorf("%w: node %d has %d samples, too few to pad to the %d its %d ranks read (shards too few or too unequal for %d nodes)",
			ErrConfig, cfg.Node, mine, s.total, per, cfg.Nodes)
	}
	return s, nil
}
