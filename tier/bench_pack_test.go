package tier

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// seedPacked creates n packed objects of size bytes in dir as a closed cache
// leaves them: their index records, and sparse segment files reaching their
// ends (Open checks sizes, not bytes), quickly.
func seedPacked(tb testing.TB, dir string, n int, size int64) {
	tb.Helper()
	lay := newLayout(dir)
	if err := lay.create(); err != nil {
		tb.Fatal(err)
	}
	x, err := openIndex(lay.index, newDirEnvLogger())
	if err != nil {
		tb.Fatal(err)
	}
	defer x.close()
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	span := roundUp(size, pageSize)
	perSeg := int(segmentMax / span)
	const batch = 100_000
	keys, recs := make([]string, 0, batch), make([]record, 0, batch)
	for i := 0; i < n; i++ {
		seg, slot := uint64(i/perSeg), int64(i%perSeg)
		name := fmt.Sprintf("train/n%05d/img-%07d.JPEG", i%1000, i)
		keys = append(keys, indexKey("bkt", name))
		recs = append(recs, record{gen: int64(1_700_000_000_000_000 + i), size: size, blocks: span,
			hasCRC: true, crc: uint32(i), updated: base, checked: base, access: base + int64(i),
			packed: true, seg: seg, off: slot * span})
		if len(keys) == batch || i == n-1 {
			if err := x.putBatch(keys, recs); err != nil {
				tb.Fatal(err)
			}
			keys, recs = keys[:0], recs[:0]
		}
	}
	for s := 0; s*perSeg < n; s++ {
		objs := min(perSeg, n-s*perSeg)
		if err := os.Truncate(segPath(lay.seg, uint64(s)), 0); err != nil && !os.IsNotExist(err) {
			tb.Fatal(err)
		}
		f, err := os.Create(segPath(lay.seg, uint64(s)))
		if err != nil {
			tb.Fatal(err)
		}
		if err := f.Truncate(int64(objs) * span); err != nil {
			tb.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkReopenPacked measures a restart with an ImageNet-sized cache of
// packed objects (1.28 M of 110 KB by default; $TIER_REOPEN_OBJECTS sets
// another count; $TIER_REOPEN_KEEP names a directory to leave it in): Open's
// time in this process, and in a fresh one its time,
// RSS and peak RSS after Open. Nothing is downloaded.
func BenchmarkReopenPacked(b *testing.B) {
	n := 1_281_167
	if v, err := strconv.Atoi(os.Getenv("TIER_REOPEN_OBJECTS")); err == nil && v > 0 {
		n = v
	}
	dir := b.TempDir()
	if keep := os.Getenv("TIER_REOPEN_KEEP"); keep != "" { // leave the cache there, e.g. for a daemon to open
		dir = keep
	}
	seedPacked(b, dir, n, 110_000)
	env := newDirEnv(b)
	cfg := env.config(dir, 1<<50) // room for the objects, which the sparse segments do not occupy
	b.ReportMetric(timeOpens(b, env, cfg, int64(n)), "s/open")
	rss, hwm, childOpen := reopenInChild(b, dir)
	b.ReportMetric(rss, "MB-rss")
	b.ReportMetric(hwm, "MB-peak-rss")
	b.ReportMetric(childOpen, "s/open-cold-process")
}
