package gpu

import "fmt"

// Mode selects a backend: the --gpu flag and the config file's gpu key.
// The zero value is ModeAuto.
type Mode int

// Modes.
const (
	// ModeAuto uses the CUDA driver when it works and None otherwise,
	// logging one line that says why.
	ModeAuto Mode = iota
	// ModeCUDA uses the CUDA driver and fails if it cannot.
	ModeCUDA
	// ModeFake uses the Fake, an in-process model for tests and demos. It
	// is never chosen automatically.
	ModeFake
	// ModeNone disables GPU transfers.
	ModeNone
)

var modeNames = [...]string{ModeAuto: "auto", ModeCUDA: "cuda", ModeFake: "fake", ModeNone: "none"}

// ParseMode parses "auto", "cuda", "fake" or "none".
func ParseMode(s string) (Mode, error) {
	for m, name := range modeNames {
		if s == name {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("gpu: unknown mode %q (want auto, cuda, fake or none)", s)
}

// String returns the mode's name.
func (m Mode) String() string {
	if m >= 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Set parses s into m, so a *Mode is a command-line flag value.
func (m *Mode) Set(s string) error {
	v, err := ParseMode(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Type names the flag's value type in help output.
func (m *Mode) Type() string { return "mode" }

// MarshalText returns the mode's name.
func (m Mode) MarshalText() ([]byte, error) {
	if m < 0 || int(m) >= len(modeNames) {
		return nil, fmt.Errorf("gpu: invalid mode %d", int(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText parses a mode name (YAML and JSON config).
func (m *Mode) UnmarshalText(b []byte) error { return m.Set(string(b)) }
