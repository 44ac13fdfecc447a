package tier

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/bare"
	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/internal/cputime"
	"github.com/cacheagent/cacheagent/object"
)

// BenchmarkPlannedCold is the planned cold epoch of bench/pyplan.py
// without the mount and Python: 2000 objects of 100 KiB behind a link of
// 20 ms first byte and 100 MB/s per connection, announced as a plan and
// read in that order by two readers taking batches of 32 (as DataLoader's
// workers do), against a bare client listing them and GETting every one on
// as many connections (the link-limited ideal, measured in the same run),
// with the objects packed into segments (the default) and in a file each.
// cpu-x-link is the process's CPU time per object during the epoch
// (getrusage: the cache, or the bare client, and the in-process emulator
// serving either; not the cache's Open and Close) over the bare client's.
// The last cases run on the emulator unshaped (loopback).
// $TIER_PLANNED_OBJECTS sets another number of objects (the figures
// are for 20,000; seeding them takes a minute or two).
//
// One unmeasured epoch runs first, and each epoch's cache is removed when
// it ends, so that every measured epoch writes its objects into memory the
// kernel freed a moment before (see warmEpoch).
func BenchmarkPlannedCold(b *testing.B) {
	const (
		size    = 100 << 10
		batch   = 32
		readers = 2
	)
	objects := 2000
	if v, err := strconv.Atoi(os.Getenv("TIER_PLANNED_OBJECTS")); err == nil && v > 0 {
		objects = v
	}
	emu, plan := planEmulator(b, objects, size)
	defer emu.Close()
	warmEpoch(b, emu.Endpoint(), plan)
	layouts := []struct {
		name      string
		packBelow int64
	}{{"packed", 0}, {"files", -1}}
	cases := []struct {
		link  string
		conns int
	}{{"shaped", 8}, {"shaped", 16}, {"shaped", 32}, {"shaped", 64}, {"loopback", 64}}
	for _, cs := range cases {
		conns := cs.conns
		if cs.link == "loopback" { // the emulator unshaped: what the cache's CPU allows
			emu.SetShape(emulator.Shape{})
		}
		for _, lay := range layouts {
			b.Run(fmt.Sprintf("%s/conns-%d+%d/%s", cs.link, conns, conns, lay.name), func(b *testing.B) {
				cpu0 := cputime.Self()
				link := bareLink(b, emu.Endpoint(), len(plan), 2*conns)
				linkCPU := cputime.Self() - cpu0
				var total, firstByte, cpu time.Duration
				for i := 0; i < b.N; i++ {
					ep := plannedEpoch(b, emu.Endpoint(), plan, conns, batch, readers, lay.packBelow)
					cpu += ep.cpu
					total += ep.took
					firstByte += ep.firstByte
				}
				per := total.Seconds() / float64(b.N)
				b.ReportMetric(float64(firstByte.Milliseconds())/float64(b.N), "first-byte-ms")
				b.ReportMetric(per, "s/epoch")
				b.ReportMetric(link.Seconds(), "link-s")
				b.ReportMetric(per/link.Seconds(), "x-link")
				b.ReportMetric(float64(objects)/per, "objects/s")
				b.ReportMetric(cpu.Seconds()*1e3/float64(b.N)/float64(objects), "cpu-ms/object")
				b.ReportMetric(cpu.Seconds()/float64(b.N)/linkCPU.Seconds(), "cpu-x-link")
			})
		}
	}
}

// warmEpoch runs one planned epoch of plan, unmeasured, and removes its
// cache. A cache's fills take new pages for the page cache; on a VM whose
// host backs the guest's memory lazily (as Firecracker's does with free page
// reporting: memory the guest freed goes back to the host once about 1 GiB
// of it waits), the first touch of a page the host took back costs about
// 15 µs, thirteen times the 100 KiB pwrite it belongs to (bench/firsttouch).
// A machine whose memory stays backed, as a cloud VM's does, never pays
// that, and neither does a long-running daemon whose page cache is full (the
// kernel reclaims old pages for new ones). Without this epoch, the first
// case measured pays for it and the later ones, which reuse what the earlier
// ones freed, do not.
func warmEpoch(b *testing.B, endpoint string, plan []object.Object) {
	b.Helper()
	plannedEpoch(b, endpoint, plan, 16, 32, 2, 0)
}

// bareLink lists the emulator's bench/imgs/ (the plan) and GETs every
// object on conns connections at once, as a bare client would (the issue's
// baseline: list + GET, bytes discarded); it returns how long that took.
func bareLink(b *testing.B, endpoint string, want, conns int) time.Duration {
	b.Helper()
	res, err := bare.Read(context.Background(), endpoint, conns, "bench", "imgs/")
	if err != nil {
		b.Fatal(err)
	}
	if res.Objects != want {
		b.Fatalf("bare client read %d objects, want %d", res.Objects, want)
	}
	return res.Elapsed
}

// epoch is what plannedEpoch measured.
type epoch struct {
	took      time.Duration // from the plan's announcement to the last read
	cpu       time.Duration // the process's CPU time meanwhile (getrusage)
	firstByte time.Duration // the mean time to first byte of the cache's range reads
}

