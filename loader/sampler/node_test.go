package sampler

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// nodeDatasets have at least three shards with samples.
var nodeDatasets = map[string][]int{
	"even":       datasets["even"],
	"uneven":     datasets["uneven"],
	"many small": datasets["many small"],
	"big":        {120, 80, 95, 101, 77, 130, 64, 99, 110, 88, 91, 105},
}

func TestPartitionBalancedAndComplete(t *testing.T) {
	for name, rows := range nodeDatasets {
		for _, nodes := range []int{1, 2, 3} {
			parts, err := Partition(rows, nodes, 11)
			if err != nil {
				t.Fatalf("%s: Partition(%d): %v", name, nodes, err)
			}
			again, _ := Partition(rows, nodes, 11)
			if !slices.EqualFunc(parts, again, slices.Equal) {
				t.Errorf("%s/%d: Partition is not deterministic", name, nodes)
			}
			var all []int
			lo, hi, biggest := int64(-1), int64(0), 0
			for _, p := range parts {
				if !slices.IsSorted(p) {
					t.Errorf("%s/%d: part %v not in increasing order", name, nodes, p)
				}
				var n int64
				for _, g := range p {
					n += int64(rows[g])
					biggest = max(biggest, rows[g])
				}
				if lo < 0 || n < lo {
					lo = n
				}
				hi = max(hi, n)
				all = append(all, p...)
			}
			slices.Sort(all)
			if !slices.Equal(all, nonEmpty(rows)) {
				t.Errorf("%s/%d: parts %v do not cover the shards with samples once", name, nodes, parts)
			}
			if hi-lo > int64(biggest) {
				t.Errorf("%s/%d: node sample counts range over [%d, %d]; want within the largest shard (%d)",
					name, nodes, lo, hi, biggest)
			}
		}
	}
	if _, err := Partition([]int{3, 0, 4}, 3, 1); !errors.Is(err, ErrConfig) {
		t.Errorf("Partition of 2 shards across 3 nodes = %v; want ErrConfig", err)
	}
	// Equal shards are dealt round-robin: counts differ by at most one shard,
	// and the seed decides which node gets which.
	rows := make([]int, 12)
	for i := range rows {
		rows[i] = 10
	}
	a, _ := Partition(rows, 4, 1)
	b, _ := Partition(rows, 4, 2)
	for _, p := range a {
		if len(p) != 3 {
			t.Errorf("equal shards: part %v; want 3 shards each", p)
		}
	}
	if slices.EqualFunc(a, b, slices.Equal) {
		t.Errorf("seeds 1 and 2 gave the same partition %v", a)
	}
}

// TestNodeEpochCoversDataset reads one epoch on every rank of the world:
// each rank reads only its node's shards, every rank reads the same
// number of samples, and the union is the dataset (with Wrap each sample
// at least once, the repeats being the padding; with Drop none twice).
func TestNodeEpochCoversDataset(t *testing.T) {
	for name, rows := range nodeDatasets {
		off, _ := Offsets(rows)
		n := int(off[len(rows)])
		for _, nodes := range []int{1, 2, 3} {
			for _, per := range []int{1, 2, 3} {
				for _, tail := range []Tail{Wrap, Drop} {
					cfg := Config{Mode: Node, Seed: 42, Window: 3, World: nodes * per, Nodes: nodes, Tail: tail}
					t.Run(fmt.Sprintf("%s/nodes%d/per%d/%s", name, nodes, per, tail), func(t *testing.T) {
						nodeCoverCase(t, rows, n, cfg)
					})
				}
			}
		}
	}
}

