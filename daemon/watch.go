package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long WatchConfig waits after the last event
// before it reports a change: editors write a file in several steps.
const DefaultDebounce = 250 * time.Millisecond

// ConfigWatcher watches a config file for changes. Create it with
// WatchConfig and run it with Run.
type ConfigWatcher struct {
	w    *fsnotify.Watcher
	path string // absolute
}

// WatchConfig starts watching the directory of the config file at path:
// changes made after it returns are seen by Run.
func WatchConfig(path string) (*ConfigWatcher, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("daemon: watch config: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("daemon: watch config: %w", err)
	}
	if err := w.Add(filepath.Dir(abs)); err != nil {
		w.Close()
		return nil, fmt.Errorf("daemon: watch config dir: %w", err)
	}
	return &ConfigWatcher{w: w, path: abs}, nil
}

// Run calls changed (from Run's goroutine, never concurrently) once the
// directory has been quiet for debounce after events that may have
// changed the file: writes, creates, renames and removes of its name, which
// covers editors that write in place and those that write a new file and
// rename it over the old one. If the file is a symlink, every event in its
// directory counts (configuration managers swap links). Run blocks until
// ctx ends, then stops watching and returns nil.
func (cw *ConfigWatcher) Run(ctx context.Context, debounce time.Duration, log *slog.Logger, changed func()) error {
	defer cw.w.Close()
	base := filepath.Base(cw.path)
	linked := isSymlink(cw.path)
	timer := time.NewTimer(debounce)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-cw.w.Events:
			if !ok {
				return nil
			}
			if ev.Op == fsnotify.Chmod || (!linked && filepath.Base(ev.Name) != base) {
				continue
			}
			timer.Reset(debounce)
		case err, ok := <-cw.w.Errors:
			if !ok {
				return nil
			}
			log.Warn("config watch", "err", err)
		case <-timer.C:
			linked = isSymlink(cw.path)
			changed()
		}
	}
}

// Close stops watching; use it only if Run is never called.
func (cw *ConfigWatcher) Close() error { return cw.w.Close() }

// isSymlink reports whether path is a symbolic link.
func isSymlink(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}
