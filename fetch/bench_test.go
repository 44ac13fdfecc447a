package fetch

// Benchmarks over the in-process emulator with a shaped link: every media
// GET waits FirstByte before its headers, then its body is paced at
// BytesPerSec, like one TCP stream to GCS. Each benchmark measures its own
// baseline in the same run and reports ratios; none asserts anything.
// Destinations discard the bytes (CRC32C is still computed and verified),
// so memory stays with the emulator's copies of the objects.
//
// Run: go test -run '^$' -bench . -benchtime 1x ./fetch/

import (
	"context"
	"fmt"
	"hash/crc32"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/storage/transfermanager"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
)

// gcsLink is the modelled link per connection.
var gcsLink = emulator.Shape{FirstByte: 20 * time.Millisecond, BytesPerSec: 100e6}

// benchSet is an emulator holding n objects of size bytes, and a GCS
// source on it.
type benchSet struct {
	s     *emulator.Server
	g     *GCS
	attrs []object.Attrs
	bytes int64
}

func newBenchSet(b *testing.B, n, size int) *benchSet {
	b.Helper()
	// The fake copies each object through io.ReadAll, leaving about twice
	// its size as garbage; collect eagerly while loading so the heap stays
	// near the set's size, and hand the memory back once the set is gone.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	b.Cleanup(debug.FreeOSMemory) // runs after the emulator's Close
	s := startEmulator(b, emulator.Options{Buckets: []string{"bench"}})
	set := &benchSet{s: s, g: newTestGCS(b, s.Endpoint())}
	data := make([]byte, size) // reused: Put copies it
	for i := range n {
		emulator.FillPattern(data, uint64(i), 0)
		name := fmt.Sprintf("set/%05d", i)
		gen, err := s.Put("bench", name, data)
		if err != nil {
			b.Fatal(err)
		}
		set.attrs = append(set.attrs, object.Attrs{
			Object: object.Object{Bucket: "bench", Name: name, Generation: gen},
			Size:   int64(size), CRC32C: crc32.Checksum(data, castagnoli), HasCRC32C: true,
		})
		set.bytes += int64(size)
	}
	return set
}

