package gpufeed

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/gpu"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/synth"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/tier"
)

const testBucket = "b"

// env is a synthetic dataset in a fetch.Dir source, a real downloader and
// tier.Cache over it, an mmapstore.Store over the cache, and device 0 of a
// Fake.
type env struct {
	src   *fetch.Dir
	store *mmapstore.Store
	data  synth.Dataset
	ds    loader.Dataset
	dev   *gpu.FakeDevice
}

// newEnv writes data under gs://b/train/ and opens the cache and a fake
// device with fc. At the end of the test, after every Feed is closed, it
// closes the device and checks that no goroutine and no lease is left.
func newEnv(t testing.TB, data synth.Dataset, fc gpu.FakeConfig) *env {
	t.Helper()
	t.Cleanup(func() { checkNoGoroutines(t) }) // runs last
	dir := cachetest.NewDir(t)
	if err := data.WriteDir(dir.Root, testBucket, "train/"); err != nil {
		t.Fatal(err)
	}
	src := dir.Src
	c := cachetest.Cache(t, src, cachetest.NewDownloader(t, src), tier.Config{})
	s := mmapstore.New(c.Opener(), mmapstore.Config{Revalidate: -1})
	cachetest.CloseAtEnd(t, "Store", s, mmapstore.ErrClosed)
	t.Cleanup(func() {
		if n := s.Stats().Leases; n != 0 {
			t.Errorf("%d leases outstanding after every Feed closed", n)
		}
	})
	ds, err := loader.FromPattern(context.Background(), src, testBucket, "train/", synth.Pattern)
	if err != nil {
		t.Fatalf("FromPattern: %v", err)
	}
	b, err := gpu.NewFake(fc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := b.Open(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil && !errors.Is(err, gpu.ErrClosed) {
			t.Errorf("device Close: %v", err)
		}
		b.Close()
	})
	e := &env{src: src, store: s, data: data, ds: ds, dev: d.(*gpu.FakeDevice)}
	t.Cleanup(func() { // after every Feed's Close, before the device's
		if _, _, err := e.dev.MemInfo(context.Background()); err == nil {
			e.checkFreed(t)
		}
	})
	return e
}

// config returns a loader configuration of the env's dataset.
func (e *env) config(batch, prefetch, epochs int) loader.Config {
	return loader.Config{Dataset: e.ds, BatchSize: batch, Prefetch: prefetch, Workers: 2, Seed: 5, Window: 2,
		Epochs: epochs}
}

// open returns a Feed over the env, closed at the end of the test.
func (e *env) open(t testing.TB, cfg loader.Config) *Feed {
	t.Helper()
	f, err := New(t.Context(), e.dev, loader.FromStore(e.store), Config{Loader: cfg})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

// checkFreed fails if device memory is still allocated.
func (e *env) checkFreed(t testing.TB) {
	t.Helper()
	free, total, err := e.dev.MemInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if free != total {
		t.Errorf("%d of %d bytes of device memory still allocated", total-free, total)
	}
}

// checkNoGoroutines fails if a goroutine of a Loader, a Feed or a fake
// stream is alive.
func checkNoGoroutines(t testing.TB) {
	t.Helper()
	cachetest.Goroutines(t, "cacheagent/loader.(*Loader)", "cacheagent/gpufeed.(*", "gpu.(*FakeDevice).NewStream")
}

// batchIDs is what a test keeps of a batch.
type batchIDs struct {
	epoch, index int
	ids          []int64
}

// checkBatch waits for b's copies, then verifies that its host arrays hold
// the rows of its ids and that the device holds the same bytes.
func (e *env) checkBatch(t testing.TB, b *Batch) {
	t.Helper()
	if err := b.Ready(t.Context()); err != nil {
		t.Fatalf("batch %d/%d: Ready: %v", b.Epoch, b.Index, err)
	}
	x, ys := b.Host[0], b.Host[1]
	yv, err := ys.Int64s()
	if err != nil {
		t.Fatalf("y view: %v", err)
	}
	for i, id := range b.IDs {
		row, err := x.Row(i)
		if err != nil {
			t.Fatal(err)
		}
		if synth.RowID(row) != id || yv[i] != id {
			t.Fatalf("batch %d/%d sample %d: x holds %d, y %d; want %d", b.Epoch, b.Index, i, synth.RowID(row), yv[i], id)
		}
	}
	for j, d := range b.Device {
		h := b.Host[j]
		if d.Len != len(h.Data) || d.Ptr != d.Mem.Ptr() || d.DType != h.DType || d.Shape[0] != b.Len() {
			t.Fatalf("batch %d/%d array %s: device %+v; host %d bytes of %v %v", b.Epoch, b.Index, b.Names[j], d,
				len(h.Data), h.DType, h.Shape)
		}
		got := make([]byte, d.Len)
		if err := e.dev.CopyDtoH(t.Context(), got, d.Mem, 0); err != nil {
			t.Fatalf("CopyDtoH: %v", err)
		}
		if !bytes.Equal(got, h.Data) {
			t.Fatalf("batch %d/%d array %s: device bytes differ from the host batch", b.Epoch, b.Index, b.Names[j])
		}
	}
}

// drain reads every batch of f, checking each one, and returns the ids.
func (e *env) drain(t testing.TB, f *Feed) []batchIDs {
	t.Helper()
	var out []batchIDs
	for {
		b, err := f.Next(t.Context())
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("Next after %d batches: %v", len(out), err)
		}
		e.checkBatch(t, b)
		out = append(out, batchIDs{b.Epoch, b.Index, append([]int64(nil), b.IDs...)})
		b.Release()
	}
}

// hostIDs reads cfg's batches with a plain Loader and returns their ids.
func (e *env) hostIDs(t testing.TB, cfg loader.Config) []batchIDs {
	t.Helper()
	l, err := loader.New(loader.FromStore(e.store), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var out []batchIDs
	for {
		b, err := l.Next(t.Context())
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, batchIDs{b.Epoch, b.Index, append([]int64(nil), b.IDs...)})
		b.Release()
	}
}

// cancelled returns a context that is already done.
func cancelled(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}
