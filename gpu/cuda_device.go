package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/gpu/cuda"
)

// cudaDevice is a Device over a retained primary context.
type cudaDevice struct {
	info DeviceInfo    // immutable
	ctx  *cuda.Context // safe for concurrent use
	lt   *lifetime     // what the device handed out
	t    *ticket       // the device in its backend
}

var _ Device = (*cudaDevice)(nil)

// fail wraps a failed operation with the device and classifies it.
func (d *cudaDevice) fail(op string, err error) error {
	return fmt.Errorf("gpu %d: %s: %w", d.info.Ordinal, op, classify(err))
}

// ready checks ctx and that the device is open.
func (d *cudaDevice) ready(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.lt.check()
}

func (d *cudaDevice) Info() DeviceInfo {
	info := d.info
	info.CPUs = append([]int(nil), d.info.CPUs...)
	return info
}

func (d *cudaDevice) MemInfo(ctx context.Context) (free, total uint64, err error) {
	if err := d.ready(ctx); err != nil {
		return 0, 0, err
	}
	free, total, err = d.ctx.MemGetInfo()
	if err != nil {
		return 0, 0, d.fail("memory info", err)
	}
	return free, total, nil
}

func (d *cudaDevice) Alloc(ctx context.Context, n int) (*DeviceMem, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	p, err := d.ctx.MemAlloc(n)
	if err != nil {
		return nil, d.fail(fmt.Sprintf("alloc %d bytes", n), err)
	}
	m := &DeviceMem{ptr: DevicePtr(p), n: n, owner: d.lt}
	if m.t, err = d.lt.track(func() error { return d.ctx.MemFree(p) }); err != nil {
		return nil, err
	}
	return m, nil
}

// HostAlloc allocates portable pinned memory from a thread bound to the
// device's local CPUs, so the pages come from its NUMA node (see
// runOnCPUs for what that does and does not guarantee).
func (d *cudaDevice) HostAlloc(ctx context.Context, n int) (*HostMem, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	var b []byte
	bound, err := runOnCPUs(d.info.CPUs, func() (err error) {
		b, err = d.ctx.MemHostAlloc(n, cuda.HostAllocPortable)
		return err
	})
	if err != nil {
		return nil, d.fail(fmt.Sprintf("pinned alloc %d bytes", n), err)
	}
	h := &HostMem{b: b, node: -1}
	if bound {
		h.node = d.info.NUMANode
	}
	if h.t, err = d.lt.track(func() error { return d.ctx.MemFreeHost(b) }); err != nil {
		return nil, err
	}
	return h, nil
}

// Register pins b for every context (PORTABLE), read-only if asked.
func (d *cudaDevice) Register(ctx context.Context, b []byte, readOnly bool) (*Registration, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	flags := cuda.HostRegisterPortable
	if readOnly {
		flags |= cuda.HostRegisterReadOnly
	}
	if err := d.ctx.MemHostRegister(b, flags); err != nil {
		return nil, d.fail(fmt.Sprintf("register %d bytes (read-only %t)", len(b), readOnly), err)
	}
	r := &Registration{b: b}
	var err error
	if r.t, err = d.lt.track(func() error { return d.ctx.MemHostUnregister(b) }); err != nil {
		return nil, err
	}
	return r, nil
}

// NewStream creates a non-blocking stream: it does not wait for the legacy
// default stream other libraries may use.
func (d *cudaDevice) NewStream(ctx context.Context) (Stream, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	s, err := d.ctx.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return nil, d.fail("create stream", err)
	}
	cs := &cudaStream{d: d, s: s}
	if cs.t, err = d.lt.track(func() error { return d.ctx.StreamDestroy(s) }); err != nil {
		return nil, err
	}
	return cs, nil
}

func (d *cudaDevice) CopyDtoH(ctx context.Context, dst []byte, src *DeviceMem, off int) error {
	if err := d.ready(ctx); err != nil {
		return err
	}
	if err := src.check(d.lt, off, len(dst)); err != nil {
		return fmt.Errorf("gpu %d: copy to host: %w", d.info.Ordinal, err)
	}
	if err := d.ctx.MemcpyDtoH(dst, cuda.DevicePtr(src.ptr)+cuda.DevicePtr(off)); err != nil {
		return d.fail(fmt.Sprintf("copy %d bytes to host", len(dst)), err)
	}
	return nil
}

