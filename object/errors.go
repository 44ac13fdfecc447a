package object

import "errors"

// Sentinel errors. Callers test them with errors.Is.
var (
	// ErrNotFound means the bucket or object (at the requested generation) does not exist.
	ErrNotFound = errors.New("object not found")
	// ErrGenerationChanged means the object was replaced by a newer generation
	// while it was being read; the caller should Stat again and restart.
	ErrGenerationChanged = errors.New("object generation changed during download")
	// ErrChecksum means the bytes read do not match the object's CRC32C.
	ErrChecksum = errors.New("CRC32C mismatch")
	// ErrShortRead means a range ended before all its bytes arrived.
	ErrShortRead = errors.New("short read")
	// ErrInvalidName means an object or bucket name cannot be used.
	ErrInvalidName = errors.New("invalid object name")
	// ErrExists means a write that must not replace anything found the
	// object there (a failed ifGenerationMatch=0 precondition).
	ErrExists = errors.New("object already exists")
)
