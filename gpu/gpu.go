package gpu

import (
	"context"
	"time"

	"github.com/cacheagent/cacheagent/gpu/internal/pci"
)

// DevicePtr is an address in a device's memory, as kernels, other libraries
// and CUDA IPC see it.
type DevicePtr uint64

// Backend is a GPU driver and the devices it found when opened: the CUDA
// driver, the Fake or None. It is safe for concurrent use.
type Backend interface {
	// Kind says which backend this is: ModeCUDA, ModeFake or ModeNone.
	Kind() Mode
	// System describes the driver and devices as discovered at open.
	System() System
	// Open opens the device with the given ordinal for transfers. For CUDA
	// this retains the device's primary context (hundreds of MiB of device
	// memory, tens of ms). Close the device when done.
	Open(ctx context.Context, ordinal int) (Device, error)
	// Close closes every device still open, freeing what they hold.
	Close() error
}

// Device is one opened GPU. Its methods are safe for concurrent use, but
// Close must not race with the use of the device or of anything it made.
//
// Memory, registrations, streams and events made by a device belong to it:
// Close frees those still alive, after which their Free, Unregister and
// Close return nil and any other use fails with ErrClosed.
type Device interface {
	// Info describes the device.
	Info() DeviceInfo
	// MemInfo returns free and total device memory in bytes, now.
	MemInfo(ctx context.Context) (free, total uint64, err error)
	// Alloc allocates n bytes of device memory.
	Alloc(ctx context.Context, n int) (*DeviceMem, error)
	// HostAlloc allocates n bytes of pinned host memory, on the device's
	// NUMA node where it can (see the package doc). Copies from it are DMA.
	HostAlloc(ctx context.Context, n int) (*HostMem, error)
	// Register pins b, an existing mapping, so copies from it are DMA.
	// readOnly must be set for memory mapped without PROT_WRITE. Register
	// whole mappings once: ranges may not overlap (ErrAlreadyRegistered).
	// Unregister before unmapping b. Registering costs about as much as
	// reading b; do it for data that is copied many times.
	Register(ctx context.Context, b []byte, readOnly bool) (*Registration, error)
	// NewStream creates a stream: a queue of copies executed in order.
	NewStream(ctx context.Context) (Stream, error)
	// CopyDtoH copies len(dst) bytes at off in src to dst and waits for
	// the copy. It is not ordered with streams: Sync or Wait first.
	CopyDtoH(ctx context.Context, dst []byte, src *DeviceMem, off int) error
	// Close frees everything the device still holds and closes it.
	Close() error
}

// Stream is a queue of device work executed in order, asynchronously to
// the host. Use a stream from one goroutine at a time.
type Stream interface {
	// CopyHtoD enqueues a copy of src to dst at offset off. From pinned or
	// registered memory the copy is DMA and src must not change until an
	// event recorded after it completes. From pageable memory the host
	// copies src to driver staging before CopyHtoD returns (blocking, and
	// slower), after which src may be reused.
	CopyHtoD(ctx context.Context, dst *DeviceMem, off int, src []byte) error
	// Record enqueues an event that completes when all work enqueued
	// before it on this stream has. Close the event when done.
	Record(ctx context.Context) (Event, error)
	// Sync waits until all work enqueued so far has completed and returns
	// the first error that work met.
	Sync(ctx context.Context) error
	// Close destroys the stream; work already enqueued still completes.
	Close() error
}

// Event marks a point in a stream. It is safe for concurrent use, except
// Close.
type Event interface {
	// Done reports, without blocking, whether the event has completed, and
	// the error (if any) the stream's work met before it.
	Done() (bool, error)
	// Wait blocks until the event completes or ctx is done.
	Wait(ctx context.Context) error
	// Elapsed returns the device time from start to this event. Both must
	// have completed and come from the same device.
	Elapsed(start Event) (time.Duration, error)
	// Close destroys the event.
	Close() error
}

// System describes a backend's driver and devices.
type System struct {
	// Driver is the kernel driver version ("580.159.04"), "" if unknown.
	Driver string `json:"driver,omitempty"`
	// CUDAVersion is the CUDA version the driver supports, 1000*major +
	// 10*minor (12060 = 12.6); 0 if unknown.
	CUDAVersion int `json:"cuda_version,omitempty"`
	// Devices are in ordinal order.
	Devices []DeviceInfo `json:"devices"`
	// Notes say what discovery could not learn, and why.
	Notes []string `json:"notes,omitempty"`
}

// DeviceInfo describes one device.
type DeviceInfo struct {
	// Ordinal is the device's number for Backend.Open: the CUDA ordinal,
	// after CUDA_VISIBLE_DEVICES.
	Ordinal int `json:"ordinal"`
	// Name is the device's name, e.g. "NVIDIA H100 80GB HBM3".
	Name string `json:"name"`
	// UUID is "GPU-…", "" if unknown (no NVML).
	UUID string `json:"uuid,omitempty"`
	// BusID is the normalised PCI bus id, "0000:19:00.0".
	BusID string `json:"bus_id"`
	// MemTotal is device memory in bytes.
	MemTotal uint64 `json:"mem_total"`
	// MemFree is free device memory in bytes at discovery, 0 if unknown.
	MemFree uint64 `json:"mem_free,omitempty"`
	// NUMANode is the host NUMA node nearest the device, -1 if unknown.
	NUMANode int `json:"numa_node"`
	// CPUs are the host CPUs local to the device, empty if unknown.
	CPUs []int `json:"cpus,omitempty"`
	// Link is the device's PCIe link.
	Link Link `json:"link"`
	// ReadOnlyRegister reports that read-only mappings can be registered
	// (CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED).
	ReadOnlyRegister bool `json:"read_only_register"`
}

// CPUList returns CPUs in kernel list form ("0-55,112-167"), "" if unknown.
func (d DeviceInfo) CPUList() string { return pci.FormatCPUList(d.CPUs) }

// Link is a PCIe link. Zero fields are unknown.
type Link struct {
	// Gen and Width are the maximum generation and lane count: the lower
	// of what the device and its slot support.
	Gen   int `json:"max_gen"`
	Width int `json:"max_width"`
	// CurGen and CurWidth are the current state, which drops when idle.
	CurGen   int `json:"cur_gen,omitempty"`
	CurWidth int `json:"cur_width,omitempty"`
}

// Ceiling returns the link's bandwidth ceiling in GB/s per direction at its
// maximum generation and width, 0 if unknown. Gen5 x16 is 63 GB/s; pinned
// host-to-device copies reach about 90% of it.
func (l Link) Ceiling() float64 { return pci.Ceiling(l.Gen, l.Width) }