func (d *cudaDevice) Close() error { return d.t.release() }

// shutdown frees what callers left, newest first, and releases the
// context. Freeing pinned memory and destroying streams waits for their
// work, so nothing is freed under a running copy.
func (d *cudaDevice) shutdown() error {
	return errors.Join(d.lt.close(), d.ctx.Release())
}

// cudaStream is a Stream over a CUstream.
type cudaStream struct {
	d *cudaDevice
	s cuda.Stream
	t *ticket
}

func (s *cudaStream) CopyHtoD(ctx context.Context, dst *DeviceMem, off int, src []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.t.alive(); err != nil {
		return err
	}
	if err := dst.check(s.d.lt, off, len(src)); err != nil {
		return fmt.Errorf("gpu %d: copy to device: %w", s.d.info.Ordinal, err)
	}
	if err := s.d.ctx.MemcpyHtoDAsync(cuda.DevicePtr(dst.ptr)+cuda.DevicePtr(off), src, s.s); err != nil {
		return s.d.fail(fmt.Sprintf("copy %d bytes to device", len(src)), err)
	}
	return nil
}

// Record creates a timing event with blocking sync, so waiting for it
// sleeps instead of spinning a CPU.
func (s *cudaStream) Record(ctx context.Context) (Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.t.alive(); err != nil {
		return nil, err
	}
	e, err := s.d.ctx.EventCreate(cuda.EventBlockingSync)
	if err != nil {
		return nil, s.d.fail("create event", err)
	}
	if err := s.d.ctx.EventRecord(e, s.s); err != nil {
		return nil, s.d.fail("record event", errors.Join(err, s.d.ctx.EventDestroy(e)))
	}
	ev := &cudaEvent{d: s.d, e: e, done: make(chan struct{})}
	if ev.t, err = s.d.lt.track(ev.destroy); err != nil {
		return nil, err
	}
	return ev, nil
}

func (s *cudaStream) Sync(ctx context.Context) error {
	ev, err := s.Record(ctx)
	if err != nil {
		return err
	}
	return errors.Join(ev.Wait(ctx), ev.Close())
}

func (s *cudaStream) Close() error { return s.t.release() }

// cudaEvent is an Event over a CUevent. Wait hands cuEventSynchronize to
// one waiter goroutine, owned by the event, so callers can give up on ctx;
// destroy waits for that goroutine.
type cudaEvent struct {
	d *cudaDevice
	e cuda.Event
	t *ticket

	once   sync.Once
	waiter sync.WaitGroup
	done   chan struct{} // closed by the waiter
	err    error         // the waiter's result, read after done
}

func (e *cudaEvent) Done() (bool, error) {
	if err := e.t.alive(); err != nil {
		return false, err
	}
	done, err := e.d.ctx.EventQuery(e.e)
	if err != nil {
		return true, e.d.fail("query event", err)
	}
	return done, nil
}

func (e *cudaEvent) Wait(ctx context.Context) error {
	if done, err := e.Done(); done || err != nil {
		return err
	}
	e.once.Do(func() {
		e.waiter.Go(func() {
			e.err = e.d.ctx.EventSynchronize(e.e)
			close(e.done)
		})
	})
	select {
	case <-e.done:
		if e.err != nil {
			return e.d.fail("wait for event", e.err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *cudaEvent) Elapsed(start Event) (time.Duration, error) {
	s, ok := start.(*cudaEvent)
	if !ok || s.d != e.d {
		return 0, ErrForeign
	}
	if err := errors.Join(s.t.alive(), e.t.alive()); err != nil {
		return 0, ErrClosed
	}
	d, err := e.d.ctx.EventElapsed(s.e, e.e)
	if err != nil {
		return 0, e.d.fail("elapsed time", err)
	}
	return d, nil
}

func (e *cudaEvent) Close() error { return e.t.release() }

func (e *cudaEvent) destroy() error {
	e.waiter.Wait()
	return e.d.ctx.EventDestroy(e.e)
}