// plannedEpoch opens a fresh cache, announces plan and reads it with
// readers goroutines taking batches in turn. Opening and closing the cache
// are not the epoch: neither its time nor its CPU counts them. The cache's
// directory is removed when the epoch ends, its page cache freed with it.
func plannedEpoch(b testing.TB, endpoint string, plan []object.Object, conns, batch, readers int, packBelow int64) epoch {
	b.Helper()
	ctx := context.Background()
	src, err := fetch.NewGCS(ctx, fetch.GCSConfig{Endpoint: endpoint})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	ts := &timedSource{Source: src}
	dl, err := fetch.NewDownloader(ts, fetch.Config{Connections: conns, SmallConnections: conns})
	if err != nil {
		b.Fatal(err)
	}
	// As many objects in flight as range reads (both lanes), as the daemon
	// sizes its cache (daemon.Config.Tier).
	dir, err := os.MkdirTemp(b.TempDir(), "epoch")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	c, err := Open(ctx, Config{Dir: dir, MaxBytes: 8 << 30, Source: src, Downloader: dl, Revalidate: -1,
		PackBelow: packBelow, PrefetchParallelism: max(DefaultPrefetchParallelism, 2*conns)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	start, cpu0 := time.Now(), cputime.Self()
	if err := c.Plan(ctx, "bench", plan); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	buf := make([][]byte, readers)
	for r := range readers {
		buf[r] = make([]byte, 128<<10)
		wg.Go(func() {
			for k := next.Add(1) - 1; int(k)*batch < len(plan); k = next.Add(1) - 1 {
				lo := int(k) * batch
				if err := c.AdvancePlan(ctx, "bench", lo); err != nil {
					errs <- err
					return
				}
				for _, o := range plan[lo:min(lo+batch, len(plan))] {
					h, err := c.Open(ctx, o)
					if err != nil {
						errs <- err
						return
					}
					_, err = h.ReadAt(buf[r], 0)
					h.Close()
					if err != nil && err != io.EOF {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	ep := epoch{took: time.Since(start), cpu: cputime.Self() - cpu0,
		firstByte: time.Duration(ts.firstByte.Load() / max(ts.n.Load(), 1))}
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	return ep
}

// timedSource times its range reads' first bytes: the link as the cache
// sees it, beside the link's nominal first byte.
type timedSource struct {
	object.Source
	n, firstByte atomic.Int64
}

func (s *timedSource) NewRangeReader(ctx context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	t0 := time.Now()
	r, err := s.Source.NewRangeReader(ctx, o, off, n)
	s.n.Add(1)
	s.firstByte.Add(int64(time.Since(t0)))
	return r, err
}

// planEmulator starts the emulator behind the shaped link (20 ms to the
// first byte, 100 MB/s per connection) with n objects of size bytes, and
// returns it and the objects in plan order.
func planEmulator(b *testing.B, n, size int) (*emulator.Server, []object.Object) {
	b.Helper()
	objs := make([]fakestorage.Object, n)
	plan := make([]object.Object, n)
	for i := range objs {
		name := fmt.Sprintf("imgs/class-%02d/img-%05d.bin", i%10, i)
		objs[i] = fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bench", Name: name},
			Content: emulator.Pattern(uint64(i), size)}
		plan[i] = object.Object{Bucket: "bench", Name: name}
	}
	emu, err := emulator.Start(emulator.Options{Objects: objs, Dir: b.TempDir(),
		Shape: emulator.Shape{FirstByte: 20 * time.Millisecond, BytesPerSec: 100e6}})
	if err != nil {
		b.Fatal(err)
	}
	return emu, plan
}

// BenchmarkPackThreshold measures, for objects around the default
// tiers.disk.pack_below (1 MiB), a planned cold epoch with them packed and
// with a file each, on the shaped link at 16 + 16 connections (256 MiB of
// objects at each size): what a file of its own costs as objects grow.
//
//	go test ./tier -run '^$' -bench BenchmarkPackThreshold -benchtime 1x -count 2
func BenchmarkPackThreshold(b *testing.B) {
	const conns, batch, readers, total = 16, 32, 2, 256 << 20
	for _, size := range []int{256 << 10, 1 << 20, 4 << 20} {
		n := total / size
		emu, plan := planEmulator(b, n, size)
		for _, lay := range []struct {
			name      string
			packBelow int64
		}{{"packed", int64(size) + 1}, {"files", -1}} {
			b.Run(fmt.Sprintf("size-%dKiB/%s", size>>10, lay.name), func(b *testing.B) {
				var total, cpu time.Duration
				for range b.N {
					ep := plannedEpoch(b, emu.Endpoint(), plan, conns, batch, readers, lay.packBelow)
					cpu += ep.cpu
					total += ep.took
				}
				per := total.Seconds() / float64(b.N)
				b.ReportMetric(float64(n)/per, "objects/s")
				b.ReportMetric(float64(n*size)/per/1e6, "MB/s")
				b.ReportMetric(cpu.Seconds()*1e3/float64(b.N)/float64(n), "cpu-ms/object")
			})
		}
		emu.Close()
	}
}
