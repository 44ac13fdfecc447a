package gpu

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Errors callers can test for with errors.Is. Backend errors keep their own
// chain too: a CUDA failure also matches its cuda.Result.
var (
	// ErrNoGPU reports that there is no GPU to use: the None backend, or
	// an ordinal with no device.
	ErrNoGPU = errors.New("gpu: no GPU available")
	// ErrClosed reports use of a device, stream, event or buffer after it
	// was closed or freed, or a second Close or Free.
	ErrClosed = errors.New("gpu: already closed or freed")
	// ErrOutOfMemory reports that device or pinned host memory ran out.
	ErrOutOfMemory = errors.New("gpu: out of memory")
	// ErrAlreadyRegistered reports a Register overlapping pinned memory.
	ErrAlreadyRegistered = errors.New("gpu: host memory already registered")
	// ErrUnsupported reports an operation the device cannot do, such as
	// registering read-only memory without driver support.
	ErrUnsupported = errors.New("gpu: not supported by the device")
	// ErrInvalid reports an argument the device rejects, such as a size
	// of zero.
	ErrInvalid = errors.New("gpu: invalid argument")
	// ErrRange reports an offset and length outside a buffer.
	ErrRange = errors.New("gpu: range outside the buffer")
	// ErrForeign reports a buffer or event used with another device.
	ErrForeign = errors.New("gpu: belongs to another device")
	// ErrNotReady reports an event that has not completed yet.
	ErrNotReady = errors.New("gpu: event not complete")
	// ErrSourceModified reports that the source of an asynchronous copy
	// changed before the copy ran: a buffer reused before its event
	// completed. Only the Fake can detect it; on a real GPU the device
	// would silently copy the new bytes.
	ErrSourceModified = errors.New("gpu: copy source modified while the copy was in flight")
)

// HostMem is pinned host memory from Device.HostAlloc.
type HostMem struct {
	b    []byte
	node int
	t    *ticket
}

// Bytes returns the memory. It is invalid after Free.
func (h *HostMem) Bytes() []byte { return h.b }

// NUMANode returns the NUMA node the allocation was steered to (by running
// it on that node's CPUs), or -1 when it was not steered.
func (h *HostMem) NUMANode() int { return h.node }

// Free frees the memory. It waits for the device to go idle (CUDA
// synchronizes on it), so free at shutdown, not per batch.
func (h *HostMem) Free() error { return h.t.release() }

// DeviceMem is device memory from Device.Alloc.
type DeviceMem struct {
	ptr   DevicePtr
	n     int
	owner *lifetime // the device that allocated it
	store []byte    // the Fake's backing memory
	t     *ticket
}

// Ptr returns the device address of the first byte.
func (m *DeviceMem) Ptr() DevicePtr { return m.ptr }

// Len returns the size in bytes.
func (m *DeviceMem) Len() int { return m.n }

// Free frees the memory.
func (m *DeviceMem) Free() error { return m.t.release() }

// check validates a use of [off, off+n) of m by the device owning lt.
func (m *DeviceMem) check(lt *lifetime, off, n int) error {
	if m == nil || m.owner != lt {
		return ErrForeign
	}
	if off < 0 || n < 0 || off > m.n-n {
		return fmt.Errorf("%w: [%d, %d+%d) of %d bytes", ErrRange, off, off, n, m.n)
	}
	return m.t.alive()
}

// Registration is host memory pinned by Device.Register.
type Registration struct {
	b []byte
	t *ticket
}

// Bytes returns the registered memory.
func (r *Registration) Bytes() []byte { return r.b }

// Unregister unpins the memory; do it before unmapping. It waits for the
// device to go idle.
func (r *Registration) Unregister() error { return r.t.release() }

// lifetime tracks what a device (or a backend) has handed out, so Close can
// free whatever callers left behind and later frees become no-ops.
type lifetime struct {
	mu     sync.Mutex
	closed bool                    // guarded by mu
	next   uint64                  // guarded by mu
	live   map[uint64]func() error // guarded by mu: free funcs by creation order
}

func newLifetime() *lifetime { return &lifetime{live: make(map[uint64]func() error)} }

// check fails with ErrClosed once l is closed.
func (l *lifetime) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	return nil
}

// track records free, which releases a resource just made. When l is
// already closed it frees the resource at once and fails with ErrClosed.
func (l *lifetime) track(free func() error) (*ticket, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errors.Join(ErrClosed, free())
	}
	l.next++
	id := l.next
	l.live[id] = free
	l.mu.Unlock()
	return &ticket{l: l, id: id}, nil
}

// close marks l closed and frees everything still live, newest first.
func (l *lifetime) close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	ids := make([]uint64, 0, len(l.live))
	for id := range l.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	frees := make([]func() error, 0, len(ids))
	for _, id := range slices.Backward(ids) {
		frees = append(frees, l.live[id])
	}
	clear(l.live)
	l.mu.Unlock()

	var errs []error
	for _, free := range frees {
		errs = append(errs, free())
	}
	return errors.Join(errs...)
}

// ticket is one tracked resource.
type ticket struct {
	l    *lifetime
	id   uint64
	done atomic.Bool
}

// release frees the resource once. A second release fails with ErrClosed;
// a release after the owner closed (and freed it) is a no-op.
func (t *ticket) release() error {
	if t == nil || !t.done.CompareAndSwap(false, true) {
		return ErrClosed
	}
	t.l.mu.Lock()
	free, ok := t.l.live[t.id]
	delete(t.l.live, t.id)
	t.l.mu.Unlock()
	if !ok {
		return nil
	}
	return free()
}

// alive fails with ErrClosed once the resource or its owner is gone.
func (t *ticket) alive() error {
	if t == nil || t.done.Load() {
		return ErrClosed
	}
	t.l.mu.Lock()
	defer t.l.mu.Unlock()
	if _, ok := t.l.live[t.id]; !ok {
		return ErrClosed
	}
	return nil
}
