package cuda

import (
	"fmt"
	"strings"
	"unsafe"
)

// DefaultLibrary is the driver library Load opens when given no path.
const DefaultLibrary = "libcuda.so.1"

// Device is a CUdevice: a CUDA ordinal resolved by the driver.
type Device int32

// DevicePtr is a CUdeviceptr, an address in device memory.
type DevicePtr uint64

// Stream is a CUstream handle.
type Stream uintptr

// Event is a CUevent handle.
type Event uintptr

// Attribute is a CUdevice_attribute.
type Attribute int32

// Device attributes the agent reads (cuda.h, CUDA 12.6).
const (
	AttrCanMapHostMemory                      Attribute = 19
	AttrPCIBusID                              Attribute = 33
	AttrPCIDeviceID                           Attribute = 34
	AttrAsyncEngineCount                      Attribute = 40
	AttrUnifiedAddressing                     Attribute = 41
	AttrPCIDomainID                           Attribute = 50
	AttrPageableMemoryAccess                  Attribute = 88
	AttrHostRegisterSupported                 Attribute = 99
	AttrPageableMemoryAccessUsesHostPageTable Attribute = 100
	AttrReadOnlyHostRegisterSupported         Attribute = 113
	AttrHostNUMAID                            Attribute = 134
)

// Flags of cuMemHostAlloc, cuMemHostRegister, cuStreamCreate and
// cuEventCreate.
const (
	HostAllocPortable      uint32 = 0x1
	HostAllocDeviceMap     uint32 = 0x2
	HostAllocWriteCombined uint32 = 0x4

	HostRegisterPortable  uint32 = 0x1
	HostRegisterDeviceMap uint32 = 0x2
	HostRegisterIOMemory  uint32 = 0x4
	HostRegisterReadOnly  uint32 = 0x8

	StreamNonBlocking uint32 = 0x1

	EventBlockingSync  uint32 = 0x1
	EventDisableTiming uint32 = 0x2
)

// Library is a loaded libcuda. It is immutable after Load and safe for
// concurrent use. It is never unloaded: contexts, pinned memory and
// registrations live in it until the process exits, as in every CUDA
// program.
type Library struct {
	path string
	fn   functions
}

// functions are the driver entry points, by their exported (versioned)
// names. Types follow cuda.h: CUresult int32, CUdevice int32, handles
// uintptr, CUdeviceptr uint64, size_t uintptr.
type functions struct {
	cuInit                       func(flags uint32) Result
	cuDriverGetVersion           func(v *int32) Result
	cuGetErrorName               func(r Result, s **byte) Result
	cuDeviceGetCount             func(n *int32) Result
	cuDeviceGet                  func(d *Device, ordinal int32) Result
	cuDeviceGetName              func(buf *byte, n int32, d Device) Result
	cuDeviceGetPCIBusId          func(buf *byte, n int32, d Device) Result
	cuDeviceGetAttribute         func(v *int32, a Attribute, d Device) Result
	cuDeviceTotalMem_v2          func(n *uintptr, d Device) Result
	cuDevicePrimaryCtxRetain     func(ctx *uintptr, d Device) Result
	cuDevicePrimaryCtxRelease_v2 func(d Device) Result
	cuCtxSetCurrent              func(ctx uintptr) Result
	cuMemGetInfo_v2              func(free, total *uintptr) Result
	cuMemAlloc_v2                func(p *DevicePtr, n uintptr) Result
	cuMemFree_v2                 func(p DevicePtr) Result
	cuMemHostAlloc               func(p *unsafe.Pointer, n uintptr, flags uint32) Result
	cuMemFreeHost                func(p unsafe.Pointer) Result
	cuMemHostRegister_v2         func(p unsafe.Pointer, n uintptr, flags uint32) Result
	cuMemHostUnregister          func(p unsafe.Pointer) Result
	cuMemcpyHtoDAsync_v2         func(dst DevicePtr, src unsafe.Pointer, n uintptr, s Stream) Result
	cuMemcpyDtoH_v2              func(dst unsafe.Pointer, src DevicePtr, n uintptr) Result
	cuStreamCreate               func(s *Stream, flags uint32) Result
	cuStreamSynchronize          func(s Stream) Result
	cuStreamDestroy_v2           func(s Stream) Result
	cuEventCreate                func(e *Event, flags uint32) Result
	cuEventRecord                func(e Event, s Stream) Result
	cuEventQuery                 func(e Event) Result
	cuEventSynchronize           func(e Event) Result
	cuEventDestroy_v2            func(e Event) Result
	cuEventElapsedTime           func(ms *float32, start, end Event) Result
}