// fetchAll fetches every object of the set concurrently and returns the
// elapsed time.
func (set *benchSet) fetchAll(b *testing.B, d *Downloader) time.Duration {
	b.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	for _, a := range set.attrs {
		wg.Go(func() {
			if err := d.Fetch(context.Background(), a, discardWriterAt{}, object.NewUrgency(object.Warm)); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// mbps returns n bytes over d in MB/s (10^6 bytes).
func mbps(n int64, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e6 }

// BenchmarkBigObjects fetches 8 × 64 MiB over 8 connections of the shaped
// link (100 MB/s each, 20 ms to first byte). Its sub-benchmarks share the
// emulator, which holds the 512 MiB set.
func BenchmarkBigObjects(b *testing.B) {
	set := newBenchSet(b, 8, 64<<20)
	b.Run("ShapedLink", func(b *testing.B) { benchShapedLink(b, set) })
	b.Run("TransferManager", func(b *testing.B) { benchTransferManager(b, set) })
}

// benchShapedLink: 8 MiB slices. ratio = rate / min(8 × 100 MB/s, unshaped
// loopback rate of the same Downloader in the same run).
//
// Every range pays the 20 ms first byte, so with 8 MiB slices no schedule
// beats 83.9/(20+83.9) ≈ 0.807 of the link: ratio-vs-ttfb-bound is the
// rate against that bound. ratio-32MiB is the ratio with the default
// 32 MiB slices (bound ≈ 0.944), measured in the same run.
func benchShapedLink(b *testing.B, set *benchSet) {
	const conns = 8
	d := newDownloader(b, set.g, Config{SliceSize: 8 << 20, Connections: conns})
	d32 := newDownloader(b, set.g, Config{SliceSize: 32 << 20, Connections: conns})
	var shaped, shaped32, loop time.Duration
	for b.Loop() {
		set.s.SetShape(emulator.Shape{})
		loop += set.fetchAll(b, d)
		set.s.SetShape(gcsLink)
		shaped += set.fetchAll(b, d)
		shaped32 += set.fetchAll(b, d32)
	}
	n := int64(b.N) * set.bytes
	rate, loopRate := mbps(n, shaped), mbps(n, loop)
	ideal := min(conns*float64(gcsLink.BytesPerSec)/1e6, loopRate)
	b.ReportMetric(rate, "MB/s")
	b.ReportMetric(loopRate, "loopback-MB/s")
	b.ReportMetric(rate/ideal, "ratio")
	b.ReportMetric(rate/(ideal*sliceBound(8<<20)), "ratio-vs-ttfb-bound")
	b.ReportMetric(mbps(n, shaped32)/ideal, "ratio-32MiB")
}

// sliceBound is the fraction of a gcsLink connection's bandwidth that
// back-to-back ranges of n bytes can use.
func sliceBound(n int64) float64 {
	transfer := float64(n) / float64(gcsLink.BytesPerSec)
	return transfer / (gcsLink.FirstByte.Seconds() + transfer)
}

// BenchmarkOneObject fetches one 30 MiB object (one default slice) over the
// shaped link with 8 connections and nothing else in flight, against the
// same fetch with one connection in the same run: ratio is how much faster
// spreading its range over the idle connections makes it.
func BenchmarkOneObject(b *testing.B) {
	set := newBenchSet(b, 1, 30<<20)
	set.s.SetShape(gcsLink)
	d := newDownloader(b, set.g, Config{Connections: 8})
	d1 := newDownloader(b, set.g, Config{Connections: 1})
	var spread, one time.Duration
	for b.Loop() {
		spread += set.fetchAll(b, d)
		one += set.fetchAll(b, d1)
	}
	n := int64(b.N) * set.bytes
	b.ReportMetric(mbps(n, spread), "MB/s")
	b.ReportMetric(mbps(n, one), "one-connection-MB/s")
	b.ReportMetric(one.Seconds()/spread.Seconds(), "ratio")
	b.ReportMetric(float64(d.Stats().Splits)/float64(b.N), "splits/op")
}

// BenchmarkManySmall: 1000 × 256 KiB objects on the shaped link, fetched
// concurrently under a budget of 64 connections, against one sequential
// reader (one Fetch at a time) on a sample of them. The small-object lane
// is off: it would double the budget under test.
func BenchmarkManySmall(b *testing.B) {
	const sample = 40
	set := newBenchSet(b, 1000, 256<<10)
	set.s.SetShape(gcsLink)
	d := newDownloader(b, set.g, Config{Connections: 64, SmallObjectSize: NoSmallLane})
	var conc, seq time.Duration
	for b.Loop() {
		conc += set.fetchAll(b, d)
		start := time.Now()
		for _, a := range set.attrs[:sample] {
			if err := d.Fetch(context.Background(), a, discardWriterAt{}, object.NewUrgency(object.Demand)); err != nil {
				b.Fatal(err)
			}
		}
		seq += time.Since(start)
	}
	concRate := float64(b.N*len(set.attrs)) / conc.Seconds()
	seqRate := float64(b.N*sample) / seq.Seconds()
	b.ReportMetric(concRate, "objects/s")
	b.ReportMetric(seqRate, "sequential-objects/s")
	b.ReportMetric(concRate/seqRate, "ratio")
}

// benchTransferManager compares cloud.google.com/go/storage/transfermanager
// (8 workers, 8 MiB parts) with our Downloader (8 connections, 8 MiB slices)
// on the shaped 8 × 64 MiB set, in the same run.
//
// What transfermanager does (storage v1.70.0, transfermanager/downloader.go):
// the first shard is a whole-object read (NewReader) that it abandons after
// partSize bytes, the rest are ranged reads; it computes a CRC32C per shard
// and joins them by running crc32.Update over zero bytes as long as each
// later shard (joinCRC32C) — CPU proportional to the object size again —
// and compares with the object's CRC32C (checksumObject, skipped when the
// stored CRC32C is 0). So it does verify sharded full-object downloads, but
// not ranged ones (DownloadRange), and it checks no shard's length: a short
// shard surfaces only as a CRC mismatch, which is returned, not retried.
// Its retries are the storage client's (per request, no resume past a
// failed reopen, no stall watchdog beyond the client's first-byte timeout),
// and its workers are per Downloader: no process-wide budget, no priorities.
func benchTransferManager(b *testing.B, set *benchSet) {
	const conns = 8
	set.s.SetShape(gcsLink)
	d := newDownloader(b, set.g, Config{SliceSize: 8 << 20, Connections: conns})
	var ours, tm time.Duration
	for b.Loop() {
		ours += set.fetchAll(b, d)
		tm += transferManagerAll(b, set)
	}
	n := int64(b.N) * set.bytes
	b.ReportMetric(mbps(n, ours), "ours-MB/s")
	b.ReportMetric(mbps(n, tm), "transfermanager-MB/s")
	b.ReportMetric(tm.Seconds()/ours.Seconds(), "ours/tm")
}

// transferManagerAll downloads the set with transfermanager and returns the
// elapsed time.
func transferManagerAll(b *testing.B, set *benchSet) time.Duration {
	b.Helper()
	start := time.Now()
	tm, err := transfermanager.NewDownloader(set.g.client,
		transfermanager.WithWorkers(8), transfermanager.WithPartSize(8<<20))
	if err != nil {
		b.Fatal(err)
	}
	for _, a := range set.attrs {
		gen := a.Generation
		in := &transfermanager.DownloadObjectInput{
			Bucket: a.Bucket, Object: a.Name, Generation: &gen, Destination: discardWriterAt{},
		}
		if err := tm.DownloadObject(context.Background(), in); err != nil {
			b.Fatal(err)
		}
	}
	results, err := tm.WaitAndClose()
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range results {
		if r.Err != nil {
			b.Errorf("transfermanager %s: %v", r.Object, r.Err)
		}
	}
	return time.Since(start)
}
