package gpu

import (
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/gpu/cuda"
)

// TestOpenNoDriver is the real "no driver" path on machines without one:
// auto falls back to None with the reason, cuda fails naming it.
func TestOpenNoDriver(t *testing.T) {
	var log logs
	b, err := OpenConfig(t.Context(), Config{Logger: log.logger()})
	if err != nil {
		t.Fatalf("OpenConfig(auto) = %v; auto never fails for want of a driver", err)
	}
	defer b.Close()
	if b.Kind() == ModeCUDA {
		t.Skip("this machine has a working CUDA driver")
	}
	none, ok := b.(*None)
	if !ok || !errors.Is(none.Reason, cuda.ErrNoDriver) && !errors.Is(none.Reason, cuda.ErrNoDevice) {
		t.Fatalf("OpenConfig(auto) = %T %v; want *None, no driver or device", b, b)
	}
	if lines := log.lines(); len(lines) != 1 || !strings.Contains(lines[0], "continuing without GPU transfers") {
		t.Errorf("log = %q; want one line saying why", lines)
	}
	if _, err := b.Open(t.Context(), 0); !errors.Is(err, ErrNoGPU) || !errors.Is(err, none.Reason) {
		t.Errorf("None.Open = %v; want ErrNoGPU wrapping the reason", err)
	}
	if sys := b.System(); len(sys.Devices) != 0 || len(sys.Notes) != 1 {
		t.Errorf("None.System = %+v; want no devices and the reason", sys)
	}

	_, err = Open(t.Context(), ModeCUDA)
	switch {
	case errors.Is(err, cuda.ErrNoDriver) && strings.Contains(err.Error(), "libcuda.so.1"):
	case errors.Is(err, cuda.ErrNoDevice):
	default:
		t.Errorf("Open(cuda) = %v; want no driver (naming libcuda.so.1) or no device", err)
	}
}

func TestOpenModes(t *testing.T) {
	ctx := t.Context()
	b := must2[Backend](t)(Open(ctx, ModeNone))
	if b.Kind() != ModeNone {
		t.Errorf("Open(none).Kind() = %v", b.Kind())
	}
	b = must2[Backend](t)(Open(ctx, ModeFake))
	if _, ok := b.(*Fake); !ok {
		t.Errorf("Open(fake) = %T; want *Fake", b)
	}
	if _, err := Open(ctx, Mode(42)); err == nil {
		t.Error("Open(Mode(42)): no error")
	}
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	if _, err := OpenConfig(cancelledCtx(t), Config{LibCUDA: lib, Logger: slog.New(slog.DiscardHandler)}); err == nil {
		t.Error("OpenConfig(auto, cancelled ctx) fell back instead of failing")
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{ModeAuto, ModeCUDA, ModeFake, ModeNone} {
		got, err := ParseMode(m.String())
		if got != m || err != nil {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
		text, err := m.MarshalText()
		var back Mode
		if err != nil || back.UnmarshalText(text) != nil || back != m {
			t.Errorf("text round trip of %v: %q, %v -> %v", m, text, err, back)
		}
	}
	for _, s := range []string{"", "CUDA", "gpu", "auto "} {
		if _, err := ParseMode(s); err == nil {
			t.Errorf("ParseMode(%q): no error", s)
		}
	}
	var m Mode
	if err := m.Set("fake"); err != nil || m != ModeFake || m.Type() != "mode" {
		t.Errorf("Set(fake) = %v, %v", m, err)
	}
	var cfg struct{ GPU Mode }
	if err := json.Unmarshal([]byte(`{"GPU":"none"}`), &cfg); err != nil || cfg.GPU != ModeNone {
		t.Errorf("json: %v, %v", cfg.GPU, err)
	}
	if _, err := Mode(9).MarshalText(); err == nil || Mode(9).String() != "Mode(9)" {
		t.Errorf("Mode(9): %v, %q", err, Mode(9).String())
	}
}
