package cli

import (
	"os"
	"os/exec"
	"path/filepath"
)

// LookPath finds the executable of one of this project's commands (name:
// "cacheagent" or "cacheagent-bench"): beside the running executable
// first, so that commands built or installed together run together, and
// on PATH otherwise. The error wraps exec.ErrNotFound when there is none.
func LookPath(name string) (string, error) {
	if exe, err := os.Executable(); err == nil {
		if p, err := exec.LookPath(filepath.Join(filepath.Dir(exe), name)); err == nil {
			return p, nil
		}
	}
	return exec.LookPath(name)
}
