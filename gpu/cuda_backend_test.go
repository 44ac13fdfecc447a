package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/gpu/cuda"
	"github.com/cacheagent/cacheagent/gpu/internal/cudatest"
	"github.com/cacheagent/cacheagent/gpu/internal/pci"
	"github.com/cacheagent/cacheagent/gpu/nvmlinfo"
)

// fakeLib builds a fake driver with the given device count.
func fakeLib(t *testing.T, devices int, cflags ...string) (string, *cudatest.Controls) {
	t.Helper()
	path := cudatest.Build(t, cflags...)
	ctl := cudatest.Open(t, path)
	ctl.SetDevices(devices)
	return path, ctl
}

// logs collects log lines.
type logs struct{ bytes.Buffer }

func (l *logs) logger() *slog.Logger { return slog.New(slog.NewTextHandler(&l.Buffer, nil)) }

func (l *logs) lines() []string {
	return strings.Split(strings.TrimSpace(l.String()), "\n")
}

// fakeSysfs lays out sysfs entries for the fake driver's bus ids
// (0000:19:00.0, 0000:1a:00.0, …) on CPU cpu's node.
func fakeSysfs(t *testing.T, devices, cpu int) string {
	t.Helper()
	root := t.TempDir()
	for i := range devices {
		dir := filepath.Join(root, "bus", "pci", "devices", fmt.Sprintf("0000:%02x:00.0", 0x19+i))
		must(t, os.MkdirAll(dir, 0o755))
		for name, v := range map[string]string{
			"numa_node": "0", "local_cpulist": fmt.Sprint(cpu), "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16",
		} {
			must(t, os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644))
		}
	}
	return root
}

func firstCPU(t *testing.T) int {
	var set unix.CPUSet
	must(t, unix.SchedGetaffinity(0, &set))
	for c := range 1024 {
		if set.IsSet(c) {
			return c
		}
	}
	t.Fatal("no CPU in this process's affinity set")
	return -1
}

func TestCUDADiscovery(t *testing.T) {
	lib, ctl := fakeLib(t, 2)
	cpu := firstCPU(t)
	var log logs
	b, err := OpenConfig(t.Context(), Config{
		Mode: ModeCUDA, LibCUDA: lib, LibNVML: "/nonexistent/libnvidia-ml.so.1",
		SysfsRoot: fakeSysfs(t, 2, cpu), Logger: log.logger(),
	})
	must(t, err)
	sys := b.System()
	if sys.CUDAVersion != 12060 || len(sys.Devices) != 2 || b.Kind() != ModeCUDA {
		t.Fatalf("System = %+v; want CUDA 12060, 2 devices", sys)
	}
	want := DeviceInfo{
		Ordinal: 1, Name: "Fake CUDA Device 1", BusID: "0000:1a:00.0", MemTotal: 16 << 30,
		NUMANode: 0, CPUs: []int{cpu}, Link: Link{Gen: 5, Width: 16}, ReadOnlyRegister: true,
	}
	if got := sys.Devices[1]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("device 1 = %+v;\nwant %+v", got, want)
	}
	if got := sys.Devices[1].Link.Ceiling(); got < 63 || got > 63.1 {
		t.Errorf("Ceiling = %v; want 63.0 GB/s", got)
	}
	if len(sys.Notes) != 1 || !strings.Contains(sys.Notes[0], "NVML") {
		t.Errorf("Notes = %q; want one about NVML", sys.Notes)
	}
	if lines := log.lines(); len(lines) != 1 || !strings.Contains(lines[0], "level=INFO") {
		t.Errorf("log = %q; want one INFO line", lines)
	}

	// Pinned memory is allocated on the device's CPUs, hence its node, and
	// is portable; registrations are portable and read-only when asked.
	ctx := t.Context()
	d := openDev(t, b, 1)
	h := must2[*HostMem](t)(d.HostAlloc(ctx, 4096))
	if h.NUMANode() != 0 || ctl.LastFlags("cuMemHostAlloc") != cuda.HostAllocPortable {
		t.Errorf("HostAlloc: node %d, flags %#x; want node 0, PORTABLE", h.NUMANode(), ctl.LastFlags("cuMemHostAlloc"))
	}
	for _, ro := range []bool{true, false} {
		r := must2[*Registration](t)(d.Register(ctx, make([]byte, 4096), ro))
		want := cuda.HostRegisterPortable
		if ro {
			want |= cuda.HostRegisterReadOnly
		}
		if got := ctl.LastFlags("cuMemHostRegister_v2"); got != want {
			t.Errorf("Register(readOnly %t) flags = %#x; want %#x", ro, got, want)
		}
		must(t, r.Unregister())
	}
	must(t, b.Close())
	ctl.CheckNoLeaks(t)
}

