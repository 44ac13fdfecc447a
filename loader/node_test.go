package loader

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/object"
)

// TestNodeMode runs every rank of a world of 2 nodes × 2 ranks in the node
// shuffle mode: each rank reads and plans only its node's shards, every
// rank has the same number of batches, and each epoch's union is the
// dataset.
func TestNodeMode(t *testing.T) {
	e := newEnv(t, unevenData)
	const nodes, world = 2, 4
	n := int(unevenData.Samples())
	parts, err := sampler.Partition(unevenData.Rows, nodes, 11)
	if err != nil {
		t.Fatal(err)
	}
	off, _ := sampler.Offsets(unevenData.Rows)
	nodeOf := func(id int64) int { // the node whose partition holds sample id
		for k, p := range parts {
			for _, g := range p {
				if id >= off[g] && id < off[g+1] {
					return k
				}
			}
		}
		return -1
	}
	for _, tail := range []sampler.Tail{sampler.Wrap, sampler.Drop} {
		perEpoch := map[int]map[int64]int{}
		batches := -1
		for rank := range world {
			node := sampler.NodeOf(rank, world, nodes)
			p := &recordingPlanner{}
			l := e.open(t, Config{BatchSize: 4, Shuffle: sampler.Node, Seed: 11, Window: 2, Rank: rank, World: world,
				Nodes: nodes, Node: node, Epochs: 2, Tail: tail, Planner: p})
			got := drain(t, l, unevenData)
			if batches >= 0 && len(got) != batches {
				t.Fatalf("%s: rank %d has %d batches, rank 0 %d", tail, rank, len(got), batches)
			}
			batches = len(got)
			for _, b := range got {
				if perEpoch[b.epoch] == nil {
					perEpoch[b.epoch] = map[int64]int{}
				}
				for _, id := range b.ids {
					if k := nodeOf(id); k != node {
						t.Fatalf("%s: rank %d on node %d read sample %d of node %d", tail, rank, node, id, k)
					}
					perEpoch[b.epoch][id]++
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			mine := map[object.Object]bool{}
			for _, g := range parts[node] {
				for _, o := range l.ds.Groups[g].Objects {
					mine[o] = true
				}
			}
			p.mu.Lock()
			if len(p.plans) == 0 {
				t.Errorf("%s: rank %d announced no plan", tail, rank)
			}
			for _, plan := range p.plans {
				for _, o := range plan {
					if !mine[o] {
						t.Errorf("%s: rank %d on node %d plans %s, not of its partition", tail, rank, node, o.Name)
					}
				}
			}
			p.mu.Unlock()
		}
		for ep, ids := range perEpoch {
			switch {
			case tail == sampler.Wrap && len(ids) != n:
				t.Errorf("%s epoch %d: %d distinct samples; want all %d", tail, ep, len(ids), n)
			case tail == sampler.Drop:
				for id, c := range ids {
					if c != 1 {
						t.Errorf("%s epoch %d: sample %d read %d times", tail, ep, id, c)
					}
				}
			}
		}
	}
}

// TestNodeResume: a State saved mid-epoch in the node mode resumes
// exactly, and not under another node count.
func TestNodeResume(t *testing.T) {
	e := newEnv(t, unevenData)
	cfg := Config{BatchSize: 3, Shuffle: sampler.Node, Seed: 2, Window: 2, Rank: 3, World: 4, Nodes: 2, Node: 1, Epochs: 2}
	l := e.open(t, cfg)
	full := drain(t, l, unevenData)
	per := l.BatchesPerEpoch()
	for _, k := range []int{1, per - 1, per + 1} {
		c := cfg
		c.Resume = &State{Epoch: k / per, Batch: k % per, Fingerprint: l.State().Fingerprint}
		got := drain(t, e.open(t, c), unevenData)
		if !slices.Equal(flatten(got), flatten(full[k:])) {
			t.Errorf("resume at batch %d: got %v; want %v", k, flatten(got), flatten(full[k:]))
		}
	}
	other := cfg
	other.Dataset = e.dataset(t)
	other.World, other.Nodes, other.Node, other.Rank = 4, 4, 3, 3
	other.Resume = &State{Epoch: 0, Batch: 1, Fingerprint: l.State().Fingerprint}
	if _, err := New(FromStore(e.store), other); !errors.Is(err, ErrResume) {
		t.Errorf("resume on 4 nodes from a state of 2: %v; want ErrResume", err)
	}
	// The node-count is in the fingerprint only in the node mode.
	sw := cfg
	sw.Shuffle, sw.Nodes, sw.Node = sampler.ShardWindow, 0, 0
	sw2 := sw
	sw2.Nodes, sw2.Node = 2, 1
	a, _ := IDs(withDataset(sw, e.dataset(t)))
	b, _ := IDs(withDataset(sw2, e.dataset(t)))
	if !slices.Equal(collect(a), collect(b)) {
		t.Errorf("shard-window depends on Nodes")
	}
	if _, err := l.Next(context.Background()); err != io.EOF {
		t.Errorf("Next after the last epoch = %v; want EOF", err)
	}
}

func withDataset(c Config, d Dataset) Config { c.Dataset = d; return c }

func collect(s func(func(BatchIDs) bool)) []int64 {
	var out []int64
	for b := range s {
		out = append(out, b.IDs...)
	}
	return out
}
