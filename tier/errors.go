package tier

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers test them with errors.Is.
var (
	// ErrLocked means another process (or another Cache in this process) owns
	// the cache directory. The error is a *LockedError naming the owner.
	ErrLocked = errors.New("tier: cache directory is locked")
	// ErrNoSpace means an object does not fit: the byte budget is held by
	// pinned or in-use entries, or the filesystem is full. When the
	// filesystem itself is full the error also matches syscall.ENOSPC.
	ErrNoSpace = errors.New("tier: no space")
	// ErrClosed means the Cache (or the Handle) has been closed.
	ErrClosed = errors.New("tier: closed")
	// ErrFormat means the index on disk has a format this build cannot read.
	ErrFormat = errors.New("tier: unsupported index format")
	// ErrNoShm means an operation on the shm tier (Promote, PinHot,
	// Demote) was asked of a cache configured without one.
	ErrNoShm = errors.New("tier: no shm tier configured")
	// ErrNotCached is what Open with CachedOnly returns for an object it
	// would have to download.
	ErrNotCached = errors.New("tier: not cached")
)

// errAbandoned is the cause a fill run by its leader's goroutine is
// cancelled with when that leader gives up (see shareHere); whoever joined
// the fill tries again.
var errAbandoned = errors.New("tier: fill abandoned by the caller running it")

// LockedError is returned by Open when another process holds the cache
// directory's lock. It matches ErrLocked.
type LockedError struct {
	// Dir is the cache directory.
	Dir string
	// PID is the owner's process id as it recorded it, or 0 if unknown.
	PID int
}

// Error names the directory and the owner.
func (e *LockedError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("tier: cache %s is in use by pid %d", e.Dir, e.PID)
	}
	return fmt.Sprintf("tier: cache %s is in use by another process", e.Dir)
}

// Is reports whether target is ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }
