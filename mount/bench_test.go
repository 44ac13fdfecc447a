package mount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/bench/testenv"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// Each benchmark reports its own rates for the mount and for the baseline in
// the same run, and their ratio ("mount/direct" or "mount/prefetch"): ns/op
// covers both. "passthrough" is 1 when the kernel read the cached files
// itself, and "fuse-reads/op" counts the reads this process served.

// benchReadBuf is the read size of the sequential benchmarks.
const benchReadBuf = 1 << 20

// benchModes are the modes of the warm benchmarks: each way of serving
// reads, and "default" (OpenAuto, which picks one of them by the dataset).
var benchModes = append(slices.Clone(modes), mode{name: "default", open: OpenAuto})

// warmCache is a disk cache over a local-directory source (no emulator: the
// warm benchmarks never download, and a Dir keeps the data out of memory).
type warmCache struct {
	cache *tier.Cache
	src   *fetch.Dir
	objs  []object.Attrs
	paths []string // the source files, as objs: a local file per object, what direct reads read
}

// newWarmCache writes files of the given size under bucket "data" and caches
// them all, packing those below packBelow (tier.Config.PackBelow).
func newWarmCache(b *testing.B, names []string, size, packBelow int64) *warmCache {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	for i, n := range names {
		if err := writePattern(filepath.Join(dir, "src", "data", n), uint64(i), size); err != nil {
			b.Fatal(err)
		}
	}
	src, err := fetch.NewDir(filepath.Join(dir, "src"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { src.Close() })
	dl, err := fetch.NewDownloader(src, fetch.Config{})
	if err != nil {
		b.Fatal(err)
	}
	c, err := tier.Open(ctx, tier.Config{Dir: filepath.Join(dir, "cache"), Source: src, Downloader: dl,
		PackBelow: packBelow})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	w := &warmCache{cache: c, src: src}
	for a, err := range src.List(ctx, "data", "") {
		if err != nil {
			b.Fatal(err)
		}
		w.objs = append(w.objs, a)
	}
	if err := c.Prefetch(ctx, w.objs, object.Demand, nil); err != nil {
		b.Fatal(err)
	}
	for _, a := range w.objs {
		w.paths = append(w.paths, filepath.Join(dir, "src", "data", a.Name))
	}
	return w
}

// writePattern writes size pattern bytes to path, 4 MiB at a time, and
// drops the file's pages from the page cache, so that, like a dataset on a
// local disk that has been read before, its cached pages come from reading
// it (readahead), not from the writes: a file's page-cache folios follow
// the way they were filled, and large folios from 4 MiB writes make a
// 100 KiB file's reads about a third cheaper than pages read in (see
// docs/benchmarks.md, "FUSE mount").
func writePattern(path string, seed uint64, size int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 4<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		p := buf[:min(int64(len(buf)), size-off)]
		emulator.FillPattern(p, seed, off)
		if _, err := f.Write(p); err != nil {
			f.Close()
			return err
		}
	}
	err = f.Sync()
	if err == nil {
		err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
	return errors.Join(err, f.Close())
}

// readAll reads path to the end through buf and returns the byte count,
// with plain open, read and close system calls, as a C or Python reader
// does: os.Open would register the file with Go's poller, which a FUSE
// file accepts (it implements poll) and a disk file does not, adding an
// epoll_ctl pair to every open through the mount alone.
func readAll(path string, buf []byte) (int64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var n int64
	for {
		m, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return n, nil
		}
		n += int64(m)
	}
}

// benchMount mounts w's cache in the given mode for a benchmark; seams (if
// any) sets up the FS first.
func benchMount(b *testing.B, c Cache, src Lister, m mode, seams func(*FS)) (*Server, string) {
	b.Helper()
	cfg := Config{Cache: c, Source: src, Roots: []Root{{Bucket: "data"}}, ListTTL: -1}
	m.apply(&cfg)
	srv := mountAt(b, filepath.Join(b.TempDir(), "mnt"), cfg, seams)
	return srv, srv.Mountpoint()
}

// timeRead reads every path once and returns the time taken.
func timeRead(b *testing.B, paths []string, buf []byte, want int64) time.Duration {
	b.Helper()
	start := time.Now()
	for _, p := range paths {
		n, err := readAll(p, buf)
		if err != nil || n != want {
			b.Fatalf("read %s: %d bytes, %v; want %d", p, n, err, want)
		}
	}
	return time.Since(start)
}

