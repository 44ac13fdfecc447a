package gpu

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cacheagent/cacheagent/gpu/cuda"
	"github.com/cacheagent/cacheagent/gpu/internal/pci"
	"github.com/cacheagent/cacheagent/gpu/nvmlinfo"
)

// cudaBackend is the Backend over the CUDA driver.
type cudaBackend struct {
	lib *cuda.Library
	sys System    // immutable after openCUDA
	lt  *lifetime // open devices
}

var _ Backend = (*cudaBackend)(nil)

// openCUDA loads and initialises the driver, describes its devices and adds
// what NVML and sysfs know of their topology, matched by PCI bus id.
func openCUDA(ctx context.Context, cfg Config, log *slog.Logger) (*cudaBackend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lib, err := cuda.Load(cfg.LibCUDA)
	if err != nil {
		return nil, explain(err)
	}
	if err := lib.Init(); err != nil {
		return nil, explain(err)
	}
	n, err := lib.DeviceCount()
	if err != nil {
		return nil, explain(err)
	}
	if n == 0 {
		return nil, explain(fmt.Errorf("%w: the CUDA driver reports no devices", ErrNoGPU))
	}
	var sys System
	if sys.CUDAVersion, err = lib.DriverVersion(); err != nil {
		return nil, err
	}
	for i := range n {
		info, err := cudaDeviceInfo(lib, i)
		if err != nil {
			return nil, fmt.Errorf("device %d: %w", i, err)
		}
		sys.Devices = append(sys.Devices, info)
	}
	addTopology(ctx, &sys, cfg)
	for _, note := range sys.Notes {
		log.Info("gpu: " + note)
	}
	return &cudaBackend{lib: lib, sys: sys, lt: newLifetime()}, nil
}

// cudaDeviceInfo describes a device from what the driver knows.
func cudaDeviceInfo(lib *cuda.Library, ordinal int) (DeviceInfo, error) {
	d, err := lib.Device(ordinal)
	if err != nil {
		return DeviceInfo{}, err
	}
	info := DeviceInfo{Ordinal: ordinal, NUMANode: -1}
	if info.Name, err = lib.DeviceName(d); err != nil {
		return DeviceInfo{}, err
	}
	raw, err := lib.DevicePCIBusID(d)
	if err != nil {
		return DeviceInfo{}, err
	}
	if info.BusID, err = pci.NormalizeBusID(raw); err != nil {
		return DeviceInfo{}, err
	}
	if info.MemTotal, err = lib.DeviceTotalMem(d); err != nil {
		return DeviceInfo{}, err
	}
	ro, err := lib.DeviceAttribute(d, cuda.AttrReadOnlyHostRegisterSupported)
	if err != nil {
		return DeviceInfo{}, err
	}
	info.ReadOnlyRegister = ro == 1
	return info, nil
}

// addTopology adds what NVML and sysfs know to the CUDA devices of sys.
func addTopology(ctx context.Context, sys *System, cfg Config) {
	nv, err := nvmlinfo.Discover(ctx, nvmlinfo.Config{Library: cfg.LibNVML, SysfsRoot: cfg.SysfsRoot})
	mergeTopology(sys, nv, err, pci.Sysfs{Root: cfg.SysfsRoot})
}

// mergeTopology fills UUID, free memory, NUMA node, local CPUs and link of
// each CUDA device from the NVML device with the same bus id (CUDA and NVML
// number devices differently), then whatever is still unknown from sysfs.
// Failures only leave fields unknown; they are noted in sys.
func mergeTopology(sys *System, nv nvmlinfo.System, nvErr error, sysfs pci.Sysfs) {
	if nvErr != nil {
		sys.Notes = append(sys.Notes, fmt.Sprintf("no NVML topology, using sysfs: %v", nvErr))
	}
	sys.Driver = nv.DriverVersion
	byBus := make(map[string]nvmlinfo.Device, len(nv.Devices))
	for _, d := range nv.Devices {
		byBus[d.BusID] = d
	}
	for i := range sys.Devices {
		d := &sys.Devices[i]
		if n, ok := byBus[d.BusID]; ok {
			d.UUID, d.MemFree, d.NUMANode, d.CPUs = n.UUID, n.MemFree, n.NUMANode, n.CPUs
			d.Link = Link{Gen: n.MaxLinkGen, Width: n.MaxLinkWidth, CurGen: n.CurLinkGen, CurWidth: n.CurLinkWidth}
		} else if nvErr == nil {
			sys.Notes = append(sys.Notes, fmt.Sprintf("NVML does not list CUDA device %d (%s)", d.Ordinal, d.BusID))
		}
		fillFromSysfs(d, sysfs)
	}
}

// fillFromSysfs sets the NUMA node, CPUs and link of d where still unknown.
// Missing sysfs entries leave them unknown.
func fillFromSysfs(d *DeviceInfo, sysfs pci.Sysfs) {
	if d.NUMANode < 0 {
		if n, err := sysfs.NUMANode(d.BusID); err == nil {
			d.NUMANode = n
		}
	}
	if len(d.CPUs) == 0 {
		if cpus, err := sysfs.LocalCPUs(d.BusID); err == nil {
			d.CPUs = cpus
		}
	}
	if d.Link.Gen == 0 || d.Link.Width == 0 {
		if gen, width, err := sysfs.MaxLink(d.BusID); err == nil {
			d.Link.Gen, d.Link.Width = gen, width
		}
	}
}

// Kind returns ModeCUDA.
func (b *cudaBackend) Kind() Mode { return ModeCUDA }

// System returns a copy of what was discovered.
func (b *cudaBackend) System() System {
	s := b.sys
	s.Devices = append([]DeviceInfo(nil), b.sys.Devices...)
	s.Notes = append([]string(nil), b.sys.Notes...)
	return s
}

// Open retains the device's primary context.
func (b *cudaBackend) Open(ctx context.Context, ordinal int) (Device, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= len(b.sys.Devices) {
		return nil, fmt.Errorf("%w: no device %d (%d devices)", ErrNoGPU, ordinal, len(b.sys.Devices))
	}
	if err := b.lt.check(); err != nil {
		return nil, err
	}
	cd, err := b.lib.Device(ordinal)
	if err != nil {
		return nil, fmt.Errorf("gpu %d: %w", ordinal, err)
	}
	c, err := b.lib.RetainPrimaryContext(cd)
	if err != nil {
		return nil, fmt.Errorf("gpu %d: %w", ordinal, classify(err))
	}
	d := &cudaDevice{info: b.sys.Devices[ordinal], ctx: c, lt: newLifetime()}
	if d.t, err = b.lt.track(d.shutdown); err != nil {
		return nil, err
	}
	return d, nil
}

// Close closes the devices still open. The driver stays loaded.
func (b *cudaBackend) Close() error { return b.lt.close() }
