package gpufeed

import (
	"context"
	"fmt"
	"time"

	"github.com/cacheagent/cacheagent/gpu"
	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// Batch is one batch of samples on the device: for each array, the rows of
// the batch's samples, contiguous in device memory, in sample order, and
// the pinned host copy they were copied from. A Batch is lent by the Feed:
// valid until Release, never to be modified. Read the device memory only
// after Ready.
type Batch struct {
	// Epoch and Index place the batch: the Index-th batch of Epoch.
	Epoch, Index int
	// IDs are the samples' ids (row numbers across the dataset), in order.
	IDs []int64
	// Names are the arrays' names (Dataset.Names).
	Names []string
	// Host holds the arrays as gathered, in pinned host memory: the
	// sources of the copies (see loader.Batch.Arrays).
	Host []array.Array
	// Device holds one device array per name, in Names order.
	Device []DeviceArray

	s *slot
}

// DeviceArray is one array of a batch in device memory, in C order.
type DeviceArray struct {
	// Ptr is the device address of the first byte, Len the number of
	// bytes: the batch's rows.
	Ptr gpu.DevicePtr
	Len int
	// DType, Shape ([rows, row shape...]) and ByteOrder describe the
	// elements, as in the host array. Shape must not be modified.
	DType     array.DType
	Shape     []int
	ByteOrder array.ByteOrder
	// Mem is the device buffer holding the rows from offset 0 (it is
	// sized for a full batch), for Device.CopyDtoH and the like.
	Mem *gpu.DeviceMem
}

// Len returns the number of samples.
func (b *Batch) Len() int { return len(b.IDs) }

// Array returns the device array called name.
func (b *Batch) Array(name string) (DeviceArray, bool) {
	for i, n := range b.Names {
		if n == name {
			return b.Device[i], true
		}
	}
	return DeviceArray{}, false
}

// Ready waits until the batch's copies to the device have completed, or
// ctx is done. It returns nil once the device memory holds the batch; a
// copy's failure (which also fails the Feed: Next returns it from then
// on); ctx's error, after which Ready may be called again; ErrReleased
// after Release; or ErrClosed after the Feed's Close. The time it blocks
// counts as Stats.CopyWait.
func (b *Batch) Ready(ctx context.Context) error {
	s := b.s
	s.f.mu.RLock()
	defer s.f.mu.RUnlock()
	switch {
	case s.f.closed:
		return ErrClosed
	case !s.out.Load():
		return ErrReleased
	}
	return s.wait(ctx)
}

// wait waits for the slot's copy event, accounting the time blocked. The
// caller holds f.mu for reading.
func (s *slot) wait(ctx context.Context) error {
	done, err := s.ready.Done()
	if !done && err == nil {
		t0 := time.Now()
		err = s.ready.Wait(ctx)
		s.f.c.copyWait.Add(int64(time.Since(t0)))
		s.f.c.copyWaits.Add(1)
		if err != nil && ctx.Err() != nil {
			return err // still in flight
		}
	}
	if err != nil {
		err = fmt.Errorf("gpufeed: batch %d/%d: copy to the device: %w", s.batch.Epoch, s.batch.Index, err)
		s.f.fail(err)
	}
	return err
}

// Release gives the batch back to the Feed, once its copies have completed
// (it waits for them if Ready was not called, counting the time as
// Stats.CopyWait, so that its pinned buffers are never regathered under
// their own copy). The Batch must not be used afterwards, on the host or
// on the device: call it once the device work reading the batch is done,
// or use ReleaseAfter. Releasing twice does nothing. It may be called from
// any goroutine, also after the Feed is closed.
func (b *Batch) Release() { b.release(nil) }

// ReleaseAfter is Release for a consumer whose device work reading the
// batch may still be running: done, an event recorded after that work on
// the same device, must complete before the batch's device buffers are
// overwritten by a later batch's copy (the gathering goroutine waits for
// it). The Feed takes done over and closes it. done nil is Release.
func (b *Batch) ReleaseAfter(done gpu.Event) { b.release(done) }

func (b *Batch) release(after gpu.Event) {
	s := b.s
	if s == nil || !s.out.CompareAndSwap(true, false) {
		if after != nil {
			after.Close()
		}
		return
	}
	s.f.mu.RLock()
	if s.f.closed {
		if after != nil {
			after.Close()
		}
	} else {
		if s.ready != nil {
			s.wait(context.Background()) // a failure is recorded for Next
			s.ready.Close()
			s.ready = nil
		}
		s.after = after
	}
	s.f.mu.RUnlock()
	s.host.Release()
}
