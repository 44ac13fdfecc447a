package tier

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dirLock is an exclusive flock on Dir/LOCK, which holds the owner's pid.
// The kernel releases it when the process dies, so a crash never leaves a
// stale lock behind.
type dirLock struct {
	f *os.File
}

// lockDir takes the lock of dir without blocking. If another open file
// description holds it (another process, or another Cache in this one) it
// returns a *LockedError naming the owner's pid.
func lockDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("tier: open lock: %w", err)
	}
	fd := int(f.Fd())
	for {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		pid := readPID(f)
		f.Close()
		return nil, &LockedError{Dir: dir, PID: pid}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("tier: lock %s: %w", path, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err = f.Truncate(0); err == nil {
		_, err = f.WriteAt(pid, 0)
	}
	if err != nil {
		f.Close() // releases the flock
		return nil, fmt.Errorf("tier: write pid to %s: %w", path, err)
	}
	return &dirLock{f: f}, nil
}

// readPID reads the owner's pid from the lock file; 0 if unreadable.
func readPID(f *os.File) int {
	var b [32]byte
	n, _ := f.ReadAt(b[:], 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// release clears the pid and drops the lock.
func (l *dirLock) release() error {
	terr := l.f.Truncate(0)
	uerr := unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	cerr := l.f.Close()
	if err := errors.Join(terr, uerr, cerr); err != nil {
		return fmt.Errorf("tier: release lock: %w", err)
	}
	return nil
}
