//go:build cgo

package nvmlinfo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/cacheagent/cacheagent/gpu/internal/pci"
)

// newDGX returns the go-nvml DGX A100 mock with the calls it leaves unmocked
// (which would panic) set like an A100 on PCIe Gen4 x16, idling at Gen1:
// GPUs 0-3 on NUMA node 0 (CPUs 0-63), 4-7 on node 1 (CPUs 64-127).
func newDGX() *dgxa100.Server {
	srv := dgxa100.New()
	for i, h := range srv.Devices {
		d := h.(*dgxa100.Device)
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			copy(p.BusId[:], fmt.Sprintf("00000000:%02X:00.0", 0x07+0x10*i))
			return p, nvml.SUCCESS
		}
		d.GetCpuAffinityWithinScopeFunc = func(n int, scope nvml.AffinityScope) ([]uint, nvml.Return) {
			if scope != nvml.AFFINITY_SCOPE_NODE {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			mask := make([]uint, 2)
			mask[i/4] = ^uint(0)
			return mask, nvml.SUCCESS
		}
		d.GetCpuAffinityFunc = func(int) ([]uint, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 4, nvml.SUCCESS }
		d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
		d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return 1, nvml.SUCCESS }
		d.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	}
	return srv
}

// fakeSysfs writes numa_node and local_cpulist for the DGX's bus ids.
func fakeSysfs(t *testing.T) pci.Sysfs {
	t.Helper()
	root := t.TempDir()
	for i := range 8 {
		dir := filepath.Join(root, "bus", "pci", "devices", fmt.Sprintf("0000:%02x:00.0", 0x07+0x10*i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		node := i / 4
		files := map[string]string{
			"numa_node":     fmt.Sprint(node),
			"local_cpulist": fmt.Sprintf("%d-%d", 64*node, 64*node+63),
		}
		for name, v := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return pci.Sysfs{Root: root}
}

func span(lo, hi int) []int {
	var s []int
	for c := lo; c <= hi; c++ {
		s = append(s, c)
	}
	return s
}

func TestQueryDGX(t *testing.T) {
	srv := newDGX()
	sys, err := query(t.Context(), srv, fakeSysfs(t))
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	if sys.DriverVersion != "550.54.15" || sys.CUDAVersion != 12040 {
		t.Errorf("versions = %q, %d; want 550.54.15, 12040", sys.DriverVersion, sys.CUDAVersion)
	}
	if len(sys.Devices) != 8 {
		t.Fatalf("got %d devices; want 8", len(sys.Devices))
	}
	for i, d := range sys.Devices {
		mock := srv.Devices[i].(*dgxa100.Device)
		if want := fmt.Sprintf("0000:%02x:00.0", 0x07+0x10*i); d.BusID != want {
			t.Errorf("device %d: BusID = %q; want %q", i, d.BusID, want)
		}
		if d.Index != i || d.Name != mock.Name || d.UUID != mock.UUID || d.MemTotal != 42949672960 {
			t.Errorf("device %d = %+v; want index %d, name %q, uuid %q, 40 GiB", i, d, i, mock.Name, mock.UUID)
		}
		node := i / 4
		if want := span(64*node, 64*node+63); !slices.Equal(d.CPUs, want) {
			t.Errorf("device %d: CPUs = %v; want %v", i, d.CPUs, want)
		}
		if d.NUMANode != node {
			t.Errorf("device %d: NUMANode = %d; want %d (sysfs fallback)", i, d.NUMANode, node)
		}
		if d.MaxLinkGen != 4 || d.MaxLinkWidth != 16 || d.CurLinkGen != 1 || d.CurLinkWidth != 16 {
			t.Errorf("device %d: link = Gen%d x%d (cur Gen%d x%d); want Gen4 x16 (cur Gen1 x16)",
				i, d.MaxLinkGen, d.MaxLinkWidth, d.CurLinkGen, d.CurLinkWidth)
		}
	}
	if n := len(srv.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times; want 1", n)
	}
}

func TestQueryFallbacks(t *testing.T) {
	srv := newDGX()
	d0 := srv.Devices[0].(*dgxa100.Device)
	// Scoped affinity missing (old driver): plain affinity is used.
	d0.GetCpuAffinityWithinScopeFunc = func(int, nvml.AffinityScope) ([]uint, nvml.Return) {
		return nil, nvml.ERROR_FUNCTION_NOT_FOUND
	}
	d0.GetCpuAffinityFunc = func(int) ([]uint, nvml.Return) { return []uint{0b1010}, nvml.SUCCESS }
	d0.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 3, nvml.SUCCESS } // Grace: NVML knows
	// Device 1: no affinity, no link, no name: sysfs for CPUs, zero values for the rest.
	d1 := srv.Devices[1].(*dgxa100.Device)
	d1.GetCpuAffinityWithinScopeFunc = func(int, nvml.AffinityScope) ([]uint, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	d1.GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
	d1.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	d1.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	// Device 2: empty bus id string: built from the numeric fields.
	d2 := srv.Devices[2].(*dgxa100.Device)
	d2.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		return nvml.PciInfo{Domain: 0, Bus: 0x27, Device: 0}, nvml.SUCCESS
	}

	sys, err := query(t.Context(), srv, fakeSysfs(t))
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	if got := sys.Devices[0]; !slices.Equal(got.CPUs, []int{1, 3}) || got.NUMANode != 3 {
		t.Errorf("device 0: CPUs %v, NUMA %d; want [1 3], 3", got.CPUs, got.NUMANode)
	}
	if got := sys.Devices[1]; !slices.Equal(got.CPUs, span(0, 63)) || got.Name != "" || got.MaxLinkGen != 0 || got.MaxLinkWidth != 0 {
		t.Errorf("device 1 = %+v; want sysfs CPUs 0-63, no name, unknown link", got)
	}
	if got := sys.Devices[2].BusID; got != "0000:27:00.0" {
		t.Errorf("device 2: BusID = %q; want 0000:27:00.0", got)
	}

	// Without sysfs either, CPUs and NUMA node are unknown.
	sys, err = query(t.Context(), srv, pci.Sysfs{Root: t.TempDir()})
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	if got := sys.Devices[1]; got.CPUs != nil || got.NUMANode != -1 {
		t.Errorf("device 1 without sysfs: CPUs %v, NUMA %d; want none, -1", got.CPUs, got.NUMANode)
	}
}

// TestQueryInitFails checks that nothing but Init is called when Init fails:
// every other method of this mock is nil and would panic.
func TestQueryInitFails(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_NO_PERMISSION} {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return ret }}
		_, err := query(t.Context(), lib, pci.Sysfs{})
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ret) {
			t.Errorf("query with Init = %v: err = %v; want ErrUnavailable wrapping it", ret, err)
		}
	}
}

