//go:build !nocuda

package cuda

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/gpu/internal/cudatest"
)

// load builds a fresh fake driver reporting devices GPUs, loads and
// initialises it.
func load(t *testing.T, devices int) (*Library, *cudatest.Controls) {
	t.Helper()
	path := cudatest.Build(t)
	ctl := cudatest.Open(t, path)
	ctl.SetDevices(devices)
	lib, err := Load(path)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	if err := lib.Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	return lib, ctl
}

func retain(t *testing.T, lib *Library, ordinal int) *Context {
	t.Helper()
	d, err := lib.Device(ordinal)
	if err != nil {
		t.Fatal(err)
	}
	c, err := lib.RetainPrimaryContext(d)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLoadNoDriver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "libcuda.so.1")
	_, err := Load(path)
	if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), path) {
		t.Errorf("Load(missing) = %v; want ErrNoDriver naming %s", err, path)
	}
}

// TestLoadSystem loads the machine's driver: on a host without one this is
// the real "no driver" path.
func TestLoadSystem(t *testing.T) {
	lib, err := Load("")
	if err == nil {
		t.Skipf("this machine has a CUDA driver (%s)", lib.Path())
	}
	if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), DefaultLibrary) {
		t.Errorf("Load(\"\") = %v; want ErrNoDriver naming %s", err, DefaultLibrary)
	}
}

func TestLoadMissingSymbol(t *testing.T) {
	path := cudatest.Build(t, "-DFAKECUDA_OMIT_MEMALLOC")
	_, err := Load(path)
	if !errors.Is(err, ErrMissingSymbol) {
		t.Fatalf("Load = %v; want ErrMissingSymbol", err)
	}
	if want := "cuda: driver library lacks required functions: cuMemAlloc_v2 in " + path; err.Error() != want {
		t.Errorf("Load error = %q; want %q", err, want)
	}
}

func TestInitErrors(t *testing.T) {
	path := cudatest.Build(t)
	ctl := cudatest.Open(t, path)
	lib, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lib.DeviceCount(); !errors.Is(err, ErrNotInitialized) {
		t.Errorf("DeviceCount before Init = %v; want ErrNotInitialized", err)
	}
	ctl.SetDevices(0)
	err = lib.Init()
	if !errors.Is(err, ErrNoDevice) || err.Error() != "cuInit: CUDA_ERROR_NO_DEVICE (100)" {
		t.Errorf("Init with no device = %v; want cuInit: CUDA_ERROR_NO_DEVICE (100)", err)
	}
	ctl.Fail("cuInit", int(ErrStubLibrary), 1)
	if err := lib.Init(); !errors.Is(err, ErrStubLibrary) {
		t.Errorf("Init on the stub = %v; want ErrStubLibrary", err)
	}
	if n := ctl.Calls("cuInit"); n != 2 {
		t.Errorf("cuInit called %d times; want 2", n)
	}
}

func TestDeviceQueries(t *testing.T) {
	lib, _ := load(t, 2)
	if v, err := lib.DriverVersion(); v != 12060 || err != nil {
		t.Errorf("DriverVersion = %d, %v; want 12060", v, err)
	}
	if n, err := lib.DeviceCount(); n != 2 || err != nil {
		t.Errorf("DeviceCount = %d, %v; want 2", n, err)
	}
	d, err := lib.Device(1)
	if err != nil {
		t.Fatal(err)
	}
	if name, err := lib.DeviceName(d); name != "Fake CUDA Device 1" || err != nil {
		t.Errorf("DeviceName = %q, %v", name, err)
	}
	if id, err := lib.DevicePCIBusID(d); id != "0000:1A:00.0" || err != nil {
		t.Errorf("DevicePCIBusID = %q, %v; want 0000:1A:00.0", id, err)
	}
	for attr, want := range map[Attribute]int{AttrReadOnlyHostRegisterSupported: 1, AttrHostNUMAID: -1, AttrPCIBusID: 0x1a} {
		if v, err := lib.DeviceAttribute(d, attr); v != want || err != nil {
			t.Errorf("DeviceAttribute(%d) = %d, %v; want %d", attr, v, err, want)
		}
	}
	if n, err := lib.DeviceTotalMem(d); n != 16<<30 || err != nil {
		t.Errorf("DeviceTotalMem = %d, %v; want 16 GiB", n, err)
	}
	_, err = lib.Device(2)
	if !errors.Is(err, ErrInvalidDevice) || err.Error() != "cuDeviceGet: CUDA_ERROR_INVALID_DEVICE (101)" {
		t.Errorf("Device(2) = %v; want cuDeviceGet: CUDA_ERROR_INVALID_DEVICE (101)", err)
	}
}

