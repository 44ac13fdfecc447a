// Package sampler decides which samples a rank reads in each epoch, and in
// what order. It is pure and deterministic: the order is a function of the
// groups' row counts, the Config and the epoch number only, identical on
// every machine and, by construction, across Go versions (see
// Reproducibility).
//
// # Modes
//
// A dataset is a list of groups (shards) of rows. Sample ids number the
// rows of all groups in order: group 0's rows first.
//
//   - Sequential: every sample in id order.
//   - Global: a uniform permutation of all samples (4 bytes of memory per
//     sample; at most 2^32 samples). Every shard is in use all epoch.
//   - ShardWindow (the default): the shards in a shuffled order, read
//     through a sliding window of Window shards: each sample is drawn
//     uniformly from the unread rows of the open shards, and when a shard
//     is exhausted the next one opens. The working set is Window shards.
//   - Node ("node", rank-aware): the shards are partitioned across Nodes
//     nodes once for all epochs (see Partition: seeded, balanced by
//     sample count), and each node's ranks read only their node's
//     partition, in ShardWindow's order over the partition, reshuffled
//     every epoch. Each node's cache then holds only its share of the
//     dataset, and once warm nothing is read from another node.
//
// # Ranks
//
// The epoch's global order is dealt round-robin: rank r reads positions r,
// r+World, r+2*World …, so all ranks move through the same window together
// and share one working set. Every rank reads the same number of samples:
// with Tail Wrap (the default) the order is padded to a multiple of World
// by repeating its last samples (so a few samples are read twice in the
// epoch, by different ranks); with Drop its last N mod World samples are
// left out (different ones each epoch, as the order changes). The ranks'
// positions are disjoint and, with Wrap, cover every sample.
//
// In Node mode the same holds within each node: the node's World/Nodes
// ranks deal the node's order round-robin by their place on the node
// (Rank mod World/Nodes; Config.Node says which node a rank is on). So
// that every rank of the world reads the same number of samples (DDP
// ranks must agree on the steps of an epoch), the per-rank length is the
// world's: with Wrap the largest partition's ceil(n/ranks-per-node), and
// every node pads its own order with repeats of its own last samples up
// to it; with Drop the smallest partition's floor(n/ranks-per-node), and
// every node leaves out the rest of its order. A partition so much
// smaller than the largest that its padding would exceed its samples is
// an error (too few, too unequal shards for so many nodes).
//
// # Events
//
// Next reports, through Events, when a group enters use (Open, before its
// first sample) and leaves it (Close, after its last sample, counting the
// samples of every rank), so a loader can hold each shard exactly while
// it is needed. All ranks see the same events. Each group in Order opens
// and closes exactly once per epoch, in Order's order for the opens.
//
// # Reproducibility
//
// Random numbers come from math/rand/v2's PCG (PCG-DXSM, whose output is
// fixed by its published algorithm), seeded per epoch and per use with
// SplitMix64-mixed keys. Bounded draws and shuffles are implemented in this
// package (Lemire's method, Fisher–Yates), so nothing depends on the
// standard library's derived methods. Changing any of this changes every
// order; the tests pin known outputs.
package sampler

import (
	"errors"
	"fmt"
	"math"
)

// Mode is a shuffling mode.
type Mode uint8

const (
	// ShardWindow shuffles the shard order, then rows across a sliding
	// window of shards. The default.
	ShardWindow Mode = iota
	// Global shuffles all samples.
	Global
	// Sequential does not shuffle.
	Sequential
	// Node ("node") partitions the shards across Config.Nodes nodes,
	// fixed across epochs, and reads the rank's node's partition as
	// ShardWindow does, reshuffled every epoch: the rank-aware mode.
	Node
)

var modeNames = [...]string{ShardWindow: "shard-window", Global: "global", Sequential: "sequential", Node: "node"}

// String returns the mode's name as ParseMode accepts it.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", m)
}

