// Package pci holds the PCI facts the gpu packages share: bus id
// normalisation (NVML, CUDA and sysfs spell them differently), PCIe link
// ceilings, and what sysfs says about a PCI device's NUMA node, local CPUs
// and link.
//
// Everything here is a pure function or a read of files under a sysfs root,
// so tests point it at a directory tree of their own.
package pci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrBadBusID reports a PCI bus id that cannot be parsed.
var ErrBadBusID = errors.New("pci: malformed bus id")

// NormalizeBusID returns the bus id s in the form sysfs and CUDA use,
// "dddd:bb:dd.f" in lower-case hex ("0000:19:00.0"). It accepts NVML's
// 8-digit domains ("00000000:19:00.0"), upper-case hex and ids without a
// domain ("19:00.0", domain 0). Domains wider than 16 bits (VMD) keep their
// digits, as sysfs prints them.
func NormalizeBusID(s string) (string, error) {
	s = strings.TrimSpace(strings.TrimRight(s, "\x00"))
	parts := strings.Split(s, ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return "", fmt.Errorf("%w: %q", ErrBadBusID, s)
	}
	devFn := strings.Split(parts[2], ".")
	if len(devFn) != 2 {
		return "", fmt.Errorf("%w: %q", ErrBadBusID, s)
	}
	fields := []struct {
		s    string
		bits int
	}{{parts[0], 32}, {parts[1], 8}, {devFn[0], 5}, {devFn[1], 3}}
	var v [4]uint64
	for i, f := range fields {
		n, err := strconv.ParseUint(f.s, 16, f.bits)
		if err != nil || f.s == "" {
			return "", fmt.Errorf("%w: %q", ErrBadBusID, s)
		}
		v[i] = n
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", v[0], v[1], v[2], v[3]), nil
}

// laneGBps is the usable bandwidth of one lane in GB/s per direction, after
// line encoding (8b/10b up to Gen2, 128b/130b from Gen3, FLIT for Gen6).
var laneGBps = map[int]float64{1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

// Ceiling returns the PCIe link ceiling in GB/s per direction for a link of
// generation gen and width lanes, or 0 when either is unknown. Gen5 x16 is
// 63.0 GB/s; host-to-device copies reach about 90% of it.
func Ceiling(gen, width int) float64 {
	if width <= 0 {
		return 0
	}
	return laneGBps[gen] * float64(width)
}

// GenFromSpeed maps a link speed in GT/s per lane to its PCIe generation,
// or 0 when the speed is not a standard one.
func GenFromSpeed(gts float64) int {
	for gen, s := range map[int]float64{1: 2.5, 2: 5, 3: 8, 4: 16, 5: 32, 6: 64} {
		if gts > s*0.99 && gts < s*1.01 {
			return gen
		}
	}
	return 0
}

// Sysfs reads PCI device attributes under a sysfs root. The zero value reads
// /sys.
type Sysfs struct {
	// Root is the sysfs mount point; "" means /sys.
	Root string
}

func (s Sysfs) attr(busID, name string) (string, error) {
	root := s.Root
	if root == "" {
		root = "/sys"
	}
	b, err := os.ReadFile(filepath.Join(root, "bus", "pci", "devices", busID, name))
	if err != nil {
		return "", fmt.Errorf("pci %s: %w", busID, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// NUMANode returns the NUMA node sysfs gives for the device, -1 when the
// platform does not say (common in VMs).
func (s Sysfs) NUMANode(busID string) (int, error) {
	v, err := s.attr(busID, "numa_node")
	if err != nil {
		return -1, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1, fmt.Errorf("pci %s: numa_node %q: %w", busID, v, err)
	}
	return n, nil
}

// LocalCPUs returns the CPUs sysfs lists as local to the device.
func (s Sysfs) LocalCPUs(busID string) ([]int, error) {
	v, err := s.attr(busID, "local_cpulist")
	if err != nil {
		return nil, err
	}
	cpus, err := ParseCPUList(v)
	if err != nil {
		return nil, fmt.Errorf("pci %s: local_cpulist: %w", busID, err)
	}
	return cpus, nil
}

// MaxLink returns the device's maximum link generation and width from
// max_link_speed ("32.0 GT/s PCIe") and max_link_width ("16").
func (s Sysfs) MaxLink(busID string) (gen, width int, err error) {
	speed, err := s.attr(busID, "max_link_speed")
	if err != nil {
		return 0, 0, err
	}
	w, err := s.attr(busID, "max_link_width")
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(speed)
	if len(f) == 0 {
		return 0, 0, fmt.Errorf("pci %s: empty max_link_speed", busID)
	}
	gts, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, 0, fmt.Errorf("pci %s: max_link_speed %q: %w", busID, speed, err)
	}
	width, err = strconv.Atoi(w)
	if err != nil {
		return 0, 0, fmt.Errorf("pci %s: max_link_width %q: %w", busID, w, err)
	}
	return GenFromSpeed(gts), width, nil
}

// maxCPU bounds CPU numbers in lists, so a corrupt list cannot allocate without end.
const maxCPU = 1 << 16

// ParseCPUList parses a kernel CPU list such as "0-3,8,10-11" into sorted
// CPU numbers. An empty list is valid and yields none.
func ParseCPUList(s string) ([]int, error) {
	var cpus []int
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("bad cpu list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b > maxCPU {
				return nil, fmt.Errorf("bad cpu list %q", s)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// FormatCPUList is the inverse of ParseCPUList for sorted CPU numbers:
// [0 1 2 3 8] becomes "0-3,8".
func FormatCPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", cpus[i], cpus[j])
		} else {
			fmt.Fprintf(&b, "%d", cpus[i])
		}
		i = j + 1
	}
	return b.String()
}