func nodeCoverCase(t *testing.T, rows []int, n int, cfg Config) {
	parts, err := Partition(rows, cfg.Nodes, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewEpoch(rows, cfg, 3); errors.Is(err, ErrConfig) {
		t.Skipf("not shareable: %v", err) // too few or too unequal shards (see TestNodeConfigErrors)
	}
	count := make(map[int64]int)
	length := -1
	for rank := range cfg.World {
		cfg.Rank, cfg.Node = rank, NodeOf(rank, cfg.World, cfg.Nodes)
		got := run(t, rows, cfg, 3, cfg.Window+cfg.World/cfg.Nodes)
		if length >= 0 && len(got) != length {
			t.Fatalf("rank %d reads %d samples, rank 0 %d", rank, len(got), length)
		}
		length = len(got)
		for _, s := range got {
			check(t, rows, s)
			if !slices.Contains(parts[cfg.Node], s.Group) {
				t.Fatalf("rank %d on node %d read shard %d, not in its partition %v", rank, cfg.Node, s.Group, parts[cfg.Node])
			}
			count[s.ID]++
		}
	}
	switch cfg.Tail {
	case Wrap:
		if len(count) != n {
			t.Errorf("%d distinct samples; want all %d", len(count), n)
		}
		if reads := length * cfg.World; reads < n {
			t.Errorf("%d reads for %d samples", reads, n)
		}
	case Drop:
		for id, c := range count {
			if c != 1 {
				t.Errorf("sample %d read %d times", id, c)
			}
		}
	}
}

// TestNodeEpochsReshuffleWithinFixedPartition: across epochs each node
// reads the same shards, in another order.
func TestNodeEpochsReshuffleWithinFixedPartition(t *testing.T) {
	rows := nodeDatasets["big"]
	for node := range 3 {
		cfg := Config{Mode: Node, Seed: 5, Window: 2, World: 6, Nodes: 3, Node: node, Rank: 2 * node}
		var first []int64
		var groups []int
		for epoch := range 3 {
			e, err := NewEpoch(rows, cfg, epoch)
			if err != nil {
				t.Fatal(err)
			}
			got := ids(run(t, rows, cfg, epoch, 2+2))
			order := slices.Clone(e.Order())
			slices.Sort(order)
			if epoch == 0 {
				first, groups = got, order
				continue
			}
			if !slices.Equal(order, groups) {
				t.Errorf("node %d epoch %d reads shards %v; epoch 0 %v", node, epoch, order, groups)
			}
			if slices.Equal(got, first) {
				t.Errorf("node %d: epochs 0 and %d gave the same order", node, epoch)
			}
		}
		again := ids(run(t, rows, cfg, 0, 4))
		if !slices.Equal(again, first) {
			t.Errorf("node %d: epoch 0 is not deterministic", node)
		}
	}
}

// TestNodeOneNodeIsShardWindow: one node is the whole dataset, read as
// ShardWindow reads it.
func TestNodeOneNodeIsShardWindow(t *testing.T) {
	rows := datasets["uneven"]
	for rank := range 2 {
		a := ids(run(t, rows, Config{Mode: Node, Seed: 3, Window: 2, World: 2, Rank: rank}, 1, 4))
		b := ids(run(t, rows, Config{Mode: ShardWindow, Seed: 3, Window: 2, World: 2, Rank: rank}, 1, 4))
		if !slices.Equal(a, b) {
			t.Errorf("rank %d: node mode on 1 node %v; shard-window %v", rank, a, b)
		}
	}
}

// TestNodeUnequalPartitions: partitions of unequal sample counts still
// give every rank the world's length (padding the smaller with Wrap,
// cutting the larger with Drop).
func TestNodeUnequalPartitions(t *testing.T) {
	rows := []int{50, 30, 30} // nodes of 2: {50} and {30, 30}
	for _, tt := range []struct {
		tail Tail
		want int
	}{{Wrap, 30}, {Drop, 25}} {
		for rank := range 4 {
			cfg := Config{Mode: Node, World: 4, Nodes: 2, Node: NodeOf(rank, 4, 2), Rank: rank, Tail: tt.tail}
			e, err := NewEpoch(rows, cfg, 0)
			if err != nil {
				t.Fatal(err)
			}
			if e.Len() != tt.want {
				t.Errorf("%s rank %d: Len %d; want %d", tt.tail, rank, e.Len(), tt.want)
			}
		}
	}
}

func TestNodeSkip(t *testing.T) {
	rows := nodeDatasets["big"]
	cfg := Config{Mode: Node, Seed: 8, Window: 3, World: 4, Nodes: 2, Node: 1, Rank: 3}
	full := run(t, rows, cfg, 2, 5)
	for _, k := range []int{0, 1, 17, len(full) - 1, len(full)} {
		e, err := NewEpoch(rows, cfg, 2)
		if err != nil {
			t.Fatal(err)
		}
		e.Skip(k)
		if got := rest(e); !slices.Equal(got, full[k:]) {
			t.Errorf("after Skip(%d) read %v; want %v", k, ids(got), ids(full[k:]))
		}
	}
}

func TestNodeConfigErrors(t *testing.T) {
	tests := []struct {
		rows []int
		cfg  Config
	}{
		{[]int{5, 5}, Config{Mode: Node, World: 3, Nodes: 2}},          // 3 ranks on 2 nodes
		{[]int{5, 5}, Config{Mode: Node, World: 2, Nodes: 2, Node: 2}}, // no node 2
		{[]int{5, 5}, Config{Mode: Node, World: 2, Nodes: -1}},
		{[]int{5, 0, 5}, Config{Mode: Node, World: 3, Nodes: 3}},            // 2 shards for 3 nodes
		{[]int{100, 1, 1}, Config{Mode: Node, World: 2, Nodes: 2, Node: 1}}, // padding 2 to 100
		{[]int{4, 1}, Config{Mode: Node, World: 4, Nodes: 2, Tail: Drop}},   // 1 sample for 2 ranks
	}
	for _, tt := range tests {
		if _, err := NewEpoch(tt.rows, tt.cfg, 0); !errors.Is(err, ErrConfig) {
			t.Errorf("NewEpoch(%v, %+v) = %v; want ErrConfig", tt.rows, tt.cfg, err)
		}
	}
	if m, err := ParseMode("node"); err != nil || m != Node || m.String() != "node" {
		t.Errorf("ParseMode(node) = %v, %v", m, err)
	}
	// Other modes ignore Nodes and Node.
	if _, err := NewEpoch([]int{5}, Config{World: 1, Nodes: 3, Node: 7}, 0); err != nil {
		t.Errorf("shard-window with Nodes set: %v", err)
	}
}

// TestNodePinned pins a partition and a node's order: a failure means
// every node-mode user's split or order changed, which must be deliberate
// (and the construction in Partition's documentation updated).
func TestNodePinned(t *testing.T) {
	rows := []int{4, 4, 4, 4, 9, 2, 6}
	if got, _ := Partition(rows, 3, 7); !slices.EqualFunc(got, pinnedPartition, slices.Equal) {
		t.Errorf("Partition = %#v; want %#v", got, pinnedPartition)
	}
	cfg := Config{Mode: Node, Seed: 7, Window: 2, World: 3, Nodes: 3, Node: 1, Rank: 1}
	if got := ids(run(t, rows, cfg, 1, 3)); !slices.Equal(got, pinnedNode) {
		t.Errorf("node 1 epoch 1 = %#v; want %#v", got, pinnedNode)
	}
}
