package formats_test

import (
	"context"
	"io"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/loadertest"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/spec"
)

// BenchmarkTokenWindows measures the gather of token windows end to end
// (seq_len 2048 uint16: 4 KiB samples, batch 64, global shuffle, 4 raw
// files of 16 MiB, warm in the cache) and, in the same run, a single-core
// memcpy of as many random 4 KiB runs of a 64 MiB buffer: vs-memcpy is
// the loader's rate over memcpy's.
func BenchmarkTokenWindows(b *testing.B) {
	const L, batch, files, tokensPerFile = 2048, 64, 4, 8 << 20
	e := loadertest.New(b)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range files {
		buf := make([]byte, 2*tokensPerFile)
		for k := range buf {
			buf[k] = byte(rng.Uint32())
		}
		e.Dir.Put(b, loadertest.Bucket, "bench/part-"+strconv.Itoa(i)+".bin", buf)
	}
	ds, err := build(e, "bench/", "part-*.bin", spec.Spec{Format: "tokens", TokenDType: "uint16", SeqLen: L})
	if err != nil {
		b.Fatal(err)
	}
	sample := (L + 1) * 2
	epoch := func(ep int) int64 {
		l, err := loader.New(e.Source(), loader.Config{Dataset: ds, BatchSize: batch, Shuffle: sampler.Global, Seed: 1, Epoch: ep})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		var n int64
		for {
			bt, err := l.Next(context.Background())
			if err == io.EOF {
				return n
			}
			if err != nil {
				b.Fatal(err)
			}
			n += int64(bt.Len() * sample)
			bt.Release()
		}
	}
	epoch(0) // warm the cache and the mappings
	// The baseline copies from memory as real as the loader's: written
	// first, so that its pages are not the kernel's one shared zero page
	// (always in cache), which made memcpy 2x faster in some runs.
	src := make([]byte, files*2*tokensPerFile)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	dst := make([]byte, batch*sample)
	var loaderBytes, copyBytes int64
	var loaderTime, copyTime time.Duration
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		loaderBytes += epoch(i + 1)
		loaderTime += time.Since(t0)
		t0 = time.Now()
		for done := int64(0); done < loaderBytes-copyBytes; done += int64(len(dst)) {
			for k := range batch {
				off := rng.IntN(len(src) - sample)
				copy(dst[k*sample:(k+1)*sample], src[off:off+sample])
			}
		}
		copyBytes = loaderBytes
		copyTime += time.Since(t0)
	}
	lr := float64(loaderBytes) / loaderTime.Seconds()
	cr := float64(copyBytes) / copyTime.Seconds()
	b.ReportMetric(lr/1e9, "loader-GB/s")
	b.ReportMetric(cr/1e9, "memcpy-GB/s")
	b.ReportMetric(lr/cr, "vs-memcpy")
}
