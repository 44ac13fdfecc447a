package pci

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestNormalizeBusID(t *testing.T) {
	tests := []struct {
		in, want string
		bad      bool
	}{
		{in: "00000000:19:00.0", want: "0000:19:00.0"},
		{in: "0000:19:00.0", want: "0000:19:00.0"},
		{in: "00000000:AF:00.0\x00\x00", want: "0000:af:00.0"},
		{in: "19:00.0", want: "0000:19:00.0"},
		{in: "00010000:E1:1F.7", want: "10000:e1:1f.7"},
		{in: " 0000:3b:00.1\n", want: "0000:3b:00.1"},
		{in: "", bad: true},
		{in: "0000:19:00", bad: true},
		{in: "0000:19:20.0", bad: true}, // device is 5 bits
		{in: "0000:19:00.8", bad: true}, // function is 3 bits
		{in: "0000:1g:00.0", bad: true},
		{in: "0000::00.0", bad: true},
		{in: "1:2:3:4.0", bad: true},
	}
	for _, tt := range tests {
		got, err := NormalizeBusID(tt.in)
		if tt.bad {
			if !errors.Is(err, ErrBadBusID) {
				t.Errorf("NormalizeBusID(%q) = %q, %v; want ErrBadBusID", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("NormalizeBusID(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestCeiling(t *testing.T) {
	tests := []struct {
		gen, width int
		want       float64
	}{
		{gen: 5, width: 16, want: 63.008},
		{gen: 4, width: 16, want: 31.504},
		{gen: 3, width: 16, want: 15.76},
		{gen: 6, width: 16, want: 121.008},
		{gen: 5, width: 8, want: 31.504},
		{gen: 1, width: 1, want: 0.25},
		{gen: 2, width: 4, want: 2},
		{gen: 0, width: 16, want: 0},
		{gen: 7, width: 16, want: 0},
		{gen: 5, width: 0, want: 0},
		{gen: 5, width: -1, want: 0},
	}
	for _, tt := range tests {
		if got := Ceiling(tt.gen, tt.width); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Ceiling(%d, %d) = %v; want %v", tt.gen, tt.width, got, tt.want)
		}
	}
}

func TestGenFromSpeed(t *testing.T) {
	for gts, want := range map[float64]int{2.5: 1, 5: 2, 8: 3, 16: 4, 32: 5, 64: 6, 0: 0, 10: 0, 128: 0} {
		if got := GenFromSpeed(gts); got != want {
			t.Errorf("GenFromSpeed(%v) = %d; want %d", gts, got, want)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		bad  bool
	}{
		{in: "0-3,8,10-11", want: []int{0, 1, 2, 3, 8, 10, 11}},
		{in: "5\n", want: []int{5}},
		{in: "", want: nil},
		{in: "3-1", bad: true},
		{in: "a", bad: true},
		{in: "-1", bad: true},
		{in: "0-99999999", bad: true},
	}
	for _, tt := range tests {
		got, err := ParseCPUList(tt.in)
		if tt.bad != (err != nil) || !slices.Equal(got, tt.want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.bad)
		}
		if err == nil {
			if back := FormatCPUList(got); back != trim(tt.in) {
				t.Errorf("FormatCPUList(%v) = %q; want %q", got, back, trim(tt.in))
			}
		}
	}
}

func trim(s string) string {
	if n := len(s); n > 0 && s[n-1] == '\n' {
		return s[:n-1]
	}
	return s
}

func writeAttrs(t *testing.T, root, busID string, attrs map[string]string) {
	t.Helper()
	dir := filepath.Join(root, "bus", "pci", "devices", busID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range attrs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSysfs(t *testing.T) {
	root := t.TempDir()
	writeAttrs(t, root, "0000:19:00.0", map[string]string{
		"numa_node": "1", "local_cpulist": "8-11", "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16",
	})
	writeAttrs(t, root, "0000:1a:00.0", map[string]string{"numa_node": "-1", "max_link_speed": "8 GT/s", "max_link_width": "x"})
	s := Sysfs{Root: root}

	if n, err := s.NUMANode("0000:19:00.0"); n != 1 || err != nil {
		t.Errorf("NUMANode = %d, %v; want 1", n, err)
	}
	if n, err := s.NUMANode("0000:1a:00.0"); n != -1 || err != nil {
		t.Errorf("NUMANode(VM) = %d, %v; want -1", n, err)
	}
	if n, err := s.NUMANode("0000:ff:00.0"); n != -1 || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("NUMANode(missing) = %d, %v; want -1, ErrNotExist", n, err)
	}
	if cpus, err := s.LocalCPUs("0000:19:00.0"); err != nil || !slices.Equal(cpus, []int{8, 9, 10, 11}) {
		t.Errorf("LocalCPUs = %v, %v", cpus, err)
	}
	if gen, width, err := s.MaxLink("0000:19:00.0"); gen != 5 || width != 16 || err != nil {
		t.Errorf("MaxLink = %d, %d, %v; want 5, 16", gen, width, err)
	}
	if _, _, err := s.MaxLink("0000:1a:00.0"); err == nil {
		t.Error("MaxLink with width \"x\": no error")
	}
}
