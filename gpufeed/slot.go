package gpufeed

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cacheagent/cacheagent/gpu"
	"github.com/cacheagent/cacheagent/loader"
)

// slot mirrors one of the Loader's batch slots: its buffers, pinned and on
// the device, its stream and the events of its current batch.
//
// The gathering goroutine running OnBatch for the slot sets ready and
// reads after; the consumer reads ready after Next and sets after in
// ReleaseAfter. The Loader's channels order these (a slot is gathered only
// after it is released, and handed out only after it is gathered), so the
// fields need no lock; Close uses them under Feed.mu after the Loader
// stopped.
type slot struct {
	f      *Feed
	index  int
	bufs   []*buffer  // one per array, in Names order
	stream gpu.Stream // used by one goroutine at a time: see above
	ready  gpu.Event  // completes when the current batch's copies have; nil if none
	after  gpu.Event  // from ReleaseAfter: wait before overwriting the device buffers
	host   *loader.Batch
	batch  Batch
	out    atomic.Bool // handed out by Next, not yet released
}

// buffer is one array's buffer of a slot: the pinned host memory the
// Loader gathers into and the device memory it is copied to.
type buffer struct {
	host *gpu.HostMem
	dev  *gpu.DeviceMem
	slot *slot
	j    int // the array's index
}

// addr returns the address of b's first byte (of its backing array when b
// is empty).
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// newBuffer is the Loader's NewBuffer: the Loader allocates its slots one
// after the other, each one buffer per array in order, so every f.names
// buffers start a new slot. Each buffer gets n bytes (at least 1, so that
// every buffer has its own address) of pinned host and device memory.
func (f *Feed) newBuffer(ctx context.Context, n int) ([]byte, error) {
	if len(f.slots) == 0 || len(f.slots[len(f.slots)-1].bufs) == f.names {
		s := &slot{f: f, index: len(f.slots)}
		s.batch.s = s
		f.slots = append(f.slots, s)
		var err error
		if s.stream, err = f.dev.NewStream(ctx); err != nil {
			return nil, fmt.Errorf("gpufeed: slot %d: stream: %w", s.index, err)
		}
	}
	s := f.slots[len(f.slots)-1]
	b := &buffer{slot: s, j: len(s.bufs)}
	var err error
	if b.host, err = f.dev.HostAlloc(ctx, max(n, 1)); err != nil {
		return nil, fmt.Errorf("gpufeed: slot %d array %d: %d bytes of pinned memory: %w", s.index, b.j, n, err)
	}
	if b.dev, err = f.dev.Alloc(ctx, max(n, 1)); err != nil {
		return nil, errors.Join(fmt.Errorf("gpufeed: slot %d array %d: %d bytes of device memory: %w",
			s.index, b.j, n, err), b.host.Free())
	}
	s.bufs = append(s.bufs, b)
	f.bufs[addr(b.host.Bytes())] = b
	return b.host.Bytes()[:n:n], nil
}

// slotOf returns the slot whose buffers hold hb's arrays.
func (f *Feed) slotOf(hb *loader.Batch) (*slot, error) {
	if len(hb.Arrays) != f.names {
		return nil, fmt.Errorf("%w: %d arrays, want %d", errForeign, len(hb.Arrays), f.names)
	}
	first := f.bufs[addr(hb.Arrays[0].Data)]
	if first == nil {
		return nil, fmt.Errorf("%w: batch %d/%d (zero-copy %v)", errForeign, hb.Epoch, hb.Index, hb.ZeroCopy)
	}
	s := first.slot
	for j, a := range hb.Arrays {
		if f.bufs[addr(a.Data)] != s.bufs[j] || len(a.Data) > s.bufs[j].dev.Len() {
			return nil, fmt.Errorf("%w: batch %d/%d array %d", errForeign, hb.Epoch, hb.Index, j)
		}
	}
	return s, nil
}

