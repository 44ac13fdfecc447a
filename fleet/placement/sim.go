package placement

import (
	"errors"
	"fmt"
	"math"
)

// ErrBadConfig reports a [SimConfig] or [SimulateHotSpot] argument out of
// range.
var ErrBadConfig = errors.New("placement: bad simulation config")

// Defaults of [SimConfig].
const (
	DefaultSimObjects       = 4096
	DefaultSimObjectSize    = 256 << 20
	DefaultSimHeavyFactor   = 2
	DefaultSimHotObjectSize = 1 << 30
)

// SimConfig describes one simulated fleet and dataset for [Simulate]. Zero
// fields take the defaults named beside them.
type SimConfig struct {
	// Nodes is the fleet size N, at least 2. Nodes are named node-00000,
	// node-00001, ... with equal weights unless said otherwise.
	Nodes int
	// Objects is the dataset's object count M (default
	// DefaultSimObjects, 4096).
	Objects int
	// ObjectSize is every object's size in bytes (default
	// DefaultSimObjectSize, 256 MiB shards), so the dataset is
	// D = Objects * ObjectSize (1 TiB by default).
	ObjectSize int64
	// ChunkSize is the placement unit in bytes (default DefaultChunkSize,
	// 8 MiB).
	ChunkSize int64
	// Budget is each node's cache budget B in bytes; 0 means unlimited.
	Budget int64
	// HeavyFactor is the weight of every odd-numbered node relative to the
	// others in the heterogeneous-weight case (default
	// DefaultSimHeavyFactor, 2: half the nodes with twice the budget).
	HeavyFactor float64
	// HotObjectSize is the size in bytes of the one object all nodes read
	// at once in the hot-spot case (default DefaultSimHotObjectSize, 1 GiB).
	HotObjectSize int64
	// Seed picks the objects' generations, and so one sample of placement
	// among many; the same Seed gives the same result.
	Seed uint64
}

// withDefaults returns c with zero fields set to their defaults, or an error
// wrapping ErrBadConfig.
func (c SimConfig) withDefaults() (SimConfig, error) {
	if c.Objects == 0 {
		c.Objects = DefaultSimObjects
	}
	if c.ObjectSize == 0 {
		c.ObjectSize = DefaultSimObjectSize
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = DefaultChunkSize
	}
	if c.HeavyFactor == 0 {
		c.HeavyFactor = DefaultSimHeavyFactor
	}
	if c.HotObjectSize == 0 {
		c.HotObjectSize = DefaultSimHotObjectSize
	}
	switch {
	case c.Nodes < 2:
		return c, fmt.Errorf("placement: simulate %d nodes, want at least 2: %w", c.Nodes, ErrBadConfig)
	case c.Objects < 0 || c.ObjectSize < 0 || c.ChunkSize < 0 || c.Budget < 0 || c.HotObjectSize < 0:
		return c, fmt.Errorf("placement: simulate with a negative count or size: %w", ErrBadConfig)
	case !(c.HeavyFactor > 0) || math.IsInf(c.HeavyFactor, 1):
		return c, fmt.Errorf("placement: simulate heavy factor %v: %w", c.HeavyFactor, ErrBadConfig)
	case int64(c.Objects) > math.MaxInt64/c.ObjectSize:
		return c, fmt.Errorf("placement: simulate %d objects of %d bytes overflows: %w", c.Objects, c.ObjectSize, ErrBadConfig)
	}
	return c, nil
}

// SimResult is what [Simulate] reports for one [SimConfig]. Ratios of bytes
// are in units of the dataset size D unless said otherwise.
type SimResult struct {
	// Config is the configuration simulated, defaults filled in.
	Config SimConfig
	// DatasetBytes is D.
	DatasetBytes int64
	// Keys is the number of chunks in the dataset.
	Keys int

	// Epoch1Egress is the GCS bytes of the first (cold) epoch summed over
	// all nodes, in units of D, when every node reads the whole dataset:
	// each owner fetches each chunk it owns once and keeps it while it has
	// budget; a chunk it cannot keep is fetched from GCS by each of the N
	// readers. 1 when the fleet holds the dataset.
	Epoch1Egress float64
	// LaterEgress is the same for each later epoch: only the chunks that no
	// owner could keep, N times each.
	LaterEgress float64

	// Balance is the max over nodes of owned (= served) bytes over the
	// mean, with equal weights.
	Balance float64
	// HeteroBalance is the same with every odd-numbered node weighted
	// Config.HeavyFactor times the others; above 1 by design.
	HeteroBalance float64
	// HeteroWeighted is, in the same case, the max over nodes of owned
	// bytes over the node's weight share of D: the imbalance that is not
	// intended.
	HeteroWeighted float64

	// JoinMovedKeys and JoinMovedBytes are the fractions of keys and bytes
	// whose owner changes when one node of equal weight joins; the ideal is
	// 1/(N+1).
	JoinMovedKeys, JoinMovedBytes float64
	// JoinStray counts keys that moved between nodes other than the
	// joiner: always 0 for rendezvous hashing.
	JoinStray int
	// LeaveMovedKeys and LeaveMovedBytes are the fractions of keys and bytes
	// whose owner changes when node-00000 leaves; the ideal is 1/N.
	LeaveMovedKeys, LeaveMovedBytes float64
	// LeaveStray counts keys that moved although the leaver did not own
	// them: always 0.
	LeaveStray int

	// Hot is the hot-spot case: one object of Config.HotObjectSize read by
	// all nodes at once, with equal weights.
	Hot HotSpot
}

