package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/bench/fleettest"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/loader/ring"
	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/loader/synth"
)

// npyPrefix is where phase 6 uploads its .npy dataset, under the harness's
// dataset prefix.
const npyPrefix = "data/npy/"

// snapshot is every node's fleet traffic and GCS proxy bytes at one moment.
type snapshot struct {
	peer, origin, served, gcsPer []int64 // per node
	gcs                          int64
}

// snap reads h's counters.
func snap(ctx context.Context, h *fleettest.Harness) (snapshot, error) {
	var s snapshot
	for _, n := range h.Nodes {
		fs, err := n.Fleet(ctx)
		if err != nil {
			return s, fmt.Errorf("%s: fleet status: %w", n.Name, err)
		}
		var p int64
		for _, b := range fs.Traffic.PeerBytes {
			p += b
		}
		s.peer = append(s.peer, p)
		s.origin = append(s.origin, fs.Traffic.OriginBytes)
		s.served = append(s.served, fs.Traffic.ServedBytes)
	}
	g, per, err := h.GCSBytes(ctx)
	if err != nil {
		return s, fmt.Errorf("GCS bytes: %w", err)
	}
	s.gcs, s.gcsPer = g, per
	return s, nil
}

// sub returns s − a, node by node.
func (s snapshot) sub(a snapshot) snapshot {
	d := snapshot{gcs: s.gcs - a.gcs}
	for k := range s.peer {
		d.peer = append(d.peer, s.peer[k]-a.peer[k])
		d.origin = append(d.origin, s.origin[k]-a.origin[k])
		d.served = append(d.served, s.served[k]-a.served[k])
		d.gcsPer = append(d.gcsPer, s.gcsPer[k]-a.gcsPer[k])
	}
	return d
}

// sum is the sum of v.
func sum(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}

// loaderEpoch is one node's loader over one epoch.
type loaderEpoch struct {
	took             time.Duration
	batches, samples int
	bad              int // samples whose x row, y value and id disagree
}

// epochBarrier holds every node's loader at each epoch's end until all
// have reached it and the counters are read.
type epochBarrier struct {
	arrived  []sync.WaitGroup // per epoch, N nodes
	released []chan struct{}  // per epoch, closed once the counters are read
}

// newEpochBarrier returns a barrier for nodes loaders over epochs epochs.
func newEpochBarrier(nodes, epochs int) *epochBarrier {
	b := &epochBarrier{arrived: make([]sync.WaitGroup, epochs), released: make([]chan struct{}, epochs)}
	for ep := range epochs {
		b.arrived[ep].Add(nodes)
		b.released[ep] = make(chan struct{})
	}
	return b
}

