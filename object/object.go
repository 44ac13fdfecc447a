package object

import (
	"fmt"
	"time"
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
