package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/cacheagent/cacheagent/gpu"
)

// GPUInfoReport is what `cacheagent gpu info --json` prints, and what both
// it and `cacheagent-bench gpu --json` print on a machine without a GPU.
type GPUInfoReport struct {
	Backend     string            `json:"backend"`
	Available   bool              `json:"available"`
	Reason      string            `json:"reason,omitempty"`
	Driver      string            `json:"driver,omitempty"`
	CUDAVersion int               `json:"cuda_version,omitempty"`
	Devices     []GPUDeviceReport `json:"devices"`
	Notes       []string          `json:"notes,omitempty"`
}

// GPUDeviceReport is a device with its link ceiling.
type GPUDeviceReport struct {
	gpu.DeviceInfo
	CeilingGBps float64 `json:"link_ceiling_gbps"`
}

// OpenGPU opens the backend quietly: a fallback's reason is printed by the
// command, not logged.
func OpenGPU(ctx context.Context, mode gpu.Mode) (gpu.Backend, error) {
	return gpu.OpenConfig(ctx, gpu.Config{Mode: mode, Logger: slog.New(slog.DiscardHandler)})
}

// PrintNoGPU prints the one line (or JSON object) saying why there is no GPU.
func PrintNoGPU(out io.Writer, mode gpu.Mode, none *gpu.None, asJSON bool) error {
	line := "GPU transfers disabled (--gpu=none)"
	if mode != gpu.ModeNone {
		line = fmt.Sprintf("no NVIDIA GPU/driver found: %v", none.Reason)
	}
	if asJSON {
		return WriteJSON(out, GPUInfoReport{Backend: "none", Reason: line, Devices: []GPUDeviceReport{}})
	}
	_, err := fmt.Fprintln(out, line)
	return err
}

// LinkString renders "Gen5 x16", adding the current state when it differs
// ("Gen5 x16 (now Gen1 x16)": links slow down when idle).
func LinkString(l gpu.Link) string {
	if l.Gen == 0 || l.Width == 0 {
		return "-"
	}
	s := fmt.Sprintf("Gen%d x%d", l.Gen, l.Width)
	if l.CurGen > 0 && (l.CurGen != l.Gen || l.CurWidth != l.Width) {
		s += fmt.Sprintf(" (now Gen%d x%d)", l.CurGen, l.CurWidth)
	}
	return s
}
