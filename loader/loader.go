package loader

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/stats"
)

// planDropTimeout bounds telling the Planner to drop the plan at Close,
// which has no context.
const planDropTimeout = 10 * time.Second

// State is a position in the sequence of batches: the next batch Next
// returns is batch Batch of epoch Epoch. Save it with a checkpoint and pass
// it as Config.Resume to continue with exactly the batches that would have
// followed.
type State struct {
	Epoch, Batch int
	// Fingerprint identifies the configuration (dataset, batch size,
	// shuffle, seed, window, world size, tail, drop-last); a Loader
	// refuses to resume from another's State. 0 skips the check.
	Fingerprint uint64
}

// Loader reads batches of a dataset through a Source. See the package
// documentation. Next must be called from one goroutine at a time; State,
// Stats and Close are safe to call concurrently with it.
type Loader struct {
	// Immutable after New.
	cfg         settings
	src         Source
	ds          Dataset
	reader      Reader // the dataset's Format's
	layout      Layout // the reader's
	rows        []int
	perEpoch    int // batches per epoch
	start       State
	end         int // the epoch after the last
	fingerprint uint64
	planID      string
	slots       []*slot
	free        chan *slot // slots the dispatcher may fill
	ordered     chan *slot // filled slots, in batch order, for Next
	todo        chan *slot // filled slots for the workers
	closing     chan struct{}
	table       *table
	counters    counters
	cancel      context.CancelFunc
	wg          sync.WaitGroup

	nextMu  sync.Mutex // serialises Next
	pending *slot      // a slot Next took from ordered and still waits for; guarded by nextMu
	// waiter is the slot Next is blocked on, if any: its worker yields
	// its P to Next once the slot is ready (see work).
	waiter atomic.Pointer[slot]

	closeOnce sync.Once
	closeErr  error        // set by the first Close
	held      atomic.Int32 // batches handed out and not released

	mu     sync.Mutex // protects the fields below
	state  State
	stats  stats.Loader
	err    error // sticky failure
	closed bool
}