// table lists every function with its symbol name, for Load.
func (f *functions) table() []struct {
	name string
	fptr any
} {
	return []struct {
		name string
		fptr any
	}{
		{"cuInit", &f.cuInit},
		{"cuDriverGetVersion", &f.cuDriverGetVersion},
		{"cuGetErrorName", &f.cuGetErrorName},
		{"cuDeviceGetCount", &f.cuDeviceGetCount},
		{"cuDeviceGet", &f.cuDeviceGet},
		{"cuDeviceGetName", &f.cuDeviceGetName},
		{"cuDeviceGetPCIBusId", &f.cuDeviceGetPCIBusId},
		{"cuDeviceGetAttribute", &f.cuDeviceGetAttribute},
		{"cuDeviceTotalMem_v2", &f.cuDeviceTotalMem_v2},
		{"cuDevicePrimaryCtxRetain", &f.cuDevicePrimaryCtxRetain},
		{"cuDevicePrimaryCtxRelease_v2", &f.cuDevicePrimaryCtxRelease_v2},
		{"cuCtxSetCurrent", &f.cuCtxSetCurrent},
		{"cuMemGetInfo_v2", &f.cuMemGetInfo_v2},
		{"cuMemAlloc_v2", &f.cuMemAlloc_v2},
		{"cuMemFree_v2", &f.cuMemFree_v2},
		{"cuMemHostAlloc", &f.cuMemHostAlloc},
		{"cuMemFreeHost", &f.cuMemFreeHost},
		{"cuMemHostRegister_v2", &f.cuMemHostRegister_v2},
		{"cuMemHostUnregister", &f.cuMemHostUnregister},
		{"cuMemcpyHtoDAsync_v2", &f.cuMemcpyHtoDAsync_v2},
		{"cuMemcpyDtoH_v2", &f.cuMemcpyDtoH_v2},
		{"cuStreamCreate", &f.cuStreamCreate},
		{"cuStreamSynchronize", &f.cuStreamSynchronize},
		{"cuStreamDestroy_v2", &f.cuStreamDestroy_v2},
		{"cuEventCreate", &f.cuEventCreate},
		{"cuEventRecord", &f.cuEventRecord},
		{"cuEventQuery", &f.cuEventQuery},
		{"cuEventSynchronize", &f.cuEventSynchronize},
		{"cuEventDestroy_v2", &f.cuEventDestroy_v2},
		{"cuEventElapsedTime", &f.cuEventElapsedTime},
	}
}

