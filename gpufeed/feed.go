package gpufeed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/gpu"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/stats"
)

// Sentinel errors, wrapped with details. Test them with errors.Is.
var (
	// ErrConfig means a Config is invalid, or New was given no device.
	ErrConfig = errors.New("gpufeed: invalid configuration")
	// ErrClosed is loader.ErrClosed: the Feed, and so its Loader, is
	// closed.
	ErrClosed = loader.ErrClosed
	// ErrReleased means a Batch was used after Release.
	ErrReleased = errors.New("gpufeed: batch already released")
	// errForeign means the Loader handed the Feed a batch whose arrays
	// are not in the Feed's buffers: a bug, never expected.
	errForeign = errors.New("gpufeed: internal error: batch arrays are not in the feed's buffers")
)

// Config configures a Feed. New never modifies it.
type Config struct {
	// Loader configures the Loader the Feed runs (see package loader).
	// NewBuffer and OnBatch must be nil: the Feed sets them. CopyAlways
	// is forced on (see the package documentation). Prefetch is the
	// number of slots, each with pinned host and device buffers for one
	// batch: 2 or more overlap gathering with copying.
	Loader loader.Config
}

// Feed runs a Loader whose batches are copied to one GPU. See the package
// documentation. Next must be called from one goroutine at a time; State,
// Stats and Close are safe to call concurrently with it.
type Feed struct {
	// Immutable after New (slots and bufs are filled during loader.New,
	// before the Loader starts its goroutines).
	dev   gpu.Device
	l     *loader.Loader
	names int                 // arrays per batch
	slots []*slot             // in allocation order
	bufs  map[uintptr]*buffer // by the address of the buffer's first byte

	c counters

	failMu sync.Mutex
	failed error // guarded by failMu: the first copy failure seen after Next

	closeOnce sync.Once
	closeErr  error

	// mu is held for reading by Ready and Release while they use a
	// batch's event, and for writing by Close to close events and free.
	mu     sync.RWMutex
	closed bool // guarded by mu
}

// counters are the Stats, kept with atomics.
type counters struct {
	batches, copies, bytes atomic.Int64
	enqueue                atomic.Int64 // ns
	copyWait, copyWaits    atomic.Int64 // ns, count
	nextWait               atomic.Int64 // ns
	start                  atomic.Int64 // unix ns of the first Next, 0 before
}

// New returns a Feed that reads cfg.Loader's batches through src and
// copies them to dev. It allocates every buffer now, on dev and pinned on
// the host, and starts the Loader. ctx bounds the allocations. Errors wrap
// ErrConfig, the Loader's errors (loader.ErrConfig, …) or dev's
// (gpu.ErrOutOfMemory, …).
func New(ctx context.Context, dev gpu.Device, src loader.Source, cfg Config) (*Feed, error) {
	lc := cfg.Loader
	switch {
	case dev == nil:
		return nil, fmt.Errorf("%w: no device (without a GPU, use the loader directly)", ErrConfig)
	case lc.NewBuffer != nil || lc.OnBatch != nil:
		return nil, fmt.Errorf("%w: Loader.NewBuffer and Loader.OnBatch are the feed's to set", ErrConfig)
	case len(lc.Dataset.Names) == 0:
		return nil, fmt.Errorf("%w: the dataset has no arrays", ErrConfig)
	}
	f := &Feed{dev: dev, names: len(lc.Dataset.Names), bufs: make(map[uintptr]*buffer)}
	lc.CopyAlways = true
	lc.NewBuffer = func(n int) ([]byte, error) { return f.newBuffer(ctx, n) }
	lc.OnBatch = f.onBatch
	l, err := loader.New(src, lc)
	if err != nil {
		return nil, errors.Join(err, f.free())
	}
	f.l = l
	if len(f.slots) == 0 || len(f.slots[len(f.slots)-1].bufs) != f.names {
		err := fmt.Errorf("gpufeed: internal error: the loader allocated %d buffers for %d arrays", len(f.bufs), f.names)
		return nil, errors.Join(err, l.Close(), f.free())
	}
	return f, nil
}

