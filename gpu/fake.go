package gpu

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"unsafe"
)

// FakeConfig configures a Fake. The zero value is one device of 16 GiB.
type FakeConfig struct {
	// Devices is the number of devices, 1 to 16; 0 means 1.
	Devices int
	// MemBytes is each device's memory in bytes; 0 means 16 GiB. Only what
	// is allocated is backed (by Go memory).
	MemBytes int64
	// Fault, if set, is called before each device operation with its name
	// ("Alloc", "HostAlloc", "Register", "NewStream", "CopyHtoD", "Record",
	// "CopyDtoH") and the device ordinal. A non-nil result fails the
	// operation with that error. It may be called concurrently.
	Fault func(op string, ordinal int) error
}

// Fake is an in-process model of a GPU backend for tests and demos.
// Device memory is Go memory. Each stream is a goroutine that runs its
// copies in order, asynchronously to the caller; an event completes when
// the work enqueued before it on its stream has run. Copies from pinned
// memory (HostAlloc, Register) read their source when they run, as DMA
// does, and fail the stream with ErrSourceModified when it changed since
// the copy was enqueued; copies from pageable memory take a snapshot before
// CopyHtoD returns, as the driver's staging does. FakeDevice.Hold stops
// streams so tests can observe copies in flight.
//
// What a real driver would do silently wrong, the Fake reports: copying a
// reused buffer (ErrSourceModified), overlapping registrations, use after
// close. Its timings are memcpy speeds, not PCIe.
type Fake struct {
	cfg FakeConfig // immutable
	sys System     // immutable
	lt  *lifetime  // open devices
}

var _ Backend = (*Fake)(nil)

// NewFake returns a Fake with cfg's devices.
func NewFake(cfg FakeConfig) (*Fake, error) {
	if cfg.Devices == 0 {
		cfg.Devices = 1
	}
	if cfg.MemBytes == 0 {
		cfg.MemBytes = 16 << 30
	}
	if cfg.Devices < 1 || cfg.Devices > 16 || cfg.MemBytes < 0 {
		return nil, fmt.Errorf("gpu: fake: want 1 to 16 devices and memory >= 0, got %d and %d", cfg.Devices, cfg.MemBytes)
	}
	f := &Fake{cfg: cfg, lt: newLifetime()}
	f.sys.Notes = []string{"fake backend: device memory is host memory and copies are memcpy, not PCIe"}
	for i := range cfg.Devices {
		f.sys.Devices = append(f.sys.Devices, DeviceInfo{
			Ordinal:          i,
			Name:             "cacheagent fake GPU",
			UUID:             fmt.Sprintf("GPU-fake-%04d", i),
			BusID:            fmt.Sprintf("0000:%02x:00.0", 0xf0+i),
			MemTotal:         uint64(cfg.MemBytes),
			NUMANode:         -1,
			Link:             Link{Gen: 5, Width: 16, CurGen: 5, CurWidth: 16},
			ReadOnlyRegister: true,
		})
	}
	return f, nil
}

// Kind returns ModeFake.
func (f *Fake) Kind() Mode { return ModeFake }

// System describes the fake devices.
func (f *Fake) System() System {
	s := f.sys
	s.Devices = append([]DeviceInfo(nil), f.sys.Devices...)
	return s
}

// Open returns a new *FakeDevice for the ordinal. Opening an ordinal twice
// gives two independent devices.
func (f *Fake) Open(ctx context.Context, ordinal int) (Device, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= len(f.sys.Devices) {
		return nil, fmt.Errorf("%w: no device %d (%d devices)", ErrNoGPU, ordinal, len(f.sys.Devices))
	}
	d := &FakeDevice{
		info:  f.sys.Devices[ordinal],
		fault: f.cfg.Fault,
		mem:   f.cfg.MemBytes,
		seed:  maphash.MakeSeed(),
		lt:    newLifetime(),
		next:  DevicePtr(0x7f00_0000_0000) + DevicePtr(ordinal)<<36,
		gate:  make(chan struct{}),
	}
	close(d.gate)
	var err error
	if d.t, err = f.lt.track(d.shutdown); err != nil {
		return nil, err
	}
	return d, nil
}

// Close closes the devices still open.
func (f *Fake) Close() error { return f.lt.close() }

// FakeDevice is a device of the Fake. Besides Device it offers Hold.
type FakeDevice struct {
	info    DeviceInfo                         // immutable
	fault   func(op string, ordinal int) error // immutable
	mem     int64                              // immutable
	seed    maphash.Seed                       // immutable
	lt      *lifetime
	t       *ticket
	workers sync.WaitGroup // stream goroutines

	mu     sync.Mutex
	used   int64         // guarded by mu: device bytes allocated
	next   DevicePtr     // guarded by mu: next device address
	pinned []span        // guarded by mu: pinned host ranges
	holds  int           // guarded by mu: outstanding Holds
	gate   chan struct{} // guarded by mu: closed while holds == 0
	ending bool          // guarded by mu: shutting down, no more Holds
}

var _ Device = (*FakeDevice)(nil)

// span is a host address range [lo, hi).
type span struct{ lo, hi uintptr }

func spanOf(b []byte) span {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return span{lo, lo + uintptr(len(b))}
}

