package loader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/synth"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/tier"
)

// memcpyRate measures one goroutine copying n bytes buffer to buffer: the
// best of five, in bytes per second.
func memcpyRate(n int) float64 {
	src, dst := make([]byte, n), make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	best := 0.0
	for range 5 {
		t := time.Now()
		copy(dst, src)
		best = max(best, float64(n)/time.Since(t).Seconds())
	}
	return best
}

// warmLoader returns a Loader of data over a two-tier cache that holds it
// all in shm, after one warm-up epoch; it reads epochs more.
func warmLoader(b *testing.B, data synth.Dataset, cfg Config, epochs int) *Loader {
	e := newEnv(b, data)
	dl, err := fetch.NewDownloader(e.src, fetch.Config{SliceSize: 32 << 20, Connections: 8})
	if err != nil {
		b.Fatal(err)
	}
	c, err := tier.Open(context.Background(), tier.Config{Dir: filepath.Join(b.TempDir(), "cache"),
		ShmDir: shmDir(b), PromoteHits: -1, Revalidate: -1, Source: e.src, Downloader: dl})
	if err != nil {
		b.Fatal(err)
	}
	store := mmapstore.New(c.Opener(), mmapstore.Config{Revalidate: -1})
	cfg.Dataset, cfg.Epochs = e.dataset(b), 1+epochs
	cfg.Planner, cfg.Stager = c, c.Stager()
	l, err := New(FromStore(store), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		l.Close()
		store.Close()
		c.Close()
	})
	for range l.BatchesPerEpoch() {
		bt, err := l.Next(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		bt.Release()
	}
	return l
}

// memcpyMeter times one core copying a buffer of n bytes to another,
// again and again in the same run as what it is compared with.
type memcpyMeter struct{ src, dst []byte }

func newMemcpyMeter(n int) *memcpyMeter {
	m := &memcpyMeter{make([]byte, n), make([]byte, n)}
	for i := range m.src {
		m.src[i] = byte(i)
	}
	copy(m.dst, m.src)
	return m
}

// rate copies the buffer once and returns bytes per second.
func (m *memcpyMeter) rate() float64 {
	t := time.Now()
	copy(m.dst, m.src)
	return float64(len(m.src)) / time.Since(t).Seconds()
}

// median returns the median of xs (which it sorts).
func median(xs []float64) float64 {
	slices.Sort(xs)
	if n := len(xs); n%2 == 1 {
		return xs[n/2]
	} else {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
}

// BenchmarkEpoch reads warm epochs of 1 KiB and 150 KB (3x224x224 bytes)
// samples, shuffled, and reports samples/s and the gather rate per core
// against one core's memcpy. The machine is shared, so the two are timed
// in turns: after each epoch, one 64 MiB copy; gather/memcpy is the
// median gather rate over the median memcpy rate, each over the epochs,
// and gather/memcpy-peak the same gather rate over the best of five
// back-to-back copies (a warm-cache peak, flattering memcpy).
func BenchmarkEpoch(b *testing.B) {
	for _, tc := range []struct {
		name          string
		shards, rows  int
		rowBytes, bat int
	}{
		{"1KiB", 32, 4096, 1 << 10, 256},
		{"150KB", 32, 32, 3 * 224 * 224, 64},
	} {
		for _, mode := range []sampler.Mode{sampler.ShardWindow, sampler.Global} {
			b.Run(fmt.Sprintf("%s/%s", tc.name, mode), func(b *testing.B) {
				data := synth.Uniform(tc.shards, tc.rows, tc.rowBytes)
				l := warmLoader(b, data, Config{BatchSize: tc.bat, Shuffle: mode, Seed: 1}, b.N)
				meter := newMemcpyMeter(64 << 20)
				var gathers, memcpys []float64
				var took time.Duration
				first := l.Stats()
				b.ResetTimer()
				for range b.N {
					before, start := l.Stats(), time.Now()
					for range l.BatchesPerEpoch() {
						bt, err := l.Next(context.Background())
						if err != nil {
							b.Fatal(err)
						}
						bt.Release()
					}
					took += time.Since(start)
					b.StopTimer()
					s := l.Stats()
					gathers = append(gathers, float64(s.BytesGathered-before.BytesGathered)/(s.Gather-before.Gather).Seconds())
					memcpys = append(memcpys, meter.rate())
					b.StartTimer()
				}
				b.StopTimer()
				if _, err := l.Next(context.Background()); !errors.Is(err, io.EOF) {
					b.Fatalf("after the last epoch: %v, want EOF", err)
				}
				gather, memcpy := median(gathers), median(memcpys)
				b.ReportMetric(float64(l.Stats().Samples-first.Samples)/took.Seconds(), "samples/s")
				b.ReportMetric(gather/1e9, "gather-GB/s")
				b.ReportMetric(memcpy/1e9, "memcpy-GB/s")
				b.ReportMetric(gather/memcpy, "gather/memcpy")
				b.ReportMetric(gather/memcpyRate(64<<20), "gather/memcpy-peak")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
