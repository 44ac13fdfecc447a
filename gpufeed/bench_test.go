package gpufeed

import (
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/gpu"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/synth"
)

// BenchmarkFeed reads b.N batches of 256 samples of 4 KiB through a Feed on
// the Fake, after a warm-up epoch, waiting for each batch's copy as a
// training step would. It reports the share of the consumer's time spent
// waiting for copies (copy-wait-%, the figure to keep under 5 on a real
// GPU) and its samples/s against a plain Loader's over as many batches in
// the same run (vs-loader). The Fake's copies are memcpy, not PCIe.
func BenchmarkFeed(b *testing.B) {
	const batch = 256
	data := synth.Uniform(8, 2048, 4096) // 64 MiB, 64 batches per epoch
	e := newEnv(b, data, gpu.FakeConfig{})
	cfg := e.config(batch, 4, 2+b.N/int(data.Samples()/batch))
	cfg.Workers = 0

	// The baseline: a plain Loader, same configuration.
	l, err := loader.New(loader.FromStore(e.store), cfg)
	if err != nil {
		b.Fatal(err)
	}
	per := l.BatchesPerEpoch()
	step := func(next func() (release func(), err error)) {
		release, err := next()
		if err != nil {
			b.Fatal(err)
		}
		release()
	}
	plain := func() (func(), error) {
		hb, err := l.Next(b.Context())
		if err != nil {
			return nil, err
		}
		return hb.Release, nil
	}
	for range per { // warm-up epoch: fills the cache
		step(plain)
	}
	t0 := time.Now()
	for range b.N {
		step(plain)
	}
	base := time.Since(t0)
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}

	f := e.open(b, cfg)
	fed := func() (func(), error) {
		fb, err := f.Next(b.Context())
		if err != nil {
			return nil, err
		}
		return fb.Release, fb.Ready(b.Context())
	}
	for range per {
		step(fed)
	}
	s0 := f.Stats()
	b.SetBytes(int64(batch * (data.RowBytes + 8)))
	b.ResetTimer()
	t1 := time.Now()
	for range b.N {
		step(fed)
	}
	wall := time.Since(t1)
	b.StopTimer()
	s1 := f.Stats()
	b.ReportMetric(100*(s1.CopyWait-s0.CopyWait).Seconds()/wall.Seconds(), "copy-wait-%")
	b.ReportMetric(base.Seconds()/wall.Seconds(), "vs-loader")
	b.ReportMetric(float64(b.N*batch)/wall.Seconds(), "samples/s")
}