// reportMode reports the passthrough and skip-open flags and the reads
// served per op.
func reportMode(b *testing.B, srv *Server, readsBefore int64) {
	b.ReportMetric(flag(srv.Passthrough()), "passthrough")
	b.ReportMetric(flag(srv.Opening() == OpenSkip), "skip-open")
	b.ReportMetric(float64(srv.Stats().Reads-readsBefore)/float64(b.N), "fuse-reads/op")
}

// flag is 1 for true and 0 for false, as a metric.
func flag(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// BenchmarkWarmSequential reads a cached 1 GiB file sequentially through the
// mount and straight from the cached file.
func BenchmarkWarmSequential(b *testing.B) {
	size := int64(1 << 30)
	if testing.Short() {
		size = 64 << 20
	}
	w := newWarmCache(b, []string{"big.bin"}, size, 0)
	buf := make([]byte, benchReadBuf)
	for _, m := range benchModes {
		b.Run(m.name, func(b *testing.B) {
			srv, mp := benchMount(b, w.cache, w.src, m, nil)
			through := []string{filepath.Join(mp, "data", "big.bin")}
			timeRead(b, through, buf, size) // warm both page caches
			timeRead(b, w.paths, buf, size)
			reads := srv.Stats().Reads
			var tm, td time.Duration
			b.SetBytes(2 * size)
			b.ResetTimer()
			for range b.N {
				tm += timeRead(b, through, buf, size)
				td += timeRead(b, w.paths, buf, size)
			}
			b.StopTimer()
			mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
			b.ReportMetric(mbps(tm), "mount-MB/s")
			b.ReportMetric(mbps(td), "direct-MB/s")
			b.ReportMetric(mbps(tm)/mbps(td), "mount/direct")
			reportMode(b, srv, reads)
		})
	}
}

// BenchmarkWarmSmallFiles opens, reads and closes cached 100 KiB files
// through the mount and straight from local files (the dataset's, a file
// per object), with the cache packing them into segments (the default:
// reads served at their offset, no passthrough) and with a file each. In mode
// "passthrough-reopen" no backing stays idle, so every open opens and
// registers its file again, as it does once a dataset has many more files
// than the backings kept idle.
func BenchmarkWarmSmallFiles(b *testing.B) {
	const size = 100 << 10
	n := 1000
	if testing.Short() {
		n = 100
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("small/%04d.bin", i)
	}
	buf := make([]byte, 128<<10)
	reopen := mode{name: "passthrough-reopen", open: OpenAsk}
	for _, layout := range []struct {
		name      string
		packBelow int64
	}{{"packed", 0}, {"files", -1}} {
		w := newWarmCache(b, names, size, layout.packBelow)
		for _, m := range append(slices.Clone(benchModes), reopen) {
			b.Run(layout.name+"/"+m.name, func(b *testing.B) {
				var seams func(*FS)
				if m == reopen {
					seams = func(f *FS) { f.maxIdleBackings = 0 }
				}
				srv, mp := benchMount(b, w.cache, w.src, m, seams)
				through := make([]string, n)
				for i, a := range w.objs {
					through[i] = filepath.Join(mp, "data", a.Name)
				}
				timeRead(b, through, buf, size) // warm both page caches
				timeRead(b, w.paths, buf, size)
				reads := srv.Stats().Reads
				var tm, td time.Duration
				b.ResetTimer()
				for range b.N {
					tm += timeRead(b, through, buf, size)
					td += timeRead(b, w.paths, buf, size)
				}
				b.StopTimer()
				rate := func(d time.Duration) float64 { return float64(n*b.N) / d.Seconds() }
				b.ReportMetric(rate(tm), "mount-files/s")
				b.ReportMetric(rate(td), "direct-files/s")
				b.ReportMetric(rate(tm)/rate(td), "mount/direct")
				reportMode(b, srv, reads)
			})
		}
	}
}

// BenchmarkColdRead reads 8 × 64 MiB objects that are not cached, with 8
// concurrent readers through the mount (each open downloads its object),
// against prefetching the same objects into the cache. Every read and every
// prefetch starts from a new, empty cache (and a fresh mount).
func BenchmarkColdRead(b *testing.B) {
	const (
		count = 8
		size  = 64 << 20
	)
	ce := newColdEnv(b, count, size)
	prefetch := func() time.Duration {
		c, done := ce.newCache(b)
		defer done()
		start := time.Now()
		if err := c.Prefetch(context.Background(), ce.attrs, object.Demand, nil); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			mountRead := func() (time.Duration, bool) {
				c, done := ce.newCache(b)
				defer done()
				return coldMountRead(b, c, ce.src, ce.attrs, m)
			}
			mountRead() // warm up connections, the emulator and the allocator
			prefetch()
			var tm, tp time.Duration
			pt := false
			b.SetBytes(2 * count * size)
			b.ResetTimer()
			for i := range b.N {
				if i%2 == 1 { // alternate the order: neither always goes first
					tp += prefetch()
				}
				d, passthrough := mountRead()
				tm, pt = tm+d, passthrough
				if i%2 == 0 {
					tp += prefetch()
				}
			}
			b.StopTimer()
			mbps := func(d time.Duration) float64 { return float64(count*size*b.N) / d.Seconds() / 1e6 }
			b.ReportMetric(mbps(tm), "mount-MB/s")
			b.ReportMetric(mbps(tp), "prefetch-MB/s")
			b.ReportMetric(mbps(tm)/mbps(tp), "mount/prefetch")
			b.ReportMetric(flag(pt), "passthrough")
		})
	}
}