func TestCUDAErrorMessages(t *testing.T) {
	lib, ctl := fakeLib(t, 1)
	b := must2[Backend](t)(OpenConfig(t.Context(), Config{Mode: ModeCUDA, LibCUDA: lib, Logger: slog.New(slog.DiscardHandler)}))
	defer b.Close()
	d := openDev(t, b, 0)
	ctl.Fail("cuMemAlloc_v2", int(cuda.ErrOutOfMemory), 1)
	_, err := d.Alloc(t.Context(), 4096)
	if !errors.Is(err, ErrOutOfMemory) || !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Errorf("Alloc = %v; want ErrOutOfMemory and cuda.ErrOutOfMemory", err)
	}
	if want := "gpu 0: alloc 4096 bytes: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)"; err == nil || err.Error() != want {
		t.Errorf("Alloc error = %v; want %q", err, want)
	}
	ctl.Fail("cuMemHostRegister_v2", int(cuda.ErrNotSupported), 1)
	if _, err := d.Register(t.Context(), make([]byte, 64), true); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Register = %v; want ErrUnsupported", err)
	}
	ctl.Fail("cuMemHostAlloc", int(cuda.ErrOutOfMemory), 1)
	if _, err := NewPool(t.Context(), d, PoolConfig{Buffers: 3, Size: 4096}); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("NewPool = %v; want ErrOutOfMemory", err)
	}
	if n := ctl.Live(cudatest.HostMem); n != 0 {
		t.Errorf("failed NewPool left %d pinned buffers", n)
	}
}

// TestCUDAEventWaiter exercises Wait on an event that is not complete when
// asked: Wait hands it to the event's waiter goroutine.
func TestCUDAEventWaiter(t *testing.T) {
	lib, ctl := fakeLib(t, 1)
	b := must2[Backend](t)(OpenConfig(t.Context(), Config{Mode: ModeCUDA, LibCUDA: lib, Logger: slog.New(slog.DiscardHandler)}))
	d := openDev(t, b, 0)
	s := must2[Stream](t)(d.NewStream(t.Context()))
	ev := must2[Event](t)(s.Record(t.Context()))
	ctl.SetPending(3) // Done, Wait(cancelled) and Wait each see NOT_READY once
	if done, err := ev.Done(); done || err != nil {
		t.Errorf("Done = %v, %v; want false (pending)", done, err)
	}
	if err := ev.Wait(cancelledCtx(t)); !errors.Is(err, context.Canceled) && err != nil {
		t.Errorf("Wait(cancelled) = %v", err)
	}
	must(t, ev.Wait(t.Context()))
	if n := ctl.Calls("cuEventSynchronize"); n != 1 {
		t.Errorf("cuEventSynchronize called %d times; want 1 (one waiter)", n)
	}
	must(t, b.Close())
	ctl.CheckNoLeaks(t)
}

func TestCUDAOpenFailures(t *testing.T) {
	missing, _ := fakeLib(t, 1, "-DFAKECUDA_OMIT_MEMALLOC")
	noDevice, _ := fakeLib(t, 0)
	stub, stubCtl := fakeLib(t, 1)
	stubCtl.Fail("cuInit", int(cuda.ErrStubLibrary), -1)
	tests := []struct {
		name, lib string
		want      error
		hint      string
		level     string
	}{
		{"no driver", filepath.Join(t.TempDir(), "libcuda.so.1"), cuda.ErrNoDriver, "is the NVIDIA driver installed?", "INFO"},
		{"old driver", missing, cuda.ErrMissingSymbol, "cuMemAlloc_v2", "WARN"},
		{"no device", noDevice, cuda.ErrNoDevice, "CUDA_VISIBLE_DEVICES", "INFO"},
		{"stub", stub, cuda.ErrStubLibrary, "LD_LIBRARY_PATH", "WARN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := OpenConfig(t.Context(), Config{Mode: ModeCUDA, LibCUDA: tt.lib})
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.hint) {
				t.Errorf("ModeCUDA: %v; want %v with %q", err, tt.want, tt.hint)
			}
			var log logs
			b, err := OpenConfig(t.Context(), Config{Mode: ModeAuto, LibCUDA: tt.lib, Logger: log.logger()})
			none, ok := b.(*None)
			if err != nil || !ok || !errors.Is(none.Reason, tt.want) {
				t.Fatalf("ModeAuto = %T %v, %v; want *None with reason %v", b, b, err, tt.want)
			}
			if lines := log.lines(); len(lines) != 1 || !strings.Contains(lines[0], "level="+tt.level) {
				t.Errorf("log = %q; want one %s line", lines, tt.level)
			}
		})
	}
}