// simNodes returns n members named node-00000.. of weight 1, with every
// odd-numbered one weighted heavy (1 for equal weights).
func simNodes(n int, heavy float64) []Member {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{Name: fmt.Sprintf("node-%05d", i), Weight: 1}
		if i%2 == 1 {
			ms[i].Weight = heavy
		}
	}
	return ms
}

// simGeneration returns object i's generation under seed: positive, like
// GCS generations, and different per seed.
func simGeneration(seed uint64, i int) int64 {
	return int64(mix(seed^mix(uint64(i))) >> 12)
}

// Simulate places a dataset of cfg.Objects objects on a fleet of cfg.Nodes
// and reports egress, balance, churn and hot-spot figures. It is pure and
// deterministic: the same cfg gives the same result. Every chunk is placed
// (no sampling), so it costs O(Keys * Nodes) cheap hash mixes, plus as many
// logarithms for the heterogeneous case. It fails with [ErrBadConfig].
func Simulate(cfg SimConfig) (SimResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return SimResult{}, err
	}
	n := cfg.Nodes
	base, err := New(simNodes(n, 1))
	if err != nil {
		return SimResult{}, err
	}
	het, err := New(simNodes(n, cfg.HeavyFactor))
	if err != nil {
		return SimResult{}, err
	}
	join, err := New(append(simNodes(n, 1), Member{Name: fmt.Sprintf("node-%05d", n), Weight: 1}))
	if err != nil {
		return SimResult{}, err
	}
	leaver := base.Member(0).Name
	leave, err := New(base.Members()[1:])
	if err != nil {
		return SimResult{}, err
	}
	joinToBase, leaveToBase := indexMap(join, base), indexMap(leave, base)

	r := SimResult{Config: cfg, DatasetBytes: int64(cfg.Objects) * cfg.ObjectSize}
	owned := make([]int64, n)
	ownedHet := make([]int64, n)
	kept := make([]int64, n)
	var overflow, joinBytes, leaveBytes int64
	var joinKeys, leaveKeys int
	budget := cfg.Budget
	if budget == 0 {
		budget = math.MaxInt64
	}
	chunks := Chunks(cfg.ObjectSize, cfg.ChunkSize)
	for obj := range cfg.Objects {
		k := Key{Bucket: "sim", Object: fmt.Sprintf("shard-%06d", obj), Generation: simGeneration(cfg.Seed, obj)}
		for c := range chunks {
			k.Chunk = c
			_, size := ChunkRange(cfg.ObjectSize, cfg.ChunkSize, c)
			h := k.hash()
			o := base.ownerOf(h)
			owned[o] += size
			ownedHet[het.ownerOf(h)] += size
			if kept[o] <= budget-size {
				kept[o] += size
			} else {
				overflow += size
			}
			if j := joinToBase[join.ownerOf(h)]; j != o {
				joinKeys++
				joinBytes += size
				if j != -1 {
					r.JoinStray++
				}
			}
			if l := leaveToBase[leave.ownerOf(h)]; l != o {
				leaveKeys++
				leaveBytes += size
				if base.Member(o).Name != leaver {
					r.LeaveStray++
				}
			}
		}
	}
	r.Keys = cfg.Objects * chunks
	d := float64(r.DatasetBytes)
	if r.Keys > 0 {
		r.Epoch1Egress = (d - float64(overflow) + float64(n)*float64(overflow)) / d
		r.LaterEgress = float64(n) * float64(overflow) / d
		r.Balance = maxOverMean(owned, nil)
		r.HeteroBalance = maxOverMean(ownedHet, nil)
		r.HeteroWeighted = maxOverMean(ownedHet, het)
		r.JoinMovedKeys, r.JoinMovedBytes = float64(joinKeys)/float64(r.Keys), float64(joinBytes)/d
		r.LeaveMovedKeys, r.LeaveMovedBytes = float64(leaveKeys)/float64(r.Keys), float64(leaveBytes)/d
	}
	r.Hot, err = hotSpot(base, cfg.HotObjectSize, cfg.ChunkSize, cfg.Seed)
	return r, err
}

// indexMap maps each index of from to the index of the same name in to, or
// -1 where to has no such member.
func indexMap(from, to *Table) []int {
	m := make([]int, from.Len())
	for i := range m {
		j, ok := to.Index(from.Member(i).Name)
		if !ok {
			j = -1
		}
		m[i] = j
	}
	return m
}

// maxOverMean returns max_i(v[i]/e[i]) / mean, where e[i] is node i's
// expected share (its weight share in t, or 1/len(v) when t is nil). It is 0
// when v sums to 0.
func maxOverMean(v []int64, t *Table) float64 {
	var sum int64
	for _, x := range v {
		sum += x
	}
	if sum == 0 {
		return 0
	}
	var worst float64
	for i, x := range v {
		share := 1 / float64(len(v))
		if t != nil {
			share = t.OwnedShare(t.Member(i).Name)
		}
		worst = max(worst, float64(x)/(float64(sum)*share))
	}
	return worst
}