// coldEnv is an emulator holding the cold benchmark's objects.
type coldEnv struct {
	src   *fetch.GCS
	dl    *fetch.Downloader
	attrs []object.Attrs
}

// newColdEnv starts an emulator with count objects of size bytes under
// data/cold/.
func newColdEnv(b *testing.B, count, size int) *coldEnv {
	b.Helper()
	ctx := context.Background()
	data := emulator.Pattern(1, size) // one copy here; the emulator keeps one per object
	var objs []fakestorage.Object
	for i := range count {
		objs = append(objs, obj("data", fmt.Sprintf("cold/%d.bin", i), data))
	}
	emu := cachetest.Emulator(b, emulator.Options{Objects: objs})
	src, err := fetch.NewGCS(ctx, fetch.GCSConfig{Endpoint: emu.Endpoint()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { src.Close() })
	dl, err := fetch.NewDownloader(src, fetch.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ce := &coldEnv{src: src, dl: dl}
	for a, err := range src.List(ctx, "data", "cold/") {
		if err != nil {
			b.Fatal(err)
		}
		ce.attrs = append(ce.attrs, a)
	}
	return ce
}

// newCache returns a new, empty cache; done closes it and deletes its files.
func (ce *coldEnv) newCache(b *testing.B) (c *tier.Cache, done func()) {
	b.Helper()
	dir, err := os.MkdirTemp(b.TempDir(), "cache")
	if err != nil {
		b.Fatal(err)
	}
	c, err = tier.Open(context.Background(), tier.Config{Dir: dir, Source: ce.src, Downloader: ce.dl})
	if err != nil {
		b.Fatal(err)
	}
	return c, func() {
		if err := c.Close(); err != nil {
			b.Error(err)
		}
		os.RemoveAll(dir)
	}
}

// coldMountRead mounts c, reads every object of attrs through it with one
// reader each, and returns the time the reads took and whether the kernel
// read the cached files itself.
func coldMountRead(b *testing.B, c Cache, src Lister, attrs []object.Attrs, m mode) (time.Duration, bool) {
	b.Helper()
	cfg := Config{Cache: c, Source: src, Roots: []Root{{Bucket: "data"}}, ListTTL: -1}
	m.apply(&cfg)
	srv, err := Mount(context.Background(), filepath.Join(b.TempDir(), "mnt"), cfg)
	if err != nil {
		testenv.Cannot(b, "mount: %v", err)
	}
	defer func() {
		if err := srv.Unmount(); err != nil {
			b.Error(err)
		}
		srv.Wait()
	}()
	if _, err := os.ReadDir(filepath.Join(srv.Mountpoint(), "data", "cold")); err != nil { // list before timing
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(attrs))
	start := time.Now()
	for _, a := range attrs {
		wg.Go(func() {
			n, err := readAll(filepath.Join(srv.Mountpoint(), "data", a.Name), make([]byte, benchReadBuf))
			if err == nil && n != a.Size {
				err = fmt.Errorf("read %s: %d bytes; want %d", a.Name, n, a.Size)
			}
			errs <- err
		})
	}
	wg.Wait()
	d := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return d, srv.Passthrough()
}
