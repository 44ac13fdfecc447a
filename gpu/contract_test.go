package gpu

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/gpu/internal/cudatest"
	"github.com/cacheagent/cacheagent/gpu/internal/pci"
)

// backendCase is a backend the contract suite runs against.
type backendCase struct {
	name string
	// setup prepares the case once (it may skip); it returns a function
	// opening a fresh backend and one checking for leaks after Close.
	setup func(t *testing.T) (open func(t *testing.T) Backend, leaks func(t *testing.T))
}

var backendCases = []backendCase{
	{name: "fake", setup: func(*testing.T) (func(*testing.T) Backend, func(*testing.T)) {
		open := func(t *testing.T) Backend {
			b, err := NewFake(FakeConfig{Devices: 2, MemBytes: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		return open, func(*testing.T) {}
	}},
	{name: "cuda-fakelib", setup: func(t *testing.T) (func(*testing.T) Backend, func(*testing.T)) {
		lib := cudatest.Build(t)
		ctl := cudatest.Open(t, lib)
		ctl.SetDevices(2)
		open := func(t *testing.T) Backend {
			b, err := OpenConfig(t.Context(), Config{Mode: ModeCUDA, LibCUDA: lib, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		return open, func(t *testing.T) { ctl.CheckNoLeaks(t) }
	}},
	{name: "cuda", setup: func(t *testing.T) (func(*testing.T) Backend, func(*testing.T)) {
		b, err := Open(t.Context(), ModeCUDA)
		if err != nil {
			t.Skipf("no GPU here: %v", err)
		}
		b.Close()
		open := func(t *testing.T) Backend {
			b, err := Open(t.Context(), ModeCUDA)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		return open, func(*testing.T) {}
	}},
}

// contractChecks run against every backend. Each gets a fresh backend,
// which the suite closes afterwards.
var contractChecks = []struct {
	name string
	fn   func(t *testing.T, b Backend)
}{
	{"System", checkSystem},
	{"RoundTrip", checkRoundTrip},
	{"StreamOrder", checkStreamOrder},
	{"Pageable", checkPageable},
	{"Register", checkRegister},
	{"Errors", checkErrors},
	{"Close", checkClose},
	{"Pool", checkPool},
	{"DoubleBuffering", checkDoubleBuffering},
}

func TestContract(t *testing.T) {
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			open, leaks := bc.setup(t)
			for _, c := range contractChecks {
				t.Run(c.name, func(t *testing.T) {
					b := open(t)
					c.fn(t, b)
					if err := b.Close(); err != nil {
						t.Errorf("Backend.Close: %v", err)
					}
					leaks(t)
				})
			}
		})
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

func openDev(t *testing.T, b Backend, ordinal int) Device {
	t.Helper()
	d, err := b.Open(t.Context(), ordinal)
	if err != nil {
		t.Fatalf("Open(%d): %v", ordinal, err)
	}
	return d
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func must2[T any](t *testing.T) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// deviceBytes reads n bytes at off of m after synchronizing s.
func deviceBytes(t *testing.T, d Device, s Stream, m *DeviceMem, off, n int) []byte {
	t.Helper()
	must(t, s.Sync(t.Context()))
	out := make([]byte, n)
	must(t, d.CopyDtoH(t.Context(), out, m, off))
	return out
}

func checkSystem(t *testing.T, b Backend) {
	sys := b.System()
	if b.Kind() == ModeNone || len(sys.Devices) == 0 {
		t.Fatalf("Kind %v with %d devices; want a GPU backend with devices", b.Kind(), len(sys.Devices))
	}
	for i, d := range sys.Devices {
		if id, err := pci.NormalizeBusID(d.BusID); err != nil || id != d.BusID {
			t.Errorf("device %d: BusID %q is not normalised", i, d.BusID)
		}
		if d.Ordinal != i || d.Name == "" || d.MemTotal == 0 || d.NUMANode < -1 {
			t.Errorf("device %d = %+v; want its ordinal, a name, memory, NUMA node >= -1", i, d)
		}
	}
	d := openDev(t, b, 0)
	if got := d.Info(); got.BusID != sys.Devices[0].BusID {
		t.Errorf("Info().BusID = %q; want %q", got.BusID, sys.Devices[0].BusID)
	}
	free, total, err := d.MemInfo(t.Context())
	if err != nil || total == 0 || free > total {
		t.Errorf("MemInfo = %d free of %d, %v", free, total, err)
	}
}

func checkRoundTrip(t *testing.T, b Backend) {
	ctx := t.Context()
	d := openDev(t, b, 0)
	const n = 1 << 20
	host := must2[*HostMem](t)(d.HostAlloc(ctx, n))
	if len(host.Bytes()) != n {
		t.Fatalf("HostAlloc(%d) gave %d bytes", n, len(host.Bytes()))
	}
	copy(host.Bytes(), pattern(n, 1))
	dev := must2[*DeviceMem](t)(d.Alloc(ctx, 2*n))
	if dev.Len() != 2*n || dev.Ptr() == 0 {
		t.Errorf("Alloc: Len %d, Ptr %#x", dev.Len(), dev.Ptr())
	}
	s := must2[Stream](t)(d.NewStream(ctx))
	start := must2[Event](t)(s.Record(ctx))
	must(t, s.CopyHtoD(ctx, dev, n, host.Bytes()))
	end := must2[Event](t)(s.Record(ctx))
	must(t, end.Wait(ctx))
	if done, err := end.Done(); !done || err != nil {
		t.Errorf("Done after Wait = %v, %v", done, err)
	}
	if el, err := end.Elapsed(start); el < 0 || err != nil {
		t.Errorf("Elapsed = %v, %v", el, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := end.Wait(cancelled); err != nil {
		t.Errorf("Wait on a completed event with a cancelled ctx = %v; want nil", err)
	}
	if got := deviceBytes(t, d, s, dev, n, n); !bytes.Equal(got, host.Bytes()) {
		t.Error("device bytes differ from the pinned source")
	}
	must(t, errors.Join(start.Close(), end.Close(), s.Close(), dev.Free(), host.Free(), d.Close()))
}

func checkStreamOrder(t *testing.T, b Backend) {
	ctx := t.Context()
	d := openDev(t, b, 0)
	defer d.Close()
	const n = 64 << 10
	bufs := make([]*HostMem, 3)
	for i := range bufs {
		bufs[i] = must2[*HostMem](t)(d.HostAlloc(ctx, n))
		copy(bufs[i].Bytes(), pattern(n, byte(i+1)))
	}
	dev := must2[*DeviceMem](t)(d.Alloc(ctx, n))
	s := must2[Stream](t)(d.NewStream(ctx))
	for _, h := range bufs { // same destination: the last copy wins
		must(t, s.CopyHtoD(ctx, dev, 0, h.Bytes()))
	}
	must(t, s.CopyHtoD(ctx, dev, n/2, bufs[0].Bytes()[:n/4])) // then a partial overwrite
	want := bytes.Clone(bufs[2].Bytes())
	copy(want[n/2:], bufs[0].Bytes()[:n/4])
	if got := deviceBytes(t, d, s, dev, 0, n); !bytes.Equal(got, want) {
		t.Error("copies on one stream did not apply in order")
	}
}

func checkPageable(t *testing.T, b Backend) {
	ctx := t.Context()
	d := openDev(t, b, 0)
	defer d.Close()
	const n = 256 << 10
	src := pattern(n, 7)
	orig := append([]byte(nil), src...)
	dev := must2[*DeviceMem](t)(d.Alloc(ctx, n))
	s := must2[Stream](t)(d.NewStream(ctx))
	must(t, s.CopyHtoD(ctx, dev, 0, src))
	clear(src) // pageable memory may be reused once CopyHtoD returns
	if got := deviceBytes(t, d, s, dev, 0, n); !bytes.Equal(got, orig) {
		t.Error("pageable copy did not copy the bytes as they were at CopyHtoD")
	}
}

// mapShard maps a file of n pattern bytes PROT_READ, MAP_SHARED from
// /dev/shm (else a temp dir), like a shard of the shm tier.
func mapShard(t *testing.T, n int) []byte {
	t.Helper()
	dir := "/dev/shm"
	if _, err := os.Stat(dir); err != nil {
		dir = t.TempDir()
	}
	f, err := os.CreateTemp(dir, "gpu-test-")
	must(t, err)
	defer f.Close()
	t.Cleanup(func() { os.Remove(f.Name()) })
	_, err = f.Write(pattern(n, 9))
	must(t, err)
	b, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
	must(t, err)
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func checkRegister(t *testing.T, b Backend) {
	ctx := t.Context()
	d := openDev(t, b, 0)
	defer d.Close()
	const n = 1 << 20
	shard := mapShard(t, n)
	reg, err := d.Register(ctx, shard, true)
	if errors.Is(err, ErrUnsupported) && !d.Info().ReadOnlyRegister {
		t.Skipf("device cannot register read-only memory: %v", err)
	}
	must(t, err)
	if _, err := d.Register(ctx, shard[4096:8192], true); !errors.Is(err, ErrAlreadyRegistered) {
		t.Errorf("overlapping Register = %v; want ErrAlreadyRegistered", err)
	}
	dev := must2[*DeviceMem](t)(d.Alloc(ctx, n/2))
	s := must2[Stream](t)(d.NewStream(ctx))
	must(t, s.CopyHtoD(ctx, dev, 0, reg.Bytes()[n/4:3*n/4]))
	if got := deviceBytes(t, d, s, dev, 0, n/2); !bytes.Equal(got, shard[n/4:3*n/4]) {
		t.Error("copy from the registered shard differs")
	}
	must(t, reg.Unregister())
	if err := reg.Unregister(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Unregister = %v; want ErrClosed", err)
	}
}

func checkErrors(t *testing.T, b Backend) {
	ctx := t.Context()
	d := openDev(t, b, 0)
	defer d.Close()
	if _, err := d.Alloc(ctx, int(d.Info().MemTotal)+1<<30); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("Alloc(more than the device has) = %v; want ErrOutOfMemory", err)
	}
	if _, err := d.Alloc(ctx, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Alloc(0) = %v; want ErrInvalid", err)
	}
	dev := must2[*DeviceMem](t)(d.Alloc(ctx, 4096))
	s := must2[Stream](t)(d.NewStream(ctx))
	for _, off := range []int{-1, 1, 4096} {
		if err := s.CopyHtoD(ctx, dev, off, make([]byte, 4096)); !errors.Is(err, ErrRange) {
			t.Errorf("CopyHtoD at %d of 4096 bytes = %v; want ErrRange", off, err)
		}
	}
	if err := d.CopyDtoH(ctx, make([]byte, 8), dev, 4092); !errors.Is(err, ErrRange) {
		t.Errorf("CopyDtoH past the end = %v; want ErrRange", err)
	}
	other := openDev(t, b, len(b.System().Devices)-1)
	defer other.Close()
	otherMem := must2[*DeviceMem](t)(other.Alloc(ctx, 4096))
	if err := s.CopyHtoD(ctx, otherMem, 0, make([]byte, 8)); !errors.Is(err, ErrForeign) {
		t.Errorf("CopyHtoD into another device's memory = %v; want ErrForeign", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.CopyHtoD(cancelled, dev, 0, make([]byte, 8)); !errors.Is(err, context.Canceled) {
		t.Errorf("CopyHtoD(cancelled) = %v; want context.Canceled", err)
	}
	must(t, dev.Free())
	if err := dev.Free(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Free = %v; want ErrClosed", err)
	}
	if err := s.CopyHtoD(ctx, dev, 0, make([]byte, 8)); !errors.Is(err, ErrClosed) {
		t.Errorf("CopyHtoD into freed memory = %v; want ErrClosed", err)
	}
	if _, err := b.Open(ctx, len(b.System().Devices)); !errors.Is(err, ErrNoGPU) {
		t.Errorf("Open(past the last ordinal) = %v; want ErrNoGPU", err)
	}
}

// checkClose leaves memory, a stream and events to Device.Close.
func checkClose(t *testing.T, b Backend) {
	ctx := t.Context()
	d := openDev(t, b, 0)
	host := must2[*HostMem](t)(d.HostAlloc(ctx, 4096))
	dev := must2[*DeviceMem](t)(d.Alloc(ctx, 4096))
	s := must2[Stream](t)(d.NewStream(ctx))
	must(t, s.CopyHtoD(ctx, dev, 0, host.Bytes()))
	ev := must2[Event](t)(s.Record(ctx))
	must(t, d.Close())
	if err := d.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v; want ErrClosed", err)
	}
	if err := errors.Join(host.Free(), dev.Free(), ev.Close(), s.Close()); err != nil {
		t.Errorf("freeing after Close = %v; want nil (Close freed them)", err)
	}
	if err := s.CopyHtoD(ctx, dev, 0, host.Bytes()); !errors.Is(err, ErrClosed) {
		t.Errorf("CopyHtoD after Close = %v; want ErrClosed", err)
	}
	if _, err := d.Alloc(ctx, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc after Close = %v; want ErrClosed", err)
	}
	// A device left open is closed by the backend.
	openDev(t, b, 0)
}

func checkPool(t *testing.T, b Backend) {
	ctx := t.Context()
	d := openDev(t, b, 0)
	defer d.Close()
	p := must2[*Pool](t)(NewPool(ctx, d, PoolConfig{Buffers: 2, Size: 64 << 10}))
	if p.Len() != 2 || p.Size() != 64<<10 {
		t.Errorf("pool of %d x %d; want 2 x 64 KiB", p.Len(), p.Size())
	}
	b0 := must2[*Staging](t)(p.Get(ctx))
	b1 := must2[*Staging](t)(p.Get(ctx))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Get(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with every buffer out = %v; want context.Canceled", err)
	}
	if err := p.Close(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Close with buffers out = %v; want context.Canceled", err)
	}
	dev := must2[*DeviceMem](t)(d.Alloc(ctx, 64<<10))
	s := must2[Stream](t)(d.NewStream(ctx))
	copy(b0.Bytes(), pattern(64<<10, 3))
	must(t, s.CopyHtoD(ctx, dev, 0, b0.Bytes()))
	must(t, p.Put(b0, must2[Event](t)(s.Record(ctx))))
	if err := p.Put(b0, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("second Put = %v; want ErrClosed", err)
	}
	again := must2[*Staging](t)(p.Get(ctx)) // b0, once its copy is done
	if again != b0 {
		t.Error("Get did not return the only buffer in the pool")
	}
	if got := deviceBytes(t, d, s, dev, 0, 64<<10); !bytes.Equal(got, pattern(64<<10, 3)) {
		t.Error("device bytes differ from the staged batch")
	}
	must(t, p.Put(again, nil))
	must(t, p.Put(b1, nil))
	must(t, p.Close(ctx))
}

// checkDoubleBuffering streams batches through two staging buffers the way
// the loader will, then checks every batch arrived intact.
func checkDoubleBuffering(t *testing.T, b Backend) {
	ctx := t.Context()
	d := openDev(t, b, 0)
	defer d.Close()
	const batches, size = 8, 128 << 10
	p := must2[*Pool](t)(NewPool(ctx, d, PoolConfig{Buffers: 2, Size: size}))
	dev := must2[*DeviceMem](t)(d.Alloc(ctx, batches*size))
	s := must2[Stream](t)(d.NewStream(ctx))
	for i := range batches {
		buf := must2[*Staging](t)(p.Get(ctx))
		copy(buf.Bytes(), pattern(size, byte(i)))
		must(t, s.CopyHtoD(ctx, dev, i*size, buf.Bytes()))
		must(t, p.Put(buf, must2[Event](t)(s.Record(ctx))))
	}
	must(t, s.Sync(ctx))
	for i := range batches {
		got := make([]byte, size)
		must(t, d.CopyDtoH(ctx, got, dev, i*size))
		if !bytes.Equal(got, pattern(size, byte(i))) {
			t.Errorf("batch %d arrived corrupted", i)
		}
	}
	must(t, p.Close(ctx))
}
