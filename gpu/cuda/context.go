package cuda

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Context is a device's primary context, retained by this process. Every
// method runs its driver call on a locked OS thread after making the
// context current there (see the package doc), so a Context may be used
// from any goroutine, concurrently. After Release, methods fail with
// ErrReleased.
type Context struct {
	lib    *Library
	dev    Device
	handle uintptr

	released atomic.Bool
}

// RetainPrimaryContext retains d's primary context, creating it on first
// use (this costs device memory, a few hundred MiB, and tens of ms).
func (l *Library) RetainPrimaryContext(d Device) (*Context, error) {
	var h uintptr
	if err := l.check("cuDevicePrimaryCtxRetain", l.fn.cuDevicePrimaryCtxRetain(&h, d)); err != nil {
		return nil, err
	}
	return &Context{lib: l, dev: d, handle: h}, nil
}

// Device returns the context's device.
func (c *Context) Device() Device { return c.dev }

// Release releases the primary context. When no other retainer remains in
// the process the driver destroys it, and with it every allocation,
// registration, stream and event made in it.
func (c *Context) Release() error {
	if !c.released.CompareAndSwap(false, true) {
		return fmt.Errorf("cuDevicePrimaryCtxRelease_v2: %w", ErrReleased)
	}
	return c.lib.check("cuDevicePrimaryCtxRelease_v2", c.lib.fn.cuDevicePrimaryCtxRelease_v2(c.dev))
}

