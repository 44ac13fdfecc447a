package gpufeed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/cacheagent/cacheagent/gpu"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/synth"
)

// smallData is 67 samples of 40-byte rows in four shards of uneven sizes.
var smallData = synth.Dataset{Rows: []int{20, 13, 25, 9}, RowBytes: 40}

func equalBatches(a, b []batchIDs) bool {
	return slices.EqualFunc(a, b, func(x, y batchIDs) bool {
		return x.epoch == y.epoch && x.index == y.index && slices.Equal(x.ids, y.ids)
	})
}

// TestFeedMatchesHost reads three epochs: every batch's device memory holds
// its host batch, and the batches are the plain Loader's, in its order.
func TestFeedMatchesHost(t *testing.T) {
	for _, prefetch := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("prefetch=%d", prefetch), func(t *testing.T) {
			e := newEnv(t, smallData, gpu.FakeConfig{})
			cfg := e.config(8, prefetch, 3)
			f := e.open(t, cfg)
			got := e.drain(t, f)
			if want := e.hostIDs(t, cfg); !equalBatches(got, want) {
				t.Fatalf("feed batches differ from the loader's:\n got %v\nwant %v", got, want)
			}
			st := f.Stats()
			if st.Batches != int64(len(got)) || st.Copies != 2*st.Batches || st.Loader.Batches != st.Batches {
				t.Errorf("stats %+v after %d batches", st, len(got))
			}
			if want := int64(3 * 67 * (40 + 8)); st.BytesCopied != want || st.Loader.Bytes != want {
				t.Errorf("BytesCopied = %d, loader bytes %d; want %d", st.BytesCopied, st.Loader.Bytes, want)
			}
			if st.Loader.ZeroCopy != 0 {
				t.Errorf("%d zero-copy batches; the feed gathers every batch into pinned memory", st.Loader.ZeroCopy)
			}
			if s := st.CopyWaitShare(); s < 0 || s > 1 || st.Elapsed <= 0 {
				t.Errorf("CopyWaitShare = %v over %v", s, st.Elapsed)
			}
		})
	}
}

// TestFeedHoldsBufferUnderCopy stops the device: batches keep coming while
// their copies wait (gathering overlaps copying), and a batch released
// before its copy ran is not handed back to the Loader, which would
// regather its pinned buffer under the copy (the Fake would then report
// gpu.ErrSourceModified).
func TestFeedHoldsBufferUnderCopy(t *testing.T) {
	e := newEnv(t, smallData, gpu.FakeConfig{})
	f := e.open(t, e.config(8, 2, 2))
	ctx := t.Context()

	release := e.dev.Hold()
	defer release()
	b0, err := f.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b1, err := f.Next(ctx) // gathered while b0's copy is in flight
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []*Batch{b0, b1} {
		if err := b.Ready(cancelled(t)); !errors.Is(err, context.Canceled) {
			t.Fatalf("Ready of batch %d while the device is held = %v; want context.Canceled", b.Index, err)
		}
	}
	released := make(chan struct{})
	go func() {
		b0.Release() // waits for b0's copy
		close(released)
	}()
	if _, err := f.Next(ctx); !errors.Is(err, loader.ErrHeld) {
		t.Fatalf("Next while b0's copy is held = %v; want loader.ErrHeld (b0's buffer not given back)", err)
	}
	select {
	case <-released:
		t.Fatal("Release returned before the batch's copy ran")
	default:
	}
	release()
	<-released
	e.checkBatch(t, b1)
	b1.Release()
	e.drain(t, f)
	if st := f.Stats(); st.CopyWaits < 2 {
		t.Errorf("stats %+v: the two Ready calls found copies in flight, which should count", st)
	}
}

// TestFeedReleaseAfter: a batch released with an event of the consumer's
// stream is not overwritten before that event completes.
func TestFeedReleaseAfter(t *testing.T) {
	e := newEnv(t, smallData, gpu.FakeConfig{})
	f := e.open(t, e.config(8, 1, 1))
	ctx := t.Context()
	consumer, err := e.dev.NewStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	b0, err := f.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.checkBatch(t, b0)
	release := e.dev.Hold()
	defer release()
	done, err := consumer.Record(ctx) // after the consumer's (held) work on b0
	if err != nil {
		t.Fatal(err)
	}
	b0.ReleaseAfter(done)
	if _, err := f.Next(cancelled(t)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next while the consumer's event is held = %v; want context.Canceled", err)
	}
	release()
	e.drain(t, f)
}