func TestErrorNames(t *testing.T) {
	lib, ctl := load(t, 1)
	c := retain(t, lib, 0)
	defer c.Release()

	ctl.Fail("cuMemAlloc_v2", int(ErrOutOfMemory), 1)
	_, err := c.MemAlloc(1 << 20)
	var e *Error
	if !errors.As(err, &e) || e.Code != ErrOutOfMemory || !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("MemAlloc = %v; want *Error with ErrOutOfMemory", err)
	}
	if want := "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)"; err.Error() != want {
		t.Errorf("MemAlloc error = %q; want %q", err, want)
	}
	// A code the driver cannot name (cuGetErrorName fails) uses the table.
	ctl.Fail("cuMemAlloc_v2", 4242, 1)
	if _, err := c.MemAlloc(1); err == nil || err.Error() != "cuMemAlloc_v2: unknown CUresult (4242)" {
		t.Errorf("MemAlloc = %v; want cuMemAlloc_v2: unknown CUresult (4242)", err)
	}
	if p, err := c.MemAlloc(16); err != nil {
		t.Errorf("MemAlloc after injected failures: %v", err)
	} else if err := c.MemFree(p); err != nil {
		t.Error(err)
	}
	if _, err := c.MemAlloc(0); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("MemAlloc(0) = %v; want ErrInvalidValue", err)
	}
	if err := c.MemHostRegister(nil, HostRegisterReadOnly); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("MemHostRegister(nil) = %v; want ErrInvalidValue", err)
	}
}

func TestRoundTrip(t *testing.T) {
	lib, ctl := load(t, 1)
	c := retain(t, lib, 0)
	const n = 1 << 20

	host, err := c.MemHostAlloc(n, HostAllocPortable)
	if err != nil {
		t.Fatal(err)
	}
	if f := ctl.LastFlags("cuMemHostAlloc"); f != HostAllocPortable {
		t.Errorf("cuMemHostAlloc flags = %#x; want PORTABLE", f)
	}
	for i := range host {
		host[i] = byte(i * 7)
	}
	dev, err := c.MemAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if free, total, err := c.MemGetInfo(); err != nil || total != 16<<30 || free != total-n {
		t.Errorf("MemGetInfo = %d, %d, %v; want 16 GiB - 1 MiB free of 16 GiB", free, total, err)
	}
	s, err := c.StreamCreate(StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	start, err1 := c.EventCreate(EventBlockingSync)
	end, err2 := c.EventCreate(EventBlockingSync)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if f := ctl.LastFlags("cuEventCreate"); f != EventBlockingSync {
		t.Errorf("cuEventCreate flags = %#x; want BLOCKING_SYNC", f)
	}
	must(t, c.EventRecord(start, s))
	must(t, c.MemcpyHtoDAsync(dev+4096, host[4096:], s))
	must(t, c.EventRecord(end, s))
	if done, err := c.EventQuery(end); !done || err != nil {
		t.Errorf("EventQuery = %v, %v; want done", done, err)
	}
	must(t, c.EventSynchronize(end))
	must(t, c.StreamSynchronize(s))
	if d, err := c.EventElapsed(start, end); d < 0 || err != nil {
		t.Errorf("EventElapsed = %v, %v", d, err)
	}
	back := make([]byte, n-4096)
	must(t, c.MemcpyDtoH(back, dev+4096))
	if !bytes.Equal(back, host[4096:]) {
		t.Error("device copy differs from the host buffer")
	}
	if err := c.MemcpyHtoDAsync(dev+n-1, host[:2], s); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("copy past the allocation = %v; want ErrInvalidValue", err)
	}
	must(t, c.EventDestroy(start))
	must(t, c.EventDestroy(end))
	must(t, c.StreamDestroy(s))
	must(t, c.MemFree(dev))
	must(t, c.MemFreeHost(host))
	must(t, c.Release())
	ctl.CheckNoLeaks(t)
}