// Hold stops the device's streams from starting work until release is
// called; work already running finishes. Holds nest. Close releases them
// all. Calling release more than once is harmless.
func (d *FakeDevice) Hold() (release func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ending {
		return func() {}
	}
	if d.holds == 0 {
		d.gate = make(chan struct{})
	}
	d.holds++
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.holds > 0 {
				d.holds--
				if d.holds == 0 {
					close(d.gate)
				}
			}
		})
	}
}

// endHolds drops every hold and refuses new ones, so closing streams
// cannot wait on a held queue.
func (d *FakeDevice) endHolds() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ending = true
	if d.holds > 0 {
		d.holds = 0
		close(d.gate)
	}
}

// waitGate blocks while the device is held.
func (d *FakeDevice) waitGate() {
	d.mu.Lock()
	g := d.gate
	d.mu.Unlock()
	<-g
}

// begin checks ctx and the device, then asks Fault about op.
func (d *FakeDevice) begin(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.lt.check(); err != nil {
		return err
	}
	if d.fault != nil {
		if err := d.fault(op, d.info.Ordinal); err != nil {
			return fmt.Errorf("gpu %d (fake): %s: %w", d.info.Ordinal, op, err)
		}
	}
	return nil
}

// Info describes the device.
func (d *FakeDevice) Info() DeviceInfo { return d.info }

// MemInfo returns the fake memory not yet allocated, and the total.
func (d *FakeDevice) MemInfo(ctx context.Context) (free, total uint64, err error) {
	if err := d.begin(ctx, "MemInfo"); err != nil {
		return 0, 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return uint64(d.mem - d.used), uint64(d.mem), nil
}

// Alloc allocates n bytes of fake device memory at a unique fake address.
func (d *FakeDevice) Alloc(ctx context.Context, n int) (*DeviceMem, error) {
	if err := d.begin(ctx, "Alloc"); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("gpu %d (fake): alloc %d bytes: %w", d.info.Ordinal, n, ErrInvalid)
	}
	d.mu.Lock()
	if int64(n) > d.mem-d.used {
		used := d.used
		d.mu.Unlock()
		return nil, fmt.Errorf("gpu %d (fake): alloc %d bytes with %d of %d in use: %w", d.info.Ordinal, n, used, d.mem, ErrOutOfMemory)
	}
	d.used += int64(n)
	ptr := d.next
	d.next += DevicePtr((n + 255) &^ 255)
	d.mu.Unlock()

	m := &DeviceMem{ptr: ptr, n: n, owner: d.lt, store: make([]byte, n)}
	var err error
	m.t, err = d.lt.track(func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.used -= int64(n)
		return nil
	})
	return m, err
}

// HostAlloc allocates n bytes of Go memory and counts it as pinned.
func (d *FakeDevice) HostAlloc(ctx context.Context, n int) (*HostMem, error) {
	if err := d.begin(ctx, "HostAlloc"); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("gpu %d (fake): pinned alloc %d bytes: %w", d.info.Ordinal, n, ErrInvalid)
	}
	b := make([]byte, n)
	t, err := d.pin(b)
	if err != nil {
		return nil, err
	}
	return &HostMem{b: b, node: -1, t: t}, nil
}

// Register counts b as pinned. readOnly is not checked: the Fake cannot
// see a mapping's protection.
func (d *FakeDevice) Register(ctx context.Context, b []byte, readOnly bool) (*Registration, error) {
	if err := d.begin(ctx, "Register"); err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("gpu %d (fake): register 0 bytes: %w", d.info.Ordinal, ErrInvalid)
	}
	t, err := d.pin(b)
	if err != nil {
		return nil, err
	}
	return &Registration{b: b, t: t}, nil
}

// pin adds b's range to the pinned ranges, refusing overlaps as CUDA does.
func (d *FakeDevice) pin(b []byte) (*ticket, error) {
	s := spanOf(b)
	d.mu.Lock()
	for _, p := range d.pinned {
		if s.lo < p.hi && p.lo < s.hi {
			d.mu.Unlock()
			return nil, fmt.Errorf("gpu %d (fake): pin %d bytes at %#x: %w", d.info.Ordinal, len(b), s.lo, ErrAlreadyRegistered)
		}
	}
	d.pinned = append(d.pinned, s)
	d.mu.Unlock()
	return d.lt.track(func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		for i, p := range d.pinned {
			if p == s {
				d.pinned = append(d.pinned[:i], d.pinned[i+1:]...)
				break
			}
		}
		return nil
	})
}

// isPinned reports whether all of b lies in one pinned range.
func (d *FakeDevice) isPinned(b []byte) bool {
	s := spanOf(b)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.pinned {
		if p.lo <= s.lo && s.hi <= p.hi {
			return true
		}
	}
	return false
}

// CopyDtoH copies from fake device memory at once. It is not ordered with
// streams: copying while a stream writes the same memory is a data race,
// which -race reports.
func (d *FakeDevice) CopyDtoH(ctx context.Context, dst []byte, src *DeviceMem, off int) error {
	if err := d.begin(ctx, "CopyDtoH"); err != nil {
		return err
	}
	if err := src.check(d.lt, off, len(dst)); err != nil {
		return fmt.Errorf("gpu %d (fake): copy to host: %w", d.info.Ordinal, err)
	}
	copy(dst, src.store[off:off+len(dst)])
	return nil
}

// Close releases holds, closes the streams, waits for their goroutines to
// finish the work queued, and frees everything.
func (d *FakeDevice) Close() error { return d.t.release() }

func (d *FakeDevice) shutdown() error {
	d.endHolds()
	err := d.lt.close()
	d.workers.Wait()
	return err
}