// New returns a Loader of cfg.Dataset through src and starts its
// goroutines: one sampling, one opening shards ahead, cfg.Workers
// gathering. Nothing is fetched before the first shards are needed. Close
// stops them. Errors wrap ErrConfig, ErrDataset, ErrResume or
// sampler.ErrConfig.
func New(src Source, cfg Config) (*Loader, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	if src == nil {
		return nil, fmt.Errorf("%w: nil Source", ErrConfig)
	}
	l, err := prepare(s)
	if err != nil {
		return nil, err
	}
	if l.reader, err = s.Dataset.format().NewReader(s.Dataset, s.readOptions()); err != nil {
		return nil, err
	}
	l.layout = l.reader.Layout()
	l.src, l.closing, l.table = src, make(chan struct{}), newTable()
	l.state = l.start
	l.planID = s.PlanID
	if l.planID == "" {
		l.planID = fmt.Sprintf("loader-%016x-r%d-%08x", l.fingerprint, s.Rank, rand.Uint32())
	}
	if err := l.makeSlots(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.wg.Go(func() { l.dispatch(ctx) })
	l.wg.Go(func() { l.openLoop(ctx) })
	for range s.Workers {
		l.wg.Go(func() { l.work(ctx) })
	}
	return l, nil
}

// prepare returns a Loader with the sampling fields set: rows, batches
// per epoch, fingerprint and start state. It checks that every rank gets
// at least one batch per epoch and that Config.Resume fits.
func prepare(s settings) (*Loader, error) {
	l := &Loader{cfg: s, ds: s.Dataset, end: s.Epoch + s.Epochs, fingerprint: s.fingerprint()}
	l.rows, _ = l.ds.Rows()
	first, err := sampler.NewEpoch(l.rows, s.sampler, s.Epoch)
	if err != nil {
		return nil, fmt.Errorf("loader: %w", err)
	}
	l.perEpoch = first.Len() / s.BatchSize
	if !s.DropLast && first.Len()%s.BatchSize != 0 {
		l.perEpoch++
	}
	if l.perEpoch == 0 {
		return nil, fmt.Errorf("%w: each rank reads %d samples per epoch: not one full batch of %d",
			ErrConfig, first.Len(), s.BatchSize)
	}
	if l.start, err = l.resumeState(); err != nil {
		return nil, err
	}
	return l, nil
}

// resumeState returns where to start: Config.Resume, checked, or the
// beginning of Config.Epoch.
func (l *Loader) resumeState() (State, error) {
	start := State{Epoch: l.cfg.Epoch, Fingerprint: l.fingerprint}
	r := l.cfg.Resume
	if r == nil {
		return start, nil
	}
	switch {
	case r.Fingerprint != 0 && r.Fingerprint != l.fingerprint:
		return start, fmt.Errorf("%w: the state was saved with another configuration (fingerprint %016x; this one %016x)",
			ErrResume, r.Fingerprint, l.fingerprint)
	case r.Batch < 0 || r.Batch > l.perEpoch:
		return start, fmt.Errorf("%w: batch %d of %d per epoch", ErrResume, r.Batch, l.perEpoch)
	}
	start.Epoch, start.Batch = r.Epoch, r.Batch
	if start.Batch == l.perEpoch {
		start.Epoch, start.Batch = start.Epoch+1, 0
	}
	if start.Epoch < l.cfg.Epoch || start.Epoch > l.end || (start.Epoch == l.end && start.Batch > 0) {
		return start, fmt.Errorf("%w: epoch %d is outside epochs [%d, %d)", ErrResume, r.Epoch, l.cfg.Epoch, l.end)
	}
	return start, nil
}

// makeSlots allocates the batch buffers.
func (l *Loader) makeSlots() error {
	p, b := l.cfg.Prefetch, l.cfg.BatchSize
	l.free, l.ordered, l.todo = make(chan *slot, p), make(chan *slot, p), make(chan *slot, p)
	names := make([]string, len(l.layout.Arrays))
	for j, a := range l.layout.Arrays {
		names[j] = a.Name
	}
	for range p {
		s := &slot{l: l, ready: make(chan struct{}, 1), picks: make([]Pick, 0, b)}
		s.batch = Batch{IDs: make([]int64, 0, b), Names: names, Arrays: make([]array.Array, len(names)), s: s}
		s.gather.Batch = &s.batch
		for _, a := range l.layout.Arrays {
			n := b * a.RowSize()
			buf, err := l.newBuffer(n)
			if err != nil {
				return fmt.Errorf("loader: batch buffer of %d bytes for %s: %w", n, a.Name, err)
			}
			s.gather.Buffers = append(s.gather.Buffers, buf)
			s.gather.Shapes = append(s.gather.Shapes, append([]int{0}, a.Row...))
		}
		if len(l.layout.Fields) > 0 {
			s.batch.Fields = make([]Field, len(l.layout.Fields))
			if err := l.fieldBuffers(s); err != nil {
				return err
			}
		}
		l.slots = append(l.slots, s)
		l.free <- s
	}
	return nil
}

// fieldBuffers names s's fields and, with ReadOptions.FixedFields,
// allocates their buffers from Config.NewBuffer, in Layout.Fields order,
// offsets then data.
func (l *Loader) fieldBuffers(s *slot) error {
	fixed := l.cfg.readOptions().FixedFields
	n := l.cfg.BatchSize + 1
	for j, fl := range l.layout.Fields {
		f := &s.batch.Fields[j]
		f.Name = fl.Name
		if !fixed {
			continue
		}
		offs, err := l.newBuffer(8 * n)
		if err != nil {
			return fmt.Errorf("loader: field %q: offsets buffer of %d bytes: %w", fl.Name, 8*n, err)
		}
		data, err := l.newBuffer(fl.Bytes)
		if err != nil {
			return fmt.Errorf("loader: field %q: data buffer of %d bytes: %w", fl.Name, fl.Bytes, err)
		}
		if !aligned(offs, 8) {
			return fmt.Errorf("%w: NewBuffer's offsets buffer for field %q is not 8-byte aligned", ErrConfig, fl.Name)
		}
		// The offsets are int64s in the host's byte order (little-endian
		// on every platform the loader runs on).
		f.Offsets = unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(offs))), n)[:0]
		f.Data = data[:0:fl.Bytes]
	}
	return nil
}

// aligned reports whether b's first byte is aligned to size.
func aligned(b []byte, size int) bool {
	return len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(size) == 0
}

// newBuffer allocates n bytes with Config.NewBuffer, or page-aligned.
func (l *Loader) newBuffer(n int) ([]byte, error) {
	if l.cfg.NewBuffer != nil {
		b, err := l.cfg.NewBuffer(n)
		if err == nil && len(b) < n {
			err = fmt.Errorf("NewBuffer returned %d bytes", len(b))
		}
		return b, err
	}
	b := make([]byte, n+bufferAlign)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) % bufferAlign); r != 0 {
		off = bufferAlign - r
	}
	return b[off : off+n : off+n], nil
}

// BatchesPerEpoch returns the number of batches each epoch has, the same
// for every rank.
func (l *Loader) BatchesPerEpoch() int { return l.perEpoch }