// TestFeedFaults injects device failures: each surfaces as an error from
// Next that wraps the cause, with no hang and nothing left behind.
func TestFeedFaults(t *testing.T) {
	errFault := errors.New("injected fault")
	for _, tc := range []struct {
		op    string
		after int64 // calls that succeed first
		once  bool  // fail only that call
		ok    int   // batches delivered before the failure
	}{
		{"CopyHtoD", 0, false, 0},
		{"CopyHtoD", 7, false, 3}, // the y copy of batch 3: x's copy is in flight
		{"Record", 0, true, 0},    // the Sync after it records again, and succeeds
		{"Record", 4, true, 4},
	} {
		t.Run(fmt.Sprintf("%s-%d", tc.op, tc.after), func(t *testing.T) {
			var calls atomic.Int64
			fault := func(op string, _ int) error {
				if op != tc.op {
					return nil
				}
				n := calls.Add(1) - 1
				if n == tc.after || (!tc.once && n > tc.after) {
					return errFault
				}
				return nil
			}
			e := newEnv(t, smallData, gpu.FakeConfig{Fault: fault})
			cfg := e.config(8, 2, 2)
			cfg.Workers = 1 // batches copied in order: the fault hits a known batch
			f := e.open(t, cfg)
			var n int
			for ; ; n++ {
				b, err := f.Next(t.Context())
				if err == io.EOF {
					t.Fatalf("no error after %d batches", n)
				}
				if err != nil {
					if !errors.Is(err, errFault) {
						t.Fatalf("Next = %v; want the injected fault", err)
					}
					if _, again := f.Next(t.Context()); !errors.Is(again, errFault) {
						t.Errorf("Next after the failure = %v; want the same failure", again)
					}
					break
				}
				e.checkBatch(t, b)
				b.Release()
			}
			if n != tc.ok {
				t.Errorf("failed after %d batches; want %d", n, tc.ok)
			}
		})
	}
}

// TestFeedCloseWhileCopying closes the Feed with copies held on the device:
// Close waits for them, frees everything, and the batch still held is
// invalid but safe to release.
func TestFeedCloseWhileCopying(t *testing.T) {
	e := newEnv(t, smallData, gpu.FakeConfig{})
	f, err := New(t.Context(), e.dev, loader.FromStore(e.store), Config{Loader: e.config(8, 3, 1)})
	if err != nil {
		t.Fatal(err)
	}
	release := e.dev.Hold()
	defer release()
	b, err := f.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	release() // Close cannot finish before the copies have run
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Ready(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("Ready after Close = %v; want ErrClosed", err)
	}
	b.Release()
	b.Release()
	if _, err := f.Next(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close = %v; want ErrClosed", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	e.checkFreed(t)
}

// TestFeedResume continues from a saved State with the batches a full run
// has after it.
func TestFeedResume(t *testing.T) {
	e := newEnv(t, smallData, gpu.FakeConfig{})
	cfg := e.config(8, 2, 2)
	full := e.drain(t, e.open(t, cfg))
	f := e.open(t, cfg)
	for range 5 {
		b, err := f.Next(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		b.Release()
	}
	state := f.State()
	cfg.Resume = &state
	if got := e.drain(t, e.open(t, cfg)); !equalBatches(got, full[5:]) {
		t.Errorf("resumed batches:\n got %v\nwant %v", got, full[5:])
	}
}

// TestFeedBatchAfterRelease: a released batch says so.
func TestFeedBatchAfterRelease(t *testing.T) {
	e := newEnv(t, smallData, gpu.FakeConfig{})
	f := e.open(t, e.config(8, 2, 1))
	b, err := f.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if x, ok := b.Array("x"); !ok || x.Len != 8*40 || x.Shape[1] != 40 {
		t.Errorf("Array(x) = %+v, %v", x, ok)
	}
	if _, ok := b.Array("z"); ok {
		t.Error("Array(z) found")
	}
	b.Release()
	if err := b.Ready(t.Context()); !errors.Is(err, ErrReleased) {
		t.Errorf("Ready after Release = %v; want ErrReleased", err)
	}
}

// TestNewErrors: no device, seams already set, too little device memory, a
// closed device: clear errors, nothing allocated left behind.
func TestNewErrors(t *testing.T) {
	e := newEnv(t, smallData, gpu.FakeConfig{MemBytes: 4096})
	src := loader.FromStore(e.store)
	ctx := t.Context()

	none, err := gpu.Open(ctx, gpu.ModeNone)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := none.Open(ctx, 0); !errors.Is(err, gpu.ErrNoGPU) {
		t.Errorf("None.Open = %v; want gpu.ErrNoGPU", err)
	}
	if _, err := New(ctx, nil, src, Config{Loader: e.config(8, 2, 1)}); !errors.Is(err, ErrConfig) {
		t.Errorf("New without a device = %v; want ErrConfig", err)
	}
	seam := e.config(8, 2, 1)
	seam.NewBuffer = func(n int) ([]byte, error) { return make([]byte, n), nil }
	if _, err := New(ctx, e.dev, src, Config{Loader: seam}); !errors.Is(err, ErrConfig) {
		t.Errorf("New with NewBuffer set = %v; want ErrConfig", err)
	}
	if _, err := New(ctx, e.dev, src, Config{Loader: e.config(0, 2, 1)}); !errors.Is(err, loader.ErrConfig) {
		t.Errorf("New with batch size 0 = %v; want loader.ErrConfig", err)
	}
	// A slot of 64 samples is 64 x (40 + 8) = 3 KiB: two do not fit in 4 KiB; four of 8 samples do.
	if _, err := New(ctx, e.dev, src, Config{Loader: e.config(64, 2, 1)}); !errors.Is(err, gpu.ErrOutOfMemory) {
		t.Errorf("New beyond device memory = %v; want gpu.ErrOutOfMemory", err)
	}
	e.checkFreed(t)
	if f, err := New(ctx, e.dev, src, Config{Loader: e.config(8, 4, 1)}); err != nil {
		t.Errorf("New within device memory: %v", err)
	} else if err := f.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	e.checkFreed(t)
	if err := e.dev.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, e.dev, src, Config{Loader: e.config(8, 2, 1)}); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("New on a closed device = %v; want gpu.ErrClosed", err)
	}
}
