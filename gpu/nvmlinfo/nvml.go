//go:build cgo

package nvmlinfo

import (
	"bytes"
	"context"
	"fmt"
	"math/bits"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/cacheagent/cacheagent/gpu/internal/pci"
)

// maxCPUs sizes the CPU sets asked of NVML: enough for any host we run on.
const maxCPUs = 4096

func discover(ctx context.Context, cfg Config) (System, error) {
	var opts []nvml.LibraryOption
	if cfg.Library != "" {
		opts = append(opts, nvml.WithLibraryPath(cfg.Library))
	}
	return query(ctx, nvml.New(opts...), pci.Sysfs{Root: cfg.SysfsRoot})
}

// query reads every device of lib. It calls nothing on lib after a failed
// Init, and Shutdown exactly once after a successful one.
func query(ctx context.Context, lib nvml.Interface, sys pci.Sysfs) (System, error) {
	if err := ctx.Err(); err != nil {
		return System{}, err
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return System{}, fmt.Errorf("%w: nvmlInit: %w", ErrUnavailable, ret)
	}
	// A failed shutdown only leaves the library loaded; what was read stands.
	defer lib.Shutdown()

	var s System
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		s.DriverVersion = v
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		s.CUDAVersion = v
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return System{}, fmt.Errorf("nvmlDeviceGetCount: %w", ret)
	}
	for i := range n {
		if err := ctx.Err(); err != nil {
			return System{}, err
		}
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return System{}, fmt.Errorf("nvmlDeviceGetHandleByIndex(%d): %w", i, ret)
		}
		d, err := readDevice(i, h, sys)
		if err != nil {
			return System{}, err
		}
		s.Devices = append(s.Devices, d)
	}
	return s, nil
}

// readDevice reads one device. Only the PCI bus id is required (it is how
// devices are matched to CUDA); any other field NVML cannot give is left
// unknown.
func readDevice(i int, h nvml.Device, sys pci.Sysfs) (Device, error) {
	d := Device{Index: i, NUMANode: -1}
	info, ret := h.GetPciInfo()
	if ret != nvml.SUCCESS {
		return d, fmt.Errorf("nvmlDeviceGetPciInfo(%d): %w", i, ret)
	}
	busID, err := busIDOf(info)
	if err != nil {
		return d, fmt.Errorf("nvml device %d: %w", i, err)
	}
	d.BusID = busID
	if v, ret := h.GetName(); ret == nvml.SUCCESS {
		d.Name = v
	}
	if v, ret := h.GetUUID(); ret == nvml.SUCCESS {
		d.UUID = v
	}
	if m, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
		d.MemTotal, d.MemFree = m.Total, m.Free
	}
	d.CPUs = localCPUs(h, sys, busID)
	d.NUMANode = numaNode(h, sys, busID)
	if v, ret := h.GetMaxPcieLinkGeneration(); ret == nvml.SUCCESS {
		d.MaxLinkGen = v
	}
	if v, ret := h.GetMaxPcieLinkWidth(); ret == nvml.SUCCESS {
		d.MaxLinkWidth = v
	}
	if v, ret := h.GetCurrPcieLinkGeneration(); ret == nvml.SUCCESS {
		d.CurLinkGen = v
	}
	if v, ret := h.GetCurrPcieLinkWidth(); ret == nvml.SUCCESS {
		d.CurLinkWidth = v
	}
	return d, nil
}

// busIDOf normalises NVML's bus id ("00000000:19:00.0"), or builds it from
// the numeric fields when the string is empty.
func busIDOf(info nvml.PciInfo) (string, error) {
	raw := info.BusId[:]
	if i := bytes.IndexByte(raw, 0); i >= 0 {
		raw = raw[:i]
	}
	s := string(raw)
	if s == "" {
		s = fmt.Sprintf("%x:%x:%x.0", info.Domain, info.Bus, info.Device)
	}
	return pci.NormalizeBusID(s)
}

// localCPUs asks NVML for the CPUs of the GPU's NUMA node, then for its
// plain CPU affinity, then sysfs.
func localCPUs(h nvml.Device, sys pci.Sysfs, busID string) []int {
	mask, ret := h.GetCpuAffinityWithinScope(maxCPUs, nvml.AFFINITY_SCOPE_NODE)
	if ret != nvml.SUCCESS {
		mask, ret = h.GetCpuAffinity(maxCPUs)
	}
	if ret == nvml.SUCCESS {
		if cpus := cpusFromMask(mask); len(cpus) > 0 {
			return cpus
		}
	}
	cpus, err := sys.LocalCPUs(busID)
	if err != nil {
		return nil
	}
	return cpus
}

// numaNode asks NVML (which knows only on Grace systems), then sysfs.
func numaNode(h nvml.Device, sys pci.Sysfs, busID string) int {
	if n, ret := h.GetNumaNodeId(); ret == nvml.SUCCESS {
		return n
	}
	n, err := sys.NUMANode(busID)
	if err != nil {
		return -1
	}
	return n
}

// cpusFromMask turns an NVML CPU set (one C unsigned long per word, CPU 0 in
// bit 0 of word 0) into sorted CPU numbers.
func cpusFromMask(words []uint) []int {
	var cpus []int
	for w, v := range words {
		for b := 0; b < bits.UintSize; b++ {
			if v&(1<<b) != 0 {
				cpus = append(cpus, w*bits.UintSize+b)
			}
		}
	}
	return cpus
}