// Workers returns the number of gathering goroutines: Config.Workers, or
// its default.
func (l *Loader) Workers() int { return l.cfg.Workers }

// PlanID returns the id of the plan announced to Config.Planner.
func (l *Loader) PlanID() string { return l.planID }

// Next returns the next batch, waiting for it if needed, or io.EOF after
// the last batch of the last epoch. The Batch must be released. A failure
// (a shard that cannot be fetched or does not match the dataset) is
// returned by this and every later call; ctx ending returns its error and
// the next call waits for the same batch again. If the caller holds every
// buffer (Config.Prefetch unreleased batches), Next fails with ErrHeld
// rather than wait forever.
func (l *Loader) Next(ctx context.Context) (*Batch, error) {
	l.nextMu.Lock()
	defer l.nextMu.Unlock()
	if err := l.failure(); err != nil {
		return nil, err
	}
	if int(l.held.Load()) == len(l.slots) {
		return nil, fmt.Errorf("%w: release some of the %d batches first", ErrHeld, len(l.slots))
	}
	t0 := time.Now()
	s := l.pending
	if s == nil {
		var ok bool
		select {
		case s, ok = <-l.ordered:
			if !ok {
				if err := l.failure(); err != nil {
					return nil, err
				}
				return nil, io.EOF
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-l.closing:
			return nil, ErrClosed
		}
	}
	select {
	case <-s.ready:
	default:
		var err error
		l.waiter.Store(s)
		select {
		case <-s.ready:
		case <-ctx.Done():
			l.pending, err = s, ctx.Err()
		case <-l.closing:
			err = ErrClosed
		}
		l.waiter.Store(nil)
		if err != nil {
			return nil, err
		}
	}
	l.pending = nil
	t1 := time.Now()
	if s.err != nil {
		l.fail(s.err)
		l.free <- s
		return nil, l.failure()
	}
	s.out.Store(true)
	l.held.Add(1)
	l.mu.Lock()
	l.accountLocked(s, t0, t1)
	l.state = State{Epoch: s.batch.Epoch, Batch: s.batch.Index + 1, Fingerprint: l.fingerprint}
	if l.state.Batch == l.perEpoch {
		l.state.Epoch, l.state.Batch = l.state.Epoch+1, 0
	}
	l.mu.Unlock()
	return &s.batch, nil
}

// State returns the position of the next batch Next will return: save it
// after processing a batch to resume after that batch.
func (l *Loader) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// fail records the first failure.
func (l *Loader) fail(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
}

// failure returns the recorded failure, or ErrClosed after Close.
func (l *Loader) failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	return l.err
}

// reportStats reports the Stats to the Planner if it is a StatsReporter.
func (l *Loader) reportStats(ctx context.Context) {
	r, ok := l.cfg.Planner.(StatsReporter)
	if !ok {
		return
	}
	if err := r.ReportStats(ctx, l.planID, l.Stats()); err != nil && ctx.Err() == nil {
		l.planError(err)
	}
}

// planError counts and logs an advisory Planner failure.
func (l *Loader) planError(err error) {
	l.counters.planErrors.Add(1)
	l.cfg.Logger.Warn("loader: plan", "plan", l.planID, "err", err)
}

// Close stops the Loader, waits for its goroutines, releases the shards it
// holds (except those of unreleased zero-copy Batches, released with
// them), and drops its plan from the Planner. Batches already returned
// stay valid until released. Close returns errors releasing leases; calling
// it again returns the same.
func (l *Loader) Close() error {
	l.closeOnce.Do(func() { l.closeErr = l.shutdown() })
	return l.closeErr
}

// shutdown is the first Close.
func (l *Loader) shutdown() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	close(l.closing)
	l.cancel()
	l.wg.Wait()
	var dead []*group
	l.table.mu.Lock()
	for _, s := range l.slots {
		if s.refsHeld && !s.out.Load() {
			s.refsHeld = false
			for _, g := range s.groups {
				dead = l.table.unrefLocked(g, dead)
			}
		}
	}
	for _, g := range slices.Collect(maps.Values(l.table.groups)) {
		if g.planRef {
			g.planRef = false
			dead = l.table.unrefLocked(g, dead)
		}
	}
	l.table.mu.Unlock()
	err := l.release(dead)
	if p := l.cfg.Planner; p != nil {
		ctx, cancel := context.WithTimeout(context.Background(), planDropTimeout)
		l.reportStats(ctx)
		if perr := p.DropPlan(ctx, l.planID); perr != nil {
			l.planError(perr)
		}
		cancel()
	}
	return err
}
