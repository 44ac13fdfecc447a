package cli

import (
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/term"
)

// setupLogging logs text on a terminal and JSON otherwise (journald-friendly).
func setupLogging(level string) error {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	hopts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	if term.IsTerminal(int(os.Stderr.Fd())) {
		h = slog.NewTextHandler(os.Stderr, hopts)
	} else {
		h = slog.NewJSONHandler(os.Stderr, hopts)
	}
	slog.SetDefault(slog.New(h))
	return nil
}