// Next returns the next batch, its copy to the device enqueued (call
// Ready before reading the device memory), or io.EOF after the last
// batch. The Batch must be released. Errors are the Loader's (a batch that
// could not be gathered or whose copy could not be enqueued fails the
// Loader, and Next returns the failure from then on), ErrClosed after
// Close, or a copy failure seen by Release.
func (f *Feed) Next(ctx context.Context) (*Batch, error) {
	if err := f.failure(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	f.c.start.CompareAndSwap(0, t0.UnixNano())
	hb, err := f.l.Next(ctx)
	f.c.nextWait.Add(int64(time.Since(t0)))
	if err != nil {
		return nil, err
	}
	s, err := f.slotOf(hb)
	if err == nil && s.ready == nil {
		err = fmt.Errorf("%w: no copy was enqueued", errForeign)
	}
	if err != nil {
		hb.Release()
		return nil, err
	}
	s.fill(hb)
	s.out.Store(true)
	f.c.batches.Add(1)
	return &s.batch, nil
}

// failure returns ErrClosed after Close, or the first copy failure seen.
func (f *Feed) failure() error {
	f.mu.RLock()
	closed := f.closed
	f.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	f.failMu.Lock()
	defer f.failMu.Unlock()
	return f.failed
}

// fail records the first copy failure.
func (f *Feed) fail(err error) {
	f.failMu.Lock()
	if f.failed == nil {
		f.failed = err
	}
	f.failMu.Unlock()
}

// State returns the position of the next batch Next will return (see
// loader.Loader.State).
func (f *Feed) State() loader.State { return f.l.State() }

// BatchesPerEpoch returns the number of batches per epoch.
func (f *Feed) BatchesPerEpoch() int { return f.l.BatchesPerEpoch() }

// Workers returns the number of the loader's gathering goroutines.
func (f *Feed) Workers() int { return f.l.Workers() }

// Stats counts what the Feed copied and where its consumer waited. The
// durations are totals since New.
type Stats struct {
	// Batches counts the batches Next returned; Copies the host-to-device
	// copies enqueued (one per array of each batch gathered); BytesCopied
	// their bytes.
	Batches, Copies, BytesCopied int64
	// Enqueue is the time the gathering goroutines spent enqueueing
	// copies and events: the copies themselves run on the device.
	Enqueue time.Duration
	// CopyWait is the time the consumer was blocked waiting for copies
	// (in Ready, or in Release when Ready was skipped); CopyWaits counts
	// those waits (batches whose copy was not done when asked).
	CopyWait  time.Duration
	CopyWaits int64
	// NextWait is the time the consumer was blocked in Next: the Loader's
	// stalls (see stats.Loader).
	NextWait time.Duration
	// Elapsed is the time since the first call of Next, 0 before.
	Elapsed time.Duration
	// Loader is the Loader's Stats.
	Loader stats.Loader
}

// CopyWaitShare returns CopyWait as a share of Elapsed: the share of the
// consumer's time lost to copies not yet done, 0 before the first Next.
func (s Stats) CopyWaitShare() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return s.CopyWait.Seconds() / s.Elapsed.Seconds()
}

// Stats returns a snapshot of the counters. Safe to call concurrently
// with Next.
func (f *Feed) Stats() Stats {
	s := Stats{
		Batches:     f.c.batches.Load(),
		Copies:      f.c.copies.Load(),
		BytesCopied: f.c.bytes.Load(),
		Enqueue:     time.Duration(f.c.enqueue.Load()),
		CopyWait:    time.Duration(f.c.copyWait.Load()),
		CopyWaits:   f.c.copyWaits.Load(),
		NextWait:    time.Duration(f.c.nextWait.Load()),
		Loader:      f.l.Stats(),
	}
	if start := f.c.start.Load(); start != 0 {
		s.Elapsed = time.Since(time.Unix(0, start))
	}
	return s
}

// Close stops the Loader, waits for every copy in flight, and frees the
// pinned host memory, device memory, streams and events the Feed holds.
// Batches not yet released are invalid afterwards; releasing them is still
// safe. Close returns the Loader's Close error and errors freeing; calling
// it again returns the same.
func (f *Feed) Close() error {
	f.closeOnce.Do(func() {
		lerr := f.l.Close() // no OnBatch runs after this
		f.mu.Lock()
		defer f.mu.Unlock()
		f.closed = true
		f.closeErr = errors.Join(lerr, f.free())
	})
	return f.closeErr
}

// free waits for each slot's copies, then frees what the Feed allocated.
// The caller holds f.mu, or the Loader never started.
func (f *Feed) free() error {
	var errs []error
	for _, s := range f.slots {
		errs = append(errs, s.free())
	}
	return errors.Join(errs...)
}