// rankAware is phase 6, issue 18's "rank-aware mode: peer bytes ≤ 0.05·D
// per warm epoch": an .npy dataset of o.shards shards is uploaded to the
// emulator, and each of N nodes runs one loader session through its daemon
// with the node shuffle (rank k of N, one rank per node, so node k reads
// its fixed partition; -loader-shuffle picks another mode to compare),
// all nodes at once, for o.loaderEpochs epochs, each node's disk budget
// o.loaderBudget·D. At
// each epoch's end every node waits for the others (a node's loader may
// gather up to its ring's slots ahead meanwhile) and the counters are read:
// per epoch it reports the bytes the nodes received from peers and the
// GCS bytes, as fractions of D.
func rankAware(ctx context.Context, o opts) error {
	N := o.nodes
	ds := synth.Uniform(o.shards, o.rows, o.rowBytes)
	files := map[string][]byte{}
	var D int64
	if err := ds.Write(npyPrefix, func(name string, b []byte) error {
		files[name] = b
		D += int64(len(b))
		return nil
	}); err != nil {
		return err
	}
	B := int64(o.loaderBudget * float64(D))
	cfg := o.cfg(N, B, false)
	// The harness's own synthetic dataset is one small object, unread.
	cfg.Objects, cfg.Size = 1, 4096
	h, err := start(ctx, cfg)
	if err != nil {
		return err
	}
	defer h.Close()
	for name, b := range files {
		if err := h.Upload(ctx, name, b); err != nil {
			return fmt.Errorf("upload %s: %w", name, err)
		}
	}
	if err := h.WaitAlive(ctx, 30*time.Second); err != nil {
		return err
	}
	report("\n## 6. rank-aware loading: %d nodes, one loader session each (--shuffle %s, one rank per node), fleet, disk budget %s = %.2f·D each",
		N, o.loaderShuffle, mib(B), float64(B)/float64(D))
	report("dataset: %d shards × (x %d×%d B + y) = %s in %d objects; batch 256; %d epochs in one session per node",
		o.shards, o.rows, o.rowBytes, mib(D), len(files), o.loaderEpochs)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	prev, err := snap(ctx, h)
	if err != nil {
		return err
	}
	bar := newEpochBarrier(N, o.loaderEpochs)
	res := make([][]loaderEpoch, N)
	errs := make([]error, N)
	var wg sync.WaitGroup
	for k, n := range h.Nodes {
		wg.Go(func() {
			if res[k], errs[k] = readLoader(ctx, n, k, N, o, bar); errs[k] != nil {
				cancel()
			}
		})
	}
	var deltas []snapshot
	for ep := range o.loaderEpochs {
		all := make(chan struct{})
		go func() { bar.arrived[ep].Wait(); close(all) }()
		select {
		case <-all:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		cur, err := snap(ctx, h)
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		deltas = append(deltas, cur.sub(prev))
		prev = cur
		close(bar.released[ep])
	}
	wg.Wait()
	// The first node to fail cancelled the others: report its error, not
	// theirs.
	first := -1
	for k, err := range errs {
		if err != nil && (first < 0 || errors.Is(errs[first], context.Canceled) && !errors.Is(err, context.Canceled)) {
			first = k
		}
	}
	if first >= 0 {
		return fmt.Errorf("%s: %w", h.Nodes[first].Name, errs[first])
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for ep, d := range deltas {
		var times []string
		samples, bad := 0, 0
		for k := range N {
			r := res[k][ep]
			times = append(times, fmt.Sprintf("%.2fs", r.took.Seconds()))
			samples += r.samples
			bad += r.bad
		}
		target := ""
		if ep > 0 {
			target = " (target ≤ 0.05·D)"
		}
		report("epoch %d: peer bytes %s = %.4f·D%s, per node %v; GCS bytes %s = %.4f·D, per proxy %v; node times %v; %d samples, %d mismatching",
			ep, mib(sum(d.peer)), float64(sum(d.peer))/float64(D), target, mibs(d.peer), mib(d.gcs),
			float64(d.gcs)/float64(D), mibs(d.gcsPer), times, samples, bad)
	}
	traffic(ctx, h)
	return h.Close()
}

// readLoader reads o.loaderEpochs epochs of the dataset on n as rank k of
// world (one rank per node, shuffle o.loaderShuffle) through one loader
// session of n's daemon, checking
// that each sample's x row and y value carry its id. At each epoch's end
// it waits at bar.
func readLoader(ctx context.Context, n *fleettest.Node, k, world int, o opts, bar *epochBarrier) ([]loaderEpoch, error) {
	epochs := o.loaderEpochs
	c, err := control.Dial(ctx, n.Socket)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	t0 := time.Now()
	lc, err := c.OpenLoader(ctx, spec.Spec{Data: "gs://bench/" + npyPrefix, Pattern: synth.Pattern,
		BatchSize: 256, Shuffle: o.loaderShuffle, Seed: 17, Epochs: epochs, Rank: k, World: world, RanksPerNode: 1})
	if err != nil {
		return nil, err
	}
	defer lc.Close()
	var out []loaderEpoch
	var cur loaderEpoch
	for {
		m, err := lc.Recv(ctx)
		if err != nil {
			return out, err
		}
		switch m := m.(type) {
		case ring.Ready:
			b, err := checkBatch(lc, m)
			if err == nil {
				err = lc.Release(m)
			}
			if err != nil {
				return out, err
			}
			cur.batches++
			cur.samples += int(m.N)
			cur.bad += b
		case ring.EpochEnd:
			if len(out) == epochs {
				return out, fmt.Errorf("loader session: more than %d epochs", epochs)
			}
			cur.took = time.Since(t0)
			ep := len(out)
			out = append(out, cur)
			bar.arrived[ep].Done()
			select {
			case <-bar.released[ep]:
			case <-ctx.Done():
				return out, ctx.Err()
			}
			cur, t0 = loaderEpoch{}, time.Now()
		case ring.End:
			if len(out) != epochs {
				return out, fmt.Errorf("loader session: End after %d epochs; want %d", len(out), epochs)
			}
			return out, nil
		default:
			return out, fmt.Errorf("loader session: unexpected message %#v", m)
		}
	}
}

// checkBatch returns the number of samples of the batch m announces whose
// x row's id (synth.RowID) or y value differs from its id.
func checkBatch(lc *control.LoaderConn, m ring.Ready) (int, error) {
	_, descs, err := lc.Batch(m)
	if err != nil {
		return 0, err
	}
	slot := lc.Slot(int(m.Slot))
	arr := map[string]ring.Desc{}
	for _, d := range descs {
		arr[lc.Info.Arrays[d.Name].Name] = d
	}
	x, y, ids := arr["x"], arr["y"], arr["ids"]
	if len(x.Shape) != 2 || len(y.Shape) != 1 || len(ids.Shape) != 1 {
		return 0, errors.New("loader session: a batch without x, y and ids")
	}
	row := x.Shape[1]
	bad := 0
	for i := range int(m.N) {
		id := int64(binary.LittleEndian.Uint64(slot[ids.Offset+8*i:]))
		yv := int64(binary.LittleEndian.Uint64(slot[y.Offset+8*i:]))
		xv := synth.RowID(slot[x.Offset+row*i : x.Offset+row*(i+1)])
		if yv != id || xv != id {
			bad++
		}
	}
	return bad, nil
}