// Load opens the driver library at path (DefaultLibrary when "") and binds
// every function this package uses. It fails with ErrNoDriver when the
// library cannot be opened and ErrMissingSymbol, naming each missing
// function, when it lacks any; it never panics. Load does not call cuInit.
func Load(path string) (*Library, error) {
	if path == "" {
		path = DefaultLibrary
	}
	h, err := dlopen(path)
	if err != nil {
		// dlerror's text is per thread, and a dl call of another goroutine
		// on the same thread can leave it empty: name the path then.
		if !strings.Contains(err.Error(), path) {
			err = fmt.Errorf("%s: %w", path, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrNoDriver, err)
	}
	l := &Library{path: path}
	var missing []string
	addrs := make([]uintptr, 0, 32)
	for _, f := range l.fn.table() {
		addr, err := dlsym(h, f.name)
		if err != nil || addr == 0 {
			missing = append(missing, f.name)
		}
		addrs = append(addrs, addr)
	}
	if len(missing) > 0 {
		dlclose(h)
		return nil, fmt.Errorf("%w: %s in %s", ErrMissingSymbol, strings.Join(missing, ", "), path)
	}
	for i, f := range l.fn.table() {
		register(f.fptr, addrs[i])
	}
	return l, nil
}

// Path returns the path the library was loaded from.
func (l *Library) Path() string { return l.path }

// check turns a CUresult into nil or an *Error naming op and the result.
func (l *Library) check(op string, r Result) error {
	if r == Success {
		return nil
	}
	return &Error{Op: op, Code: r, Name: l.errorName(r)}
}

// errorName asks the driver for r's name, falling back to the table.
func (l *Library) errorName(r Result) string {
	var s *byte
	if l.fn.cuGetErrorName(r, &s) != Success || s == nil {
		return r.Name()
	}
	return cString(s, 128)
}

// cString copies a NUL-terminated C string, reading at most max bytes and
// never past the terminator.
func cString(p *byte, max int) string {
	var b []byte
	for i := 0; i < max; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// Init calls cuInit(0). It must succeed before any other call; it fails
// with ErrNoDevice when the driver sees no GPU, ErrStubLibrary when the
// library is the toolkit's link stub.
func (l *Library) Init() error { return l.check("cuInit", l.fn.cuInit(0)) }

// DriverVersion returns the CUDA version the driver supports, 1000*major +
// 10*minor (12060 = 12.6).
func (l *Library) DriverVersion() (int, error) {
	var v int32
	err := l.check("cuDriverGetVersion", l.fn.cuDriverGetVersion(&v))
	return int(v), err
}

// DeviceCount returns how many devices the driver exposes (after
// CUDA_VISIBLE_DEVICES).
func (l *Library) DeviceCount() (int, error) {
	var n int32
	err := l.check("cuDeviceGetCount", l.fn.cuDeviceGetCount(&n))
	return int(n), err
}

// Device returns the device with the given CUDA ordinal.
func (l *Library) Device(ordinal int) (Device, error) {
	var d Device
	err := l.check("cuDeviceGet", l.fn.cuDeviceGet(&d, int32(ordinal)))
	return d, err
}

// DeviceName returns the device's name, e.g. "NVIDIA H100 80GB HBM3".
func (l *Library) DeviceName(d Device) (string, error) {
	var buf [256]byte
	if err := l.check("cuDeviceGetName", l.fn.cuDeviceGetName(&buf[0], int32(len(buf)), d)); err != nil {
		return "", err
	}
	return cString(&buf[0], len(buf)), nil
}

// DevicePCIBusID returns the device's PCI bus id as the driver writes it
// ("0000:19:00.0").
func (l *Library) DevicePCIBusID(d Device) (string, error) {
	var buf [64]byte
	if err := l.check("cuDeviceGetPCIBusId", l.fn.cuDeviceGetPCIBusId(&buf[0], int32(len(buf)), d)); err != nil {
		return "", err
	}
	return cString(&buf[0], len(buf)), nil
}

// DeviceAttribute returns one attribute of the device.
func (l *Library) DeviceAttribute(d Device, a Attribute) (int, error) {
	var v int32
	err := l.check("cuDeviceGetAttribute", l.fn.cuDeviceGetAttribute(&v, a, d))
	return int(v), err
}

// DeviceTotalMem returns the device's memory in bytes.
func (l *Library) DeviceTotalMem(d Device) (uint64, error) {
	var n uintptr
	err := l.check("cuDeviceTotalMem_v2", l.fn.cuDeviceTotalMem_v2(&n, d))
	return uint64(n), err
}
