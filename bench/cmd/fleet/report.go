package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/bench/fleettest"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fleet/placement"
)

// diff counts the bytes where a and b differ, the length difference included.
func diff(a, b []byte) int64 {
	d := int64(max(len(a), len(b)) - min(len(a), len(b)))
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			d++
		}
	}
	return d
}

// sampler records each node's highest disk use, every 100 ms.
type sampler struct {
	stop chan struct{}
	done sync.WaitGroup
	mu   sync.Mutex
	max  []int64
}

// sample starts sampling nodes' disk use; end stops it.
func sample(ctx context.Context, nodes []*fleettest.Node) *sampler {
	s := &sampler{stop: make(chan struct{}), max: make([]int64, len(nodes))}
	s.done.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			for k, n := range nodes {
				if u, err := n.DiskUsed(ctx); err == nil {
					s.mu.Lock()
					s.max[k] = max(s.max[k], u)
					s.mu.Unlock()
				}
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	})
	return s
}

// end stops the sampling and returns each node's highest disk use.
func (s *sampler) end() []int64 {
	close(s.stop)
	s.done.Wait()
	return s.max
}

// mib formats b bytes in MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// times lists the epochs' durations.
func times(es []epoch) string {
	var p []string
	for _, e := range es {
		p = append(p, fmt.Sprintf("%.2fs", e.took.Seconds()))
	}
	return strings.Join(p, " ")
}

// meanTook is the epochs' mean duration in seconds.
func meanTook(es []epoch) float64 {
	var s float64
	for _, e := range es {
		s += e.took.Seconds()
	}
	return s / float64(len(es))
}

// problems sums the epochs' read errors and corrupt bytes, with the first error.
func problems(es []epoch) (errs int, corrupt int64, first string) {
	for _, e := range es {
		errs += e.errors
		corrupt += e.corrupt
		if first == "" {
			first = e.firstEr
		}
	}
	return
}

// report prints one line of the report.
func report(format string, a ...any) { fmt.Printf(format+"\n", a...) }

// traffic reports each node's fleet traffic counters.
func traffic(ctx context.Context, h *fleettest.Harness) {
	for _, n := range h.Nodes {
		if fs, err := n.Fleet(ctx); err == nil {
			t := fs.Traffic
			report("  %s: origin %s, from peers %v, served %s, peer errors %v, fallbacks %d", n.Name, mib(t.OriginBytes),
				mibMap(t.PeerBytes), mib(t.ServedBytes), nonzero(t.PeerErrors), t.Fallbacks)
		}
	}
}

// mibMap formats a map of byte counts in MiB.
func mibMap(m map[string]int64) map[string]string {
	o := map[string]string{}
	for k, v := range m {
		o[k] = mib(v)
	}
	return o
}

// nonzero returns m without its zero counts.
func nonzero(m map[string]int64) map[string]int64 {
	o := map[string]int64{}
	for k, v := range m {
		if v != 0 {
			o[k] = v
		}
	}
	return o
}

// mibs formats byte counts in MiB.
func mibs(b []int64) []string {
	var o []string
	for _, x := range b {
		o = append(o, mib(x))
	}
	return o
}

// cpuModel is the model name of the first CPU in /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if _, v, ok := strings.Cut(l, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return "?"
}

// prefetchAll has each node read the whole dataset with one `prefetch
// --wait` job, all at once (-reader prefetch): the reads run inside the
// daemons, without a process per object, which on a small machine costs
// about as much as a cold epoch's transfers. The copies are then checked
// with verify; there are no per-read latencies.
func prefetchAll(ctx context.Context, h *fleettest.Harness, nodes []*fleettest.Node) []epoch {
	out := make([]epoch, len(nodes))
	var wg sync.WaitGroup
	for k, n := range nodes {
		wg.Go(func() {
			t0 := time.Now()
			err := n.Prefetch(ctx)
			out[k].took = time.Since(t0)
			if err == nil {
				var rep fleettest.VerifyReport
				if rep, err = n.Verify(ctx); err == nil && rep.Bad() > 0 {
					out[k].corrupt = int64(rep.Bad())
				}
			}
			if err != nil {
				out[k].errors++
				out[k].firstEr = err.Error()
			}
		})
	}
	wg.Wait()
	return out
}

// ownedBytes returns the bytes of the dataset each member owns, as the
// daemons place it: the members' weights from n's fleet status, and the
// dataset (listed by n) balanced over them, as every node balances its
// configured source (objects of at most one chunk: one key each).
func ownedBytes(ctx context.Context, h *fleettest.Harness, n *fleettest.Node) (map[string]int64, error) {
	fs, err := n.Fleet(ctx)
	if err != nil {
		return nil, err
	}
	var ms []placement.Member
	for _, m := range fs.Members {
		ms = append(ms, placement.Member{Name: m.Name, Weight: m.Weight})
	}
	t, err := placement.New(ms)
	if err != nil {
		return nil, err
	}
	out, err := n.CLI(ctx, "ls", "--json", h.URI())
	if err != nil {
		return nil, err
	}
	var objs []control.Object
	if err := json.Unmarshal(out, &objs); err != nil {
		return nil, fmt.Errorf("ls --json: %w", err)
	}
	var items []placement.Item
	for _, o := range objs {
		if o.Size > placement.DefaultChunkSize {
			return nil, fmt.Errorf("%s: larger than a chunk: not handled here", o.Name)
		}
		items = append(items, placement.Item{Key: placement.Key{Bucket: h.Config().Bucket, Object: o.Name, Generation: o.Generation}, Size: o.Size})
	}
	a := t.Balance(items, placement.DefaultSlack)
	owned := make(map[string]int64)
	for _, m := range t.Members() {
		owned[m.Name] = a.OwnedBytes(m.Name)
	}
	return owned, nil
}
