package peer

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/internal/cputime"
	"github.com/cacheagent/cacheagent/object"
)

// BenchmarkSmallFromOwner reads 1000 objects of 100 KiB that the owner
// holds already, 64 at a time, from a node with an empty cache, over
// loopback: in batch requests and one request each, in one run, with the
// process's CPU time per object (both nodes and the emulator: one process).
func BenchmarkSmallFromOwner(b *testing.B) {
	const n, size = 1000, 100 << 10
	e := newGCSEnv(b)
	objs := make([]object.Object, n)
	for i := range objs {
		objs[i] = e.put(b, bucket, fmt.Sprintf("img/%04d.jpg", i), emulator.Pattern(uint64(i), size))
	}
	for _, mode := range []struct {
		name  string
		below int64
	}{{"batch", 0}, {"single", -1}} {
		b.Run(mode.name, func(b *testing.B) {
			lb := listen(b)
			owner := startNode(b, e, "b", lb, patient(ownedBy(Candidate{Name: "b", Self: true})), nil)
			fetchAll(b, owner, objs) // warm the owner
			var total, cpu time.Duration
			for range b.N {
				la := listen(b)
				cfg := patient(ownedBy(Candidate{Name: "b", Addr: lb.Addr().String()}))
				cfg.BatchBelow = mode.below
				a := startNode(b, e, "a", la, cfg, nil)
				c0, t0 := cputime.Self(), time.Now()
				fetchAll(b, a, objs)
				total += time.Since(t0)
				cpu += cputime.Self() - c0
				if st := a.src.Stats(); st.OriginBytes != 0 {
					b.Fatalf("%d bytes from GCS; want all from the owner", st.OriginBytes)
				}
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "objects/s")
			b.ReportMetric(cpu.Seconds()*1e6/float64(n*b.N), "cpu-us/object")
		})
	}
}

// fetchAll caches objs on nd, 64 at a time.
func fetchAll(b *testing.B, nd *node, objs []object.Object) {
	b.Helper()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for _, o := range objs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := tryRead(nd.cache, o); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
}