// call runs fn, the driver function op, on a locked OS thread with c
// current. The thread keeps c current after the call; every call sets it
// again, so nothing relies on that.
func (c *Context) call(op string, fn func() Result) error {
	if c.released.Load() {
		return fmt.Errorf("%s: %w", op, ErrReleased)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.lib.check("cuCtxSetCurrent", c.lib.fn.cuCtxSetCurrent(c.handle)); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return c.lib.check(op, fn())
}

// invalid reports an argument rejected before reaching the driver, the way
// the driver would (CUDA_ERROR_INVALID_VALUE).
func invalid(op, why string) error {
	return fmt.Errorf("%s: %s: %w", op, why, ErrInvalidValue)
}

// MemGetInfo returns the device's free and total memory in bytes.
func (c *Context) MemGetInfo() (free, total uint64, err error) {
	var f, t uintptr
	err = c.call("cuMemGetInfo_v2", func() Result { return c.lib.fn.cuMemGetInfo_v2(&f, &t) })
	return uint64(f), uint64(t), err
}

// MemAlloc allocates n bytes of device memory.
func (c *Context) MemAlloc(n int) (DevicePtr, error) {
	if n <= 0 {
		return 0, invalid("cuMemAlloc_v2", "size must be positive")
	}
	var p DevicePtr
	err := c.call("cuMemAlloc_v2", func() Result { return c.lib.fn.cuMemAlloc_v2(&p, uintptr(n)) })
	return p, err
}

// MemFree frees device memory from MemAlloc.
func (c *Context) MemFree(p DevicePtr) error {
	return c.call("cuMemFree_v2", func() Result { return c.lib.fn.cuMemFree_v2(p) })
}

// MemHostAlloc allocates n bytes of page-locked host memory with the given
// HostAlloc* flags. The pages are faulted in on the calling thread, so their
// NUMA node follows that thread's memory policy. The slice is C memory,
// valid until MemFreeHost.
func (c *Context) MemHostAlloc(n int, flags uint32) ([]byte, error) {
	if n <= 0 {
		return nil, invalid("cuMemHostAlloc", "size must be positive")
	}
	var p unsafe.Pointer
	err := c.call("cuMemHostAlloc", func() Result { return c.lib.fn.cuMemHostAlloc(&p, uintptr(n), flags) })
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// MemFreeHost frees memory from MemHostAlloc. It synchronizes the device.
func (c *Context) MemFreeHost(b []byte) error {
	if len(b) == 0 {
		return invalid("cuMemFreeHost", "empty buffer")
	}
	return c.call("cuMemFreeHost", func() Result { return c.lib.fn.cuMemFreeHost(unsafe.Pointer(unsafe.SliceData(b))) })
}

// MemHostRegister page-locks b with the given HostRegister* flags, so copies
// from it are DMA. A read-only mapping needs HostRegisterReadOnly. Ranges
// may not overlap an existing registration (ErrHostMemoryAlreadyRegistered).
// b must stay mapped until MemHostUnregister.
func (c *Context) MemHostRegister(b []byte, flags uint32) error {
	if len(b) == 0 {
		return invalid("cuMemHostRegister_v2", "empty buffer")
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	return c.call("cuMemHostRegister_v2", func() Result { return c.lib.fn.cuMemHostRegister_v2(p, uintptr(len(b)), flags) })
}

// MemHostUnregister undoes MemHostRegister of the range starting at b. It
// synchronizes the device. Call it before unmapping b.
func (c *Context) MemHostUnregister(b []byte) error {
	if len(b) == 0 {
		return invalid("cuMemHostUnregister", "empty buffer")
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	return c.call("cuMemHostUnregister", func() Result { return c.lib.fn.cuMemHostUnregister(p) })
}

// MemcpyHtoDAsync enqueues a copy of src to dst on stream s. From
// page-locked memory the copy is DMA and src must not change until the copy
// completes (record an event after it); from pageable memory the driver
// stages src before returning, blocking the calling thread.
func (c *Context) MemcpyHtoDAsync(dst DevicePtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(src))
	return c.call("cuMemcpyHtoDAsync_v2", func() Result {
		return c.lib.fn.cuMemcpyHtoDAsync_v2(dst, p, uintptr(len(src)), s)
	})
}

// MemcpyDtoH copies device memory into dst and waits for it. It runs on the
// legacy default stream, which is not ordered with non-blocking streams:
// synchronize those first.
func (c *Context) MemcpyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(dst))
	return c.call("cuMemcpyDtoH_v2", func() Result { return c.lib.fn.cuMemcpyDtoH_v2(p, src, uintptr(len(dst))) })
}

// StreamCreate creates a stream with the given Stream* flags.
func (c *Context) StreamCreate(flags uint32) (Stream, error) {
	var s Stream
	err := c.call("cuStreamCreate", func() Result { return c.lib.fn.cuStreamCreate(&s, flags) })
	return s, err
}

// StreamSynchronize blocks the calling thread until all work on s is done.
func (c *Context) StreamSynchronize(s Stream) error {
	return c.call("cuStreamSynchronize", func() Result { return c.lib.fn.cuStreamSynchronize(s) })
}

// StreamDestroy destroys s; work already queued on it still completes.
func (c *Context) StreamDestroy(s Stream) error {
	return c.call("cuStreamDestroy_v2", func() Result { return c.lib.fn.cuStreamDestroy_v2(s) })
}

// EventCreate creates an event with the given Event* flags.
func (c *Context) EventCreate(flags uint32) (Event, error) {
	var e Event
	err := c.call("cuEventCreate", func() Result { return c.lib.fn.cuEventCreate(&e, flags) })
	return e, err
}

// EventRecord records e on s: e completes when all work queued on s before
// it has.
func (c *Context) EventRecord(e Event, s Stream) error {
	return c.call("cuEventRecord", func() Result { return c.lib.fn.cuEventRecord(e, s) })
}

// EventQuery reports whether e has completed, without blocking.
func (c *Context) EventQuery(e Event) (bool, error) {
	var r Result
	err := c.call("cuEventQuery", func() Result {
		r = c.lib.fn.cuEventQuery(e)
		if r == ErrNotReady {
			return Success
		}
		return r
	})
	return err == nil && r == Success, err
}

// EventSynchronize blocks the calling thread until e completes (sleeping,
// for events created with EventBlockingSync).
func (c *Context) EventSynchronize(e Event) error {
	return c.call("cuEventSynchronize", func() Result { return c.lib.fn.cuEventSynchronize(e) })
}

// EventDestroy destroys e.
func (c *Context) EventDestroy(e Event) error {
	return c.call("cuEventDestroy_v2", func() Result { return c.lib.fn.cuEventDestroy_v2(e) })
}

// EventElapsed returns the GPU time from start to end; both must have
// completed and have been created without EventDisableTiming.
func (c *Context) EventElapsed(start, end Event) (time.Duration, error) {
	var ms float32
	err := c.call("cuEventElapsedTime", func() Result { return c.lib.fn.cuEventElapsedTime(&ms, start, end) })
	return time.Duration(float64(ms) * float64(time.Millisecond)), err
}
