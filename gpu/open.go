package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cacheagent/cacheagent/gpu/cuda"
)

// Config selects and configures a backend. The zero value is ModeAuto on
// the system's driver.
type Config struct {
	// Mode selects the backend.
	Mode Mode
	// LibCUDA is the CUDA driver library; "" means libcuda.so.1 as found
	// by the dynamic loader. Tests point it at a fake.
	LibCUDA string
	// LibNVML is the NVML library; "" means libnvidia-ml.so.1.
	LibNVML string
	// SysfsRoot is where sysfs is mounted; "" means /sys.
	SysfsRoot string
	// Fake configures the Fake for ModeFake.
	Fake FakeConfig
	// Logger receives ModeAuto's fallback line and discovery notes; nil
	// means slog.Default().
	Logger *slog.Logger
}

// Open opens the backend for mode with the system's libraries.
func Open(ctx context.Context, mode Mode) (Backend, error) {
	return OpenConfig(ctx, Config{Mode: mode})
}

// OpenConfig opens the backend cfg selects. ModeCUDA fails with the reason
// the driver cannot be used, and a hint at the fix. ModeAuto then returns
// *None with that Reason instead, logging one line: at Info when there is
// simply no driver or GPU, at Warn when a driver is there but unusable.
func OpenConfig(ctx context.Context, cfg Config) (Backend, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	switch cfg.Mode {
	case ModeNone:
		return &None{Reason: errors.New("GPU transfers disabled (--gpu=none)")}, nil
	case ModeFake:
		return NewFake(cfg.Fake)
	case ModeCUDA:
		b, err := openCUDA(ctx, cfg, log)
		if err != nil {
			return nil, fmt.Errorf("gpu: %w", err)
		}
		return b, nil
	case ModeAuto:
		b, err := openCUDA(ctx, cfg, log)
		if err == nil {
			return b, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("gpu: %w", err)
		}
		level := slog.LevelWarn
		if noGPU(err) {
			level = slog.LevelInfo
		}
		log.Log(ctx, level, "gpu: no usable CUDA driver; continuing without GPU transfers (set --gpu=none to silence)",
			"reason", err.Error())
		return &None{Reason: err}, nil
	default:
		return nil, fmt.Errorf("gpu: invalid mode %d", int(cfg.Mode))
	}
}

// noGPU tells "this machine has no NVIDIA GPU or driver", which is normal,
// from a driver that is there but fails.
func noGPU(err error) bool {
	return errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) || errors.Is(err, ErrNoGPU)
}

// explain adds to a driver error the likely cause and fix.
func explain(err error) error {
	var hint string
	switch {
	case errors.Is(err, cuda.ErrNoDriver):
		hint = "is the NVIDIA driver installed?"
	case errors.Is(err, cuda.ErrMissingSymbol):
		hint = "the driver is too old: CUDA 11 or newer is needed"
	case errors.Is(err, cuda.ErrNoDevice), errors.Is(err, ErrNoGPU):
		hint = "no GPU is visible: check CUDA_VISIBLE_DEVICES and /dev/nvidia*"
	case errors.Is(err, cuda.ErrStubLibrary):
		hint = "libcuda.so.1 is the CUDA toolkit's link stub (…/lib64/stubs): remove it from LD_LIBRARY_PATH"
	case errors.Is(err, cuda.ErrSystemDriverMismatch), errors.Is(err, cuda.ErrCompatNotSupportedOnDevice):
		hint = "the driver library does not match the kernel module: reboot, or reinstall the driver"
	case errors.Is(err, cuda.ErrNotPermitted), errors.Is(err, cuda.ErrDeviceUnavailable):
		hint = "the GPU is exclusive to another process or not permitted: check nvidia-smi's compute mode and /dev/nvidia* permissions"
	default:
		return err
	}
	return fmt.Errorf("%w (%s)", err, hint)
}

// classify gives a CUDA error the matching gpu sentinel as well, keeping
// its message ("cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)") and chain.
func classify(err error) error {
	var kind error
	switch {
	case errors.Is(err, cuda.ErrOutOfMemory):
		kind = ErrOutOfMemory
	case errors.Is(err, cuda.ErrHostMemoryAlreadyRegistered):
		kind = ErrAlreadyRegistered
	case errors.Is(err, cuda.ErrNotSupported):
		kind = ErrUnsupported
	case errors.Is(err, cuda.ErrNotReady):
		kind = ErrNotReady
	case errors.Is(err, cuda.ErrReleased):
		kind = ErrClosed
	case errors.Is(err, cuda.ErrInvalidValue):
		kind = ErrInvalid
	default:
		return err
	}
	return &kindError{kind: kind, err: err}
}

// kindError is an error that also matches a gpu sentinel.
type kindError struct{ kind, err error }

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// None is the backend without a GPU: it has no devices and Open fails with
// ErrNoGPU. The agent still serves data to processes that copy it to their
// GPUs themselves.
type None struct {
	// Reason says why there is no GPU backend.
	Reason error
}

// Kind returns ModeNone.
func (n *None) Kind() Mode { return ModeNone }

// System returns no devices, with the reason as a note.
func (n *None) System() System {
	s := System{Devices: []DeviceInfo{}}
	if n.Reason != nil {
		s.Notes = []string{n.Reason.Error()}
	}
	return s
}

// Open fails with ErrNoGPU, wrapping the reason.
func (n *None) Open(context.Context, int) (Device, error) {
	if n.Reason == nil {
		return nil, ErrNoGPU
	}
	return nil, fmt.Errorf("%w: %w", ErrNoGPU, n.Reason)
}

// Close does nothing.
func (n *None) Close() error { return nil }