func TestQueryDeviceError(t *testing.T) {
	srv := newDGX()
	srv.DeviceGetHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_GPU_IS_LOST }
	if _, err := query(t.Context(), srv, pci.Sysfs{}); !errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
		t.Errorf("query = %v; want ERROR_GPU_IS_LOST", err)
	}
	if n := len(srv.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times after a device error; want 1", n)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := query(ctx, newDGX(), pci.Sysfs{}); !errors.Is(err, context.Canceled) {
		t.Errorf("query(cancelled) = %v; want context.Canceled", err)
	}
}

// TestDiscoverNoLibrary runs the real go-nvml against a library that does
// not exist: Init fails and, had anything else been called, the process
// would have died with "symbol lookup error".
func TestDiscoverNoLibrary(t *testing.T) {
	_, err := Discover(t.Context(), Config{Library: filepath.Join(t.TempDir(), "libnvidia-ml.so.1")})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) {
		t.Errorf("Discover(missing library) = %v; want ErrUnavailable, ERROR_LIBRARY_NOT_FOUND", err)
	}
}

// TestDiscoverSystem uses the machine's NVML when it has one.
func TestDiscoverSystem(t *testing.T) {
	sys, err := Discover(t.Context(), Config{})
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no NVML here: %v", err)
	}
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	for _, d := range sys.Devices {
		if _, err := pci.NormalizeBusID(d.BusID); err != nil || d.Name == "" || d.MemTotal == 0 {
			t.Errorf("device %+v: want a bus id, a name and memory", d)
		}
	}
	t.Logf("driver %s, CUDA %d, %d devices", sys.DriverVersion, sys.CUDAVersion, len(sys.Devices))
}

func TestCPUsFromMask(t *testing.T) {
	tests := []struct {
		mask []uint
		want []int
	}{
		{mask: nil, want: nil},
		{mask: []uint{0}, want: nil},
		{mask: []uint{0b101}, want: []int{0, 2}},
		{mask: []uint{0, 1}, want: []int{64}},
		{mask: []uint{1 << 63}, want: []int{63}},
	}
	for _, tt := range tests {
		if got := cpusFromMask(tt.mask); !slices.Equal(got, tt.want) {
			t.Errorf("cpusFromMask(%b) = %v; want %v", tt.mask, got, tt.want)
		}
	}
}
