package tier

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// seedObject writes a cached object of size bytes into the closed disk
// cache in dir, as a fill would have left it, and returns its attributes'
// generation.
func seedObject(tb testing.TB, dir, name string, size int64) int64 {
	tb.Helper()
	lay := newLayout(dir)
	if err := lay.create(); err != nil {
		tb.Fatal(err)
	}
	const gen = 1_700_000_000_000_000_000
	p := lay.path(idOf("bkt", name, gen))
	f, err := os.Create(p)
	if err != nil {
		tb.Fatal(err)
	}
	chunk := pattern(1, 8<<20)
	for off := int64(0); off < size; off += int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), size-off)]); err != nil {
			tb.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		tb.Fatal(err)
	}
	x, err := openIndex(lay.index, newDirEnvLogger())
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now().UnixNano()
	r := record{gen: gen, size: size, blocks: blocksOf(fi), checked: now, access: now}
	if err := x.put(indexKey("bkt", name), r); err != nil {
		tb.Fatal(err)
	}
	if err := x.close(); err != nil {
		tb.Fatal(err)
	}
	return gen
}

// BenchmarkPromote1GiB measures promotion of a 1 GiB object from the disk
// tier to /dev/shm against cp(1) copying the same file to the same tmpfs in
// the same run, alternating the two. Both read the source from the page
// cache (it was just written). Reports the throughput of each and
// promote/cp, which must stay at 0.7 or above.
func BenchmarkPromote1GiB(b *testing.B) {
	const size = 1 << 30
	dir, shm := b.TempDir(), shmDir(b)
	gen := seedObject(b, dir, "shard", size)
	env := newDirEnv(b)
	cfg := env.shmConfig(dir, shm, 0, 2*size)
	cfg.PromoteHits = -1
	c := openCache(b, cfg)
	ctx := context.Background()
	src := diskPath(c, "bkt", "shard", gen)
	dst := filepath.Join(shm, "cp.bin")
	var cpTime, promoteTime time.Duration
	for b.Loop() {
		start := time.Now()
		if out, err := exec.Command("cp", src, dst).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v\n%s", err, out)
		}
		cpTime += time.Since(start)
		b.StopTimer()
		if err := os.Remove(dst); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		start = time.Now()
		if n, err := c.Promote(ctx, "bkt", "shard"); n != 1 || err != nil {
			b.Fatalf("Promote = %d, %v", n, err)
		}
		promoteTime += time.Since(start)
		b.StopTimer()
		if res, err := c.Demote(ctx, "bkt", ""); res.Evicted != 1 || err != nil {
			b.Fatalf("Demote = %+v, %v", res, err)
		}
		b.StartTimer()
	}
	n := float64(b.N) * size
	b.ReportMetric(n/cpTime.Seconds()/1e9, "cp-GB/s")
	b.ReportMetric(n/promoteTime.Seconds()/1e9, "promote-GB/s")
	b.ReportMetric(cpTime.Seconds()/promoteTime.Seconds(), "promote/cp")
	if env.dl.calls.Load() != 0 {
		b.Fatalf("downloads = %d; want 0", env.dl.calls.Load())
	}
}
