// Package nvmlinfo discovers NVIDIA GPUs and their topology through NVML
// (github.com/NVIDIA/go-nvml): name, UUID, memory, PCI bus id, the CPUs and
// NUMA node local to each GPU, and its PCIe link.
//
// Discover takes one snapshot: it initialises NVML, reads every device and
// shuts NVML down again. NVML is only consulted for topology; transfers go
// through the CUDA driver (package cuda), and the two are matched by PCI bus
// id, never by index (CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER renumber
// CUDA devices, not NVML ones).
//
// # Safety
//
// go-nvml dlopens libnvidia-ml.so.1 in Init. If Init fails, no other NVML
// function (not even Shutdown) may be called: the symbols are unresolved and
// the process would die with "symbol lookup error". Discover honours this.
//
// go-nvml needs cgo. Built without cgo, Discover reports ErrUnavailable
// ("built without cgo") and callers fall back to sysfs.
//
// # Fallbacks
//
// The NUMA node comes from NVML only on Grace systems; elsewhere it is read
// from sysfs (numa_node, -1 in many VMs). CPU affinity comes from NVML
// (node scope), else from sysfs local_cpulist. Optional fields NVML does not
// support are left at their zero value (-1 for NUMANode).
package nvmlinfo

import (
	"context"
	"errors"
)

// ErrUnavailable reports that NVML could not be used: not built with cgo,
// library not installed, or driver not loaded.
var ErrUnavailable = errors.New("nvmlinfo: NVML unavailable")

// Config says where to find NVML and sysfs. The zero value is the system's.
type Config struct {
	// Library is the path of libnvidia-ml; "" means libnvidia-ml.so.1 found
	// by the dynamic loader.
	Library string
	// SysfsRoot is where sysfs is mounted, for the NUMA and CPU fallbacks;
	// "" means /sys.
	SysfsRoot string
}

// System is what NVML reports about the machine.
type System struct {
	// DriverVersion is the kernel driver version, e.g. "580.159.04".
	DriverVersion string `json:"driver_version"`
	// CUDAVersion is the CUDA version the driver supports, 1000*major +
	// 10*minor (12060 = 12.6); 0 if unknown.
	CUDAVersion int `json:"cuda_version"`
	// Devices are in NVML (PCI) order.
	Devices []Device `json:"devices"`
}

// Device is one GPU as NVML sees it.
type Device struct {
	// Index is the NVML index (PCI order), not the CUDA ordinal.
	Index int `json:"index"`
	// Name is the marketing name, e.g. "NVIDIA H100 80GB HBM3".
	Name string `json:"name"`
	// UUID is "GPU-…".
	UUID string `json:"uuid"`
	// BusID is the normalised PCI bus id, "0000:19:00.0".
	BusID string `json:"bus_id"`
	// MemTotal and MemFree are device memory in bytes at discovery time.
	MemTotal uint64 `json:"mem_total"`
	MemFree  uint64 `json:"mem_free"`
	// CPUs are the host CPUs local to the GPU, sorted; empty if unknown.
	CPUs []int `json:"cpus,omitempty"`
	// NUMANode is the GPU's host NUMA node, -1 if unknown.
	NUMANode int `json:"numa_node"`
	// MaxLinkGen and MaxLinkWidth are the maximum PCIe generation and
	// width of the link (the lower of GPU and slot); 0 if unknown.
	MaxLinkGen   int `json:"max_link_gen"`
	MaxLinkWidth int `json:"max_link_width"`
	// CurLinkGen and CurLinkWidth are the current link state, which drops
	// when the GPU idles; 0 if unknown.
	CurLinkGen   int `json:"cur_link_gen"`
	CurLinkWidth int `json:"cur_link_width"`
}

// Discover reads every NVIDIA GPU through NVML. It fails with an error
// wrapping ErrUnavailable when NVML cannot be initialised, and with other
// errors when a device cannot be read; callers should treat either as "no
// topology", never as "no GPU".
func Discover(ctx context.Context, cfg Config) (System, error) {
	return discover(ctx, cfg)
}