// onBatch is the Loader's OnBatch: in the gathering goroutine, it enqueues
// the copies of hb's arrays to the slot's device buffers and records the
// event the consumer waits for.
func (f *Feed) onBatch(ctx context.Context, hb *loader.Batch) error {
	s, err := f.slotOf(hb)
	if err != nil {
		return err
	}
	if err := s.settle(ctx); err != nil {
		return fmt.Errorf("gpufeed: batch %d/%d: %w", hb.Epoch, hb.Index, err)
	}
	t0 := time.Now()
	var copies, bytes int64
	for j, a := range hb.Arrays {
		if len(a.Data) == 0 {
			continue
		}
		if err := s.stream.CopyHtoD(ctx, s.bufs[j].dev, 0, a.Data); err != nil {
			err = fmt.Errorf("gpufeed: batch %d/%d: copy %q to the device: %w", hb.Epoch, hb.Index, hb.Names[j], err)
			return s.abort(ctx, err, copies > 0)
		}
		copies++
		bytes += int64(len(a.Data))
	}
	ev, err := s.stream.Record(ctx)
	if err != nil {
		err = fmt.Errorf("gpufeed: batch %d/%d: record the copy's event: %w", hb.Epoch, hb.Index, err)
		return s.abort(ctx, err, copies > 0)
	}
	s.ready = ev
	f.c.enqueue.Add(int64(time.Since(t0)))
	f.c.copies.Add(copies)
	f.c.bytes.Add(bytes)
	return nil
}

// settle waits, before the slot's device buffers are overwritten, for the
// consumer's ReleaseAfter event and for a previous batch's copy that was
// never handed out.
func (s *slot) settle(ctx context.Context) error {
	if s.after != nil {
		if err := s.after.Wait(ctx); err != nil {
			return fmt.Errorf("waiting for the release event of the slot's last batch: %w", err)
		}
		s.after.Close()
		s.after = nil
	}
	if s.ready != nil {
		err := s.ready.Wait(ctx)
		if err != nil && ctx.Err() != nil {
			return err
		}
		s.ready.Close()
		s.ready = nil
		if err != nil {
			return fmt.Errorf("the slot's last copy: %w", err)
		}
	}
	return nil
}

// abort returns err after waiting, when some of the batch's copies were
// enqueued, for them to finish: the Loader may regather the buffer as soon
// as OnBatch fails. If even that fails, the device is unusable and the
// batch is lost anyway; the error says so.
func (s *slot) abort(ctx context.Context, err error, enqueued bool) error {
	if !enqueued {
		return err
	}
	if serr := s.stream.Sync(context.WithoutCancel(ctx)); serr != nil {
		return fmt.Errorf("%w (and waiting for its enqueued copies: %w)", err, serr)
	}
	return err
}

// fill sets the slot's Batch from the Loader's.
func (s *slot) fill(hb *loader.Batch) {
	b := &s.batch
	s.host = hb
	b.Epoch, b.Index, b.IDs, b.Names, b.Host = hb.Epoch, hb.Index, hb.IDs, hb.Names, hb.Arrays
	if b.Device == nil {
		b.Device = make([]DeviceArray, len(s.bufs))
	}
	for j, a := range hb.Arrays {
		m := s.bufs[j].dev
		b.Device[j] = DeviceArray{Ptr: m.Ptr(), Len: len(a.Data), DType: a.DType, Shape: a.Shape,
			ByteOrder: a.ByteOrder, Mem: m}
	}
}

// free waits for the slot's copies and frees its events, stream and
// buffers.
func (s *slot) free() error {
	var errs []error
	if s.after != nil {
		s.after.Wait(context.Background()) // the consumer's work reading the device buffers
	}
	if s.stream != nil {
		// Copy failures were reported by Ready or Next, or belong to
		// batches never handed out: only the wait matters here.
		s.stream.Sync(context.Background())
		errs = append(errs, s.stream.Close())
	}
	for _, ev := range []gpu.Event{s.ready, s.after} {
		if ev != nil {
			errs = append(errs, ev.Close())
		}
	}
	s.ready, s.after = nil, nil
	for _, b := range s.bufs {
		errs = append(errs, b.dev.Free(), b.host.Free())
	}
	return errors.Join(errs...)
}