func TestCUDADeviceCount(t *testing.T) {
	lib, _ := fakeLib(t, 3)
	b := must2[Backend](t)(OpenConfig(t.Context(), Config{Mode: ModeCUDA, LibCUDA: lib, Logger: slog.New(slog.DiscardHandler)}))
	defer b.Close()
	var ids []string
	for _, d := range b.System().Devices {
		ids = append(ids, d.BusID)
	}
	if want := []string{"0000:19:00.0", "0000:1a:00.0", "0000:1b:00.0"}; !slices.Equal(ids, want) {
		t.Errorf("bus ids = %v; want %v", ids, want)
	}
}

// TestMergeTopology matches NVML devices to CUDA devices by bus id: here
// CUDA_VISIBLE_DEVICES=2,0 reorders and hides devices.
func TestMergeTopology(t *testing.T) {
	sys := System{Devices: []DeviceInfo{
		{Ordinal: 0, BusID: "0000:1b:00.0", NUMANode: -1},
		{Ordinal: 1, BusID: "0000:19:00.0", NUMANode: -1},
		{Ordinal: 2, BusID: "0000:99:00.0", NUMANode: -1}, // not in NVML
	}}
	nv := nvmlinfo.System{DriverVersion: "580.159.04", Devices: []nvmlinfo.Device{
		{Index: 0, BusID: "0000:19:00.0", UUID: "GPU-a", NUMANode: 0, CPUs: []int{0, 1}, MaxLinkGen: 5, MaxLinkWidth: 16, CurLinkGen: 1, CurLinkWidth: 16},
		{Index: 1, BusID: "0000:1a:00.0", UUID: "GPU-b", NUMANode: 0},
		{Index: 2, BusID: "0000:1b:00.0", UUID: "GPU-c", NUMANode: 1, CPUs: []int{2, 3}, MaxLinkGen: 4, MaxLinkWidth: 8, MemFree: 42},
	}}
	mergeTopology(&sys, nv, nil, pci.Sysfs{Root: t.TempDir()})
	if sys.Driver != "580.159.04" {
		t.Errorf("Driver = %q", sys.Driver)
	}
	want := []DeviceInfo{
		{Ordinal: 0, BusID: "0000:1b:00.0", UUID: "GPU-c", NUMANode: 1, CPUs: []int{2, 3}, Link: Link{Gen: 4, Width: 8}, MemFree: 42},
		{Ordinal: 1, BusID: "0000:19:00.0", UUID: "GPU-a", NUMANode: 0, CPUs: []int{0, 1}, Link: Link{Gen: 5, Width: 16, CurGen: 1, CurWidth: 16}},
		{Ordinal: 2, BusID: "0000:99:00.0", NUMANode: -1},
	}
	for i := range want {
		if fmt.Sprint(sys.Devices[i]) != fmt.Sprint(want[i]) {
			t.Errorf("device %d = %+v;\nwant %+v", i, sys.Devices[i], want[i])
		}
	}
	if len(sys.Notes) != 1 || !strings.Contains(sys.Notes[0], "0000:99:00.0") {
		t.Errorf("Notes = %q; want one about 0000:99:00.0", sys.Notes)
	}

	// Without NVML, sysfs fills in.
	sys = System{Devices: []DeviceInfo{{BusID: "0000:19:00.0", NUMANode: -1}}}
	mergeTopology(&sys, nvmlinfo.System{}, nvmlinfo.ErrUnavailable, pci.Sysfs{Root: fakeSysfs(t, 1, 3)})
	if d := sys.Devices[0]; d.NUMANode != 0 || !slices.Equal(d.CPUs, []int{3}) || d.Link != (Link{Gen: 5, Width: 16}) {
		t.Errorf("sysfs fallback = %+v; want node 0, CPU 3, Gen5 x16", d)
	}
	if len(sys.Notes) != 1 || !strings.Contains(sys.Notes[0], "NVML unavailable") {
		t.Errorf("Notes = %q; want the NVML reason", sys.Notes)
	}
}
