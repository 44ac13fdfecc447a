package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"
)

// Sentinel errors. Callers test them with errors.Is.
var (
	// ErrNotFound means the bucket or object (at the requested generation) does not exist.
	ErrNotFound = errors.New("fetch: object not found")
	// ErrGenerationChanged means the object was replaced by a newer generation
	// while it was being read; the caller should Stat again and restart.
	ErrGenerationChanged = errors.New("fetch: object generation changed during download")
	// ErrChecksum means the bytes read do not match the object's CRC32C.
	ErrChecksum = errors.New("fetch: CRC32C mismatch")
	// ErrShortRead means a range ended before all its bytes arrived.
	ErrShortRead = errors.New("fetch: short read")
	// ErrInvalidName means an object or bucket name cannot be used.
	ErrInvalidName = errors.New("fetch: invalid object name")
)

// Object names one object, optionally at one generation (0 = the live one).
type Object struct {
	Bucket     string
	Name       string
	Generation int64
}

// String returns the object as gs://bucket/name#generation.
func (o Object) String() string {
	if o.Generation == 0 {
		return fmt.Sprintf("gs://%s/%s", o.Bucket, o.Name)
	}
	return fmt.Sprintf("gs://%s/%s#%d", o.Bucket, o.Name, o.Generation)
}

// Attrs describes one generation of an object.
type Attrs struct {
	Object
	// Size is the object's length in bytes.
	Size int64
	// CRC32C is the Castagnoli CRC of the whole object; valid only if HasCRC32C.
	CRC32C uint32
	// HasCRC32C reports whether the source supplied a CRC32C (GCS always does;
	// Dir does not, and is verified by size and generation instead).
	HasCRC32C bool
	// Updated is when this generation was written.
	Updated time.Time
}

// Source is where objects come from. Implementations are safe for concurrent use.
type Source interface {
	// Stat returns the attributes of the object's live generation, or of
	// o.Generation if it is non-zero. A missing object yields ErrNotFound.
	Stat(ctx context.Context, o Object) (Attrs, error)
	// List yields the objects whose names start with prefix, in name order.
	List(ctx context.Context, bucket, prefix string) iter.Seq2[Attrs, error]
	// NewRangeReader reads n bytes at off of exactly generation o.Generation.
	// A reader may return fewer bytes than asked (callers check the length);
	// a generation that no longer exists yields ErrGenerationChanged or ErrNotFound.
	NewRangeReader(ctx context.Context, o Object, off, n int64) (io.ReadCloser, error)
}
