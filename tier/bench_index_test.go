package tier

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// installSynthetic installs n base entries for objects that have no files,
// named like `cacheagent bench control`'s small objects (100 per bucket),
// least recently used first. Only the in-memory index is built: this is
// for measuring its footprint, not for serving.
func installSynthetic(c *Cache, n int) {
	now := time.Now().UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range n {
		a := object.Attrs{Object: object.Object{Bucket: fmt.Sprintf("bench-s%04d", i/100),
			Name: fmt.Sprintf("o%07d", i), Generation: int64(1_700_000_000_000_000 + i)},
			Size: 1 << 10, CRC32C: uint32(i), HasCRC32C: true, Updated: time.Unix(0, now)}
		e := newEntry(c.base, a, 4<<10, fileIdent{ino: uint64(i), mtime: now}, now+int64(i))
		c.installLocked(e)
	}
}

// heapInUse returns the live heap's bytes and objects after a full
// collection.
func heapInUse() (bytes, objects uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.HeapObjects
}

// timeGC returns the mean duration of k full collections.
func timeGC(k int) time.Duration {
	start := time.Now()
	for range k {
		runtime.GC()
	}
	return time.Since(start) / time.Duration(k)
}

// BenchmarkIndexFootprint measures what the in-memory index of 100k cached
// objects costs the process: live heap bytes and objects per entry (what
// the garbage collector marks at every cycle; both are deterministic), and
// the time of a full collection with the index in the heap (which depends
// on the machine and its load).
//
//	go test -run '^$' -bench IndexFootprint -benchtime 3x ./tier
func BenchmarkIndexFootprint(b *testing.B) {
	const n = 100_000
	env := newDirEnv(b)
	var perEntry, objects, gcMs float64
	for b.Loop() {
		b.StopTimer()
		c, err := Open(context.Background(), env.config(b.TempDir(), 0))
		if err != nil {
			b.Fatal(err)
		}
		before, objsBefore := heapInUse()
		b.StartTimer()
		installSynthetic(c, n)
		b.StopTimer()
		after, objsAfter := heapInUse()
		full := timeGC(5)
		if st := c.Stats().Base(); st.Entries != n {
			b.Fatalf("entries = %d; want %d", st.Entries, n)
		}
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
		perEntry += float64(after-before) / n
		objects += float64(objsAfter-objsBefore) / n
		gcMs += float64(full.Microseconds()) / 1000
		b.StartTimer()
	}
	k := float64(b.N)
	b.ReportMetric(perEntry/k, "heap-B/entry")
	b.ReportMetric(objects/k, "objects/entry")
	b.ReportMetric(gcMs/k, "gc-ms")
}

// BenchmarkStats100k measures Stats on a cache holding 100k entries with
// a shm tier (what every status request and metrics scrape reads). It
// holds the cache's lock for its whole run.
func BenchmarkStats100k(b *testing.B) {
	env := newDirEnv(b)
	c := openCache(b, env.shmConfig(b.TempDir(), shmDir(b), 0, 0))
	installSynthetic(c, 100_000)
	for b.Loop() {
		if st := c.Stats().Base(); st.Entries != 100_000 {
			b.Fatalf("entries = %d; want 100000", st.Entries)
		}
	}
}

// BenchmarkThaw measures what freezing costs a use of a packed entry: a
// lookup of a warm entry, against thawing a frozen one and freezing it
// again (what a use of a cold object and the trim after it do).
//
//	go test -run '^$' -bench Thaw -count 3 ./tier
func BenchmarkThaw(b *testing.B) {
	const n = 2000
	env := newDirEnv(b)
	keys := make([]string, n)
	for i := range n {
		env.put(b, "bkt", fmt.Sprintf("train/n%05d/img-%07d.JPEG", i%1000, i), pattern(i, 4<<10))
		keys[i] = indexKey("bkt", fmt.Sprintf("train/n%05d/img-%07d.JPEG", i%1000, i))
	}
	c := openCache(b, env.coldConfig(b.TempDir(), 1<<30, 1))
	for i := range n {
		h, err := c.Open(context.Background(), obj("bkt", fmt.Sprintf("train/n%05d/img-%07d.JPEG", i%1000, i)))
		if err != nil {
			b.Fatal(err)
		}
		h.Close()
	}
	if err := flushAll(c); err != nil { // clean: freezable
		b.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg.warmEntries = n * 2 // from here the benchmark freezes by itself
	for _, k := range keys {
		c.entryLocked(k) // all warm
	}
	b.Run("warm", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if c.entryLocked(keys[i*7919%n]) == nil {
				b.Fatal("not cached")
			}
			i++
		}
	})
	for _, k := range keys {
		c.freezeLocked(c.entryLocked(k))
	}
	b.Run("thaw-and-freeze", func(b *testing.B) {
		i := 0
		for b.Loop() {
			e := c.entryLocked(keys[i*7919%n])
			if e == nil || !c.freezableLocked(e) || !c.freezeLocked(e) {
				b.Fatal("cannot freeze")
			}
			if err := c.cold.tidy(); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkOpenHit measures an Open and Close of a cached packed object
// (a hit: the trim after it included).
//
//	go test -run '^$' -bench OpenHit -count 3 ./tier
func BenchmarkOpenHit(b *testing.B) {
	const n = 1000
	env := newDirEnv(b)
	for i := range n {
		env.put(b, "bkt", fmt.Sprintf("h%05d", i), pattern(i, 4<<10))
	}
	c := openCache(b, env.packConfig(b.TempDir(), 1<<30))
	ctx := context.Background()
	for i := range n {
		h, err := c.Open(ctx, obj("bkt", fmt.Sprintf("h%05d", i)))
		if err != nil {
			b.Fatal(err)
		}
		h.Close()
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		h, err := c.Open(ctx, obj("bkt", fmt.Sprintf("h%05d", i%n)))
		if err != nil {
			b.Fatal(err)
		}
		h.Close()
		i++
	}
}
