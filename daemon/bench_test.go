package daemon

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/control"
)

// BenchmarkStatus measures status round trips over the control socket from
// parallel clients (each with its own connection), and reports latency
// percentiles. Run with -cpu to vary the number of clients, e.g.
//
//	go test -run '^$' -bench Status -cpu 1,16,100 ./daemon
func BenchmarkStatus(b *testing.B) {
	emu := startEmulator(b, dataset("bkt", "s/", 1, 10))
	d := startDaemon(b, testConfig(b.TempDir(), emu))
	var mu sync.Mutex
	var all []time.Duration
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		c, err := control.Dial(ctx, d.Config().Control.Socket)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		var lat []time.Duration
		for pb.Next() {
			t := time.Now()
			if _, err := c.Status(ctx); err != nil {
				b.Error(err)
				return
			}
			lat = append(lat, time.Since(t))
		}
		mu.Lock()
		all = append(all, lat...)
		mu.Unlock()
	})
	b.StopTimer()
	slices.Sort(all)
	if len(all) > 0 {
		q := func(f float64) float64 { return float64(all[min(len(all)-1, int(f*float64(len(all))))].Microseconds()) }
		b.ReportMetric(q(0.5), "p50-µs")
		b.ReportMetric(q(0.99), "p99-µs")
	}
}