// ParseMode parses "shard-window", "global", "sequential" or "node".
func ParseMode(s string) (Mode, error) {
	for m, name := range modeNames {
		if s == name {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("%w: shuffle mode %q (want shard-window, global, sequential or node)", ErrConfig, s)
}

// Tail is what happens to an epoch whose length is not a multiple of the
// world size.
type Tail uint8

const (
	// Wrap pads the epoch with repeats of its last samples. The default.
	Wrap Tail = iota
	// Drop leaves the last samples out.
	Drop
)

// String returns "wrap" or "drop".
func (t Tail) String() string {
	switch t {
	case Wrap:
		return "wrap"
	case Drop:
		return "drop"
	}
	return fmt.Sprintf("Tail(%d)", t)
}

// DefaultWindow is the window of a zero Config.Window, in shards.
const DefaultWindow = 8

// ErrConfig means a Config or a dataset cannot be sampled.
var ErrConfig = errors.New("sampler: invalid configuration")

// Config says how to order the samples.
type Config struct {
	// Mode is the shuffling mode; the zero value is ShardWindow.
	Mode Mode
	// Seed seeds every shuffle; epochs differ by their number.
	Seed uint64
	// Window is ShardWindow's window in shards. 0 means DefaultWindow.
	Window int
	// Rank is this reader's rank in [0, World).
	Rank int
	// World is the number of ranks. 0 means 1.
	World int
	// Tail pads (Wrap) or shortens (Drop) the epoch to a multiple of World.
	Tail Tail
	// Nodes is Node mode's number of nodes (0 means 1); it must divide
	// World: each node runs World/Nodes ranks. Other modes ignore it.
	Nodes int
	// Node is Node mode's node of this rank, in [0, Nodes); the rank's
	// place among its node's ranks is Rank mod World/Nodes. With
	// torchrun's numbering (rank = node*ranks-per-node + local rank)
	// it is Rank / (World/Nodes) (see NodeOf); the zero value is node 0,
	// so callers set it. Other modes ignore it.
	Node int
}

// NodeOf returns the node of rank in a world of world ranks on nodes
// nodes numbered as torchrun numbers them: rank / (world/nodes).
func NodeOf(rank, world, nodes int) int {
	if nodes <= 0 || world < nodes {
		return 0
	}
	return rank / (world / nodes)
}

// normalize applies defaults and validates.
func (c Config) normalize() (Config, error) {
	if c.World == 0 {
		c.World = 1
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Nodes == 0 || c.Mode != Node {
		c.Nodes = 1
	}
	if c.Mode != Node {
		c.Node = 0
	}
	switch {
	case c.Mode > Node:
		return c, fmt.Errorf("%w: mode %d", ErrConfig, c.Mode)
	case c.Tail > Drop:
		return c, fmt.Errorf("%w: tail %d", ErrConfig, c.Tail)
	case c.World < 0 || c.Rank < 0 || c.Rank >= c.World:
		return c, fmt.Errorf("%w: rank %d of world size %d", ErrConfig, c.Rank, c.World)
	case c.Window < 0:
		return c, fmt.Errorf("%w: window of %d shards", ErrConfig, c.Window)
	case c.Nodes < 0 || c.World%c.Nodes != 0:
		return c, fmt.Errorf("%w: %d ranks cannot be shared by %d nodes", ErrConfig, c.World, c.Nodes)
	case c.Node < 0 || c.Node >= c.Nodes:
		return c, fmt.Errorf("%w: node %d of %d nodes", ErrConfig, c.Node, c.Nodes)
	}
	return c, nil
}

// Sample is one sample of the epoch.
type Sample struct {
	// ID numbers the sample across the dataset: its group's offset plus Row.
	ID int64
	// Group and Row locate it.
	Group, Row int
}

// EventKind says what happened to a group.
type EventKind uint8

const (
	// Open: the group enters use; samples of it follow.
	Open EventKind = iota + 1
	// Close: the group's last sample (of any rank) has been read.
	Close
)

// Event is a group entering or leaving use.
type Event struct {
	Kind  EventKind
	Group int
}

// Offsets returns the id of each group's first row and, last, the total
// number of samples; an error if a count is negative or the total
// overflows.
func Offsets(rows []int) ([]int64, error) {
	off := make([]int64, len(rows)+1)
	for g, n := range rows {
		if n < 0 {
			return nil, fmt.Errorf("%w: group %d has %d rows", ErrConfig, g, n)
		}
		if off[g] > math.MaxInt64-int64(n) {
			return nil, fmt.Errorf("%w: too many samples", ErrConfig)
		}
		off[g+1] = off[g] + int64(n)
	}
	return off, nil
}
