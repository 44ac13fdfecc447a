//go:build unix

package gpubench

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// shmMap is a file mapped PROT_READ, MAP_SHARED, as the shm tier maps
// shards.
type shmMap struct {
	b    []byte
	path string
}

// mapShm creates a file of n bytes in dir, fills it through a writable
// mapping and maps it again read-only. unmap removes it.
func mapShm(dir string, n int, fill func([]byte)) (*shmMap, error) {
	f, err := os.CreateTemp(dir, "cacheagent-gpu-bench-")
	if err != nil {
		return nil, fmt.Errorf("gpu: bench: %w", err)
	}
	m := &shmMap{path: f.Name()}
	defer f.Close()
	if err := f.Truncate(int64(n)); err != nil {
		return nil, errors.Join(fmt.Errorf("gpu: bench: %w", err), os.Remove(m.path))
	}
	w, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("gpu: bench: mmap %s: %w", m.path, err), os.Remove(m.path))
	}
	fill(w)
	if err := unix.Munmap(w); err != nil {
		return nil, errors.Join(fmt.Errorf("gpu: bench: munmap: %w", err), os.Remove(m.path))
	}
	if m.b, err = unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED); err != nil {
		return nil, errors.Join(fmt.Errorf("gpu: bench: mmap %s: %w", m.path, err), os.Remove(m.path))
	}
	return m, nil
}

// unmap unmaps and removes the file. Unregister first.
func (m *shmMap) unmap() error {
	return errors.Join(unix.Munmap(m.b), os.Remove(m.path))
}
