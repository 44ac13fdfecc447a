package fetch

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/bare"
	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/internal/cputime"
	"github.com/cacheagent/cacheagent/object"
)

// BenchmarkRequestCost measures the CPU one small object's requests cost
// the process (client and in-process emulator together, by getrusage)
// through the storage client, as the cache makes them, against plain
// net/http requests for the same bytes, as the small-object benchmarks'
// bare client makes them; alternated in each iteration, on the unshaped
// emulator, 2,000 objects of 100 KiB in ten directories.
//
//   - get: a generation-pinned range read of the whole object
//     (GCS.NewRangeReader) against a GET of its media.
//   - list: one listing of the prefix through GCS.List, and one per
//     directory (as the planner lists), against one plain listing asking
//     only for names.
func BenchmarkRequestCost(b *testing.B) {
	const (
		n     = 2000
		size  = 100 << 10
		conns = 16
	)
	objs := make([]fakestorage.Object, n)
	for i := range objs {
		objs[i] = fakestorage.Object{
			ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bench", Name: fmt.Sprintf("imgs/class-%02d/img-%05d.bin", i%10, i)},
			Content:     emulator.Pattern(uint64(i), size)}
	}
	emu, err := emulator.Start(emulator.Options{Objects: objs, Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer emu.Close()
	ctx := context.Background()
	g, err := NewGCS(ctx, GCSConfig{Endpoint: emu.Endpoint()})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	var attrs []object.Attrs
	for a, err := range g.List(ctx, "bench", "imgs/") {
		if err != nil {
			b.Fatal(err)
		}
		attrs = append(attrs, a)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: conns}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	media := strings.TrimSuffix(emu.Endpoint(), "storage/v1/") + "bench/"

	b.Run("get", func(b *testing.B) {
		plain := func(a object.Attrs) error {
			_, err := bare.Get(ctx, hc, media+a.Name)
			return err
		}
		client := func(a object.Attrs) error {
			r, err := g.NewRangeReader(ctx, a.Object, 0, a.Size)
			if err != nil {
				return err
			}
			defer r.Close()
			_, err = io.Copy(io.Discard, r)
			return err
		}
		var cpuPlain, cpuClient time.Duration
		for range b.N {
			cpuPlain += cpuOf(b, func() error { return each(attrs, conns, plain) })
			cpuClient += cpuOf(b, func() error { return each(attrs, conns, client) })
		}
		report(b, "plain", cpuPlain, n)
		report(b, "client", cpuClient, n)
		b.ReportMetric(cpuClient.Seconds()/cpuPlain.Seconds(), "client-x-plain")
	})
	b.Run("list", func(b *testing.B) {
		count := func(prefix string) error {
			k := 0
			for _, err := range g.List(ctx, "bench", prefix) {
				if err != nil {
					return err
				}
				k++
			}
			if prefix == "imgs/" && k != n {
				return fmt.Errorf("listed %d objects, want %d", k, n)
			}
			return nil
		}
		var cpuPlain, cpuFlat, cpuDirs time.Duration
		for range b.N {
			cpuPlain += cpuOf(b, func() error {
				names, err := bare.List(ctx, hc, emu.Endpoint(), "bench", "imgs/")
				if err == nil && len(names) != n {
					err = fmt.Errorf("listed %d names, want %d", len(names), n)
				}
				return err
			})
			cpuFlat += cpuOf(b, func() error { return count("imgs/") })
			cpuDirs += cpuOf(b, func() error {
				for d := range 10 {
					if err := count(fmt.Sprintf("imgs/class-%02d/", d)); err != nil {
						return err
					}
				}
				return nil
			})
		}
		report(b, "plain", cpuPlain, n)
		report(b, "client", cpuFlat, n)
		report(b, "client-dirs", cpuDirs, n)
		b.ReportMetric(cpuFlat.Seconds()/cpuPlain.Seconds(), "client-x-plain")
		b.ReportMetric(cpuDirs.Seconds()/cpuPlain.Seconds(), "dirs-x-plain")
	})
}

// each calls f for every one of attrs on conns goroutines and returns the
// first error.
func each(attrs []object.Attrs, conns int, f func(object.Attrs) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for range conns {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(attrs)); i = next.Add(1) - 1 {
				if err := f(attrs[i]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// cpuOf runs f and returns the process's CPU time (user and system) it took.
func cpuOf(b *testing.B, f func() error) time.Duration {
	b.Helper()
	c0 := cputime.Self()
	if err := f(); err != nil {
		b.Fatal(err)
	}
	return cputime.Self() - c0
}

// report reports cpu over b.N rounds of n objects as µs per object.
func report(b *testing.B, name string, cpu time.Duration, n int) {
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), name+"-cpu-µs/object")
}