func TestEventPending(t *testing.T) {
	lib, ctl := load(t, 1)
	c := retain(t, lib, 0)
	defer c.Release()
	e, err := c.EventCreate(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.EventDestroy(e)
	ctl.SetPending(1)
	if done, err := c.EventQuery(e); done || err != nil {
		t.Errorf("EventQuery (pending) = %v, %v; want false, nil", done, err)
	}
	if done, err := c.EventQuery(e); !done || err != nil {
		t.Errorf("EventQuery = %v, %v; want true, nil", done, err)
	}
	if _, err := c.EventElapsed(e, e); !errors.Is(err, ErrNotReady) {
		t.Errorf("EventElapsed of unrecorded events = %v; want ErrNotReady", err)
	}
}

// mapFile maps a file of n pattern bytes read-only and shared, like a shard
// in the shm tier.
func mapFile(t *testing.T, n int) []byte {
	t.Helper()
	dir := "/dev/shm"
	if _, err := os.Stat(dir); err != nil {
		dir = t.TempDir()
	}
	f, err := os.CreateTemp(dir, "cudatest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	defer f.Close()
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i % 251)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func TestRegisterReadOnly(t *testing.T) {
	lib, ctl := load(t, 1)
	c := retain(t, lib, 0)
	b := mapFile(t, 1<<20)

	must(t, c.MemHostRegister(b, HostRegisterPortable|HostRegisterReadOnly))
	if f := ctl.LastFlags("cuMemHostRegister_v2"); f != HostRegisterPortable|HostRegisterReadOnly {
		t.Errorf("cuMemHostRegister_v2 flags = %#x; want PORTABLE|READ_ONLY (0x9)", f)
	}
	if err := c.MemHostRegister(b[4096:8192], HostRegisterReadOnly); !errors.Is(err, ErrHostMemoryAlreadyRegistered) {
		t.Errorf("overlapping MemHostRegister = %v; want ErrHostMemoryAlreadyRegistered", err)
	}
	dev, err := c.MemAlloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	must(t, c.MemcpyHtoDAsync(dev, b[8192:12288], 0))
	back := make([]byte, 4096)
	must(t, c.MemcpyDtoH(back, dev))
	if !bytes.Equal(back, b[8192:12288]) {
		t.Error("copy from the registered mapping differs")
	}
	must(t, c.MemHostUnregister(b))
	err = c.MemHostUnregister(b)
	if !errors.Is(err, ErrHostMemoryNotRegistered) || err.Error() != "cuMemHostUnregister: CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED (713)" {
		t.Errorf("second MemHostUnregister = %v; want cuMemHostUnregister: CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED (713)", err)
	}
	must(t, c.MemFree(dev))
	must(t, c.Release())
	ctl.CheckNoLeaks(t)
}

// TestThreadLocalContext checks the threading model against a driver whose
// current context is per OS thread: calls from goroutines that move between
// threads, and from a thread whose current context was cleared, all work,
// while a raw call without a current context fails.
func TestThreadLocalContext(t *testing.T) {
	lib, ctl := load(t, 2)
	ctxs := []*Context{retain(t, lib, 0), retain(t, lib, 1)}

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			c := ctxs[g%2]
			for range 50 {
				p, err := c.MemAlloc(64)
				if err == nil {
					runtime.Gosched()
					err = c.MemFree(p)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent MemAlloc/MemFree: %v", err)
	}

	wg.Go(func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		lib.fn.cuCtxSetCurrent(0)
		var p DevicePtr
		if r := lib.fn.cuMemAlloc_v2(&p, 64); r != ErrInvalidContext {
			t.Errorf("raw cuMemAlloc_v2 without a current context = %v; want ErrInvalidContext", r)
		}
		p, err := ctxs[1].MemAlloc(64)
		if err != nil {
			t.Errorf("MemAlloc on a thread without a current context: %v", err)
			return
		}
		must(t, ctxs[1].MemFree(p))
	})
	wg.Wait()

	for _, c := range ctxs {
		must(t, c.Release())
	}
	if err := ctxs[0].Release(); !errors.Is(err, ErrReleased) {
		t.Errorf("second Release = %v; want ErrReleased", err)
	}
	if _, err := ctxs[0].MemAlloc(1); !errors.Is(err, ErrReleased) {
		t.Errorf("MemAlloc after Release = %v; want ErrReleased", err)
	}
	ctl.CheckNoLeaks(t)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
