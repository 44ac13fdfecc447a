package gpu

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"
)

// fakeQueue bounds a fake stream's queue; enqueueing beyond it blocks, as a
// full hardware queue does.
const fakeQueue = 1024

// fakeOp is one unit of stream work. It runs on the stream's goroutine with
// the stream's sticky error, which it may set.
type fakeOp func(err *error)

// fakeStream is a Stream of the Fake: a goroutine, owned by the device,
// running ops in order.
type fakeStream struct {
	d *FakeDevice
	t *ticket

	mu     sync.Mutex  // serialises enqueue and close
	closed bool        // guarded by mu
	ops    chan fakeOp // closed under mu
}

// NewStream starts a stream goroutine; Close (or the device's) ends it
// after the queued work.
func (d *FakeDevice) NewStream(ctx context.Context) (Stream, error) {
	if err := d.begin(ctx, "NewStream"); err != nil {
		return nil, err
	}
	s := &fakeStream{d: d, ops: make(chan fakeOp, fakeQueue)}
	var err error
	if s.t, err = d.lt.track(s.close); err != nil {
		return nil, err
	}
	d.workers.Go(func() {
		var sticky error
		for op := range s.ops {
			d.waitGate()
			op(&sticky)
		}
	})
	return s, nil
}

// enqueue adds op to the queue, waiting for room or ctx.
func (s *fakeStream) enqueue(ctx context.Context, op fakeOp) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	select {
	case s.ops <- op:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *fakeStream) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	close(s.ops)
	return nil
}

func (s *fakeStream) CopyHtoD(ctx context.Context, dst *DeviceMem, off int, src []byte) error {
	if err := s.t.alive(); err != nil {
		return err
	}
	if err := s.d.begin(ctx, "CopyHtoD"); err != nil {
		return err
	}
	if err := dst.check(s.d.lt, off, len(src)); err != nil {
		return fmt.Errorf("gpu %d (fake): copy to device: %w", s.d.info.Ordinal, err)
	}
	if len(src) == 0 {
		return nil
	}
	to := dst.store[off : off+len(src)]
	if !s.d.isPinned(src) {
		staged := bytes.Clone(src)
		return s.enqueue(ctx, func(*error) { copy(to, staged) })
	}
	seed, ordinal := s.d.seed, s.d.info.Ordinal
	sum := maphash.Bytes(seed, src)
	return s.enqueue(ctx, func(err *error) {
		if *err == nil && maphash.Bytes(seed, src) != sum {
			*err = fmt.Errorf("gpu %d (fake): copy of %d bytes: %w", ordinal, len(src), ErrSourceModified)
		}
		copy(to, src)
	})
}

func (s *fakeStream) Record(ctx context.Context) (Event, error) {
	if err := s.t.alive(); err != nil {
		return nil, err
	}
	if err := s.d.begin(ctx, "Record"); err != nil {
		return nil, err
	}
	e := &fakeEvent{d: s.d, done: make(chan struct{})}
	err := s.enqueue(ctx, func(err *error) {
		e.err, e.at = *err, time.Now()
		close(e.done)
	})
	if err != nil {
		return nil, err
	}
	if e.t, err = s.d.lt.track(func() error { return nil }); err != nil {
		return nil, err
	}
	return e, nil
}

func (s *fakeStream) Sync(ctx context.Context) error {
	e, err := s.Record(ctx)
	if err != nil {
		return err
	}
	err = e.Wait(ctx)
	e.Close()
	return err
}

func (s *fakeStream) Close() error { return s.t.release() }

// fakeEvent completes when its stream's goroutine reaches it.
type fakeEvent struct {
	d    *FakeDevice
	t    *ticket
	done chan struct{} // closed by the stream goroutine
	err  error         // the stream's sticky error then; read after done
	at   time.Time     // when it completed; read after done
}

func (e *fakeEvent) Done() (bool, error) {
	if err := e.t.alive(); err != nil {
		return false, err
	}
	select {
	case <-e.done:
		return true, e.err
	default:
		return false, nil
	}
}

func (e *fakeEvent) Wait(ctx context.Context) error {
	if done, err := e.Done(); done || err != nil {
		return err
	}
	select {
	case <-e.done:
		return e.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *fakeEvent) Elapsed(start Event) (time.Duration, error) {
	s, ok := start.(*fakeEvent)
	if !ok || s.d != e.d {
		return 0, ErrForeign
	}
	for _, ev := range []*fakeEvent{s, e} {
		if done, err := ev.Done(); err != nil && !done {
			return 0, err
		} else if !done {
			return 0, ErrNotReady
		}
	}
	return e.at.Sub(s.at), nil
}

func (e *fakeEvent) Close() error { return e.t.release() }
