package placement

import (
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// DefaultChunkSize is the default size of a chunk, the unit of placement:
// 8 MiB. See the package documentation for why.
const DefaultChunkSize int64 = 8 << 20

// Key names one chunk of one object at one generation: the unit of
// placement. Chunk i covers bytes [i*chunkSize, min((i+1)*chunkSize, size))
// of the object (see [ChunkRange]); the chunk size itself is not part of the
// key, so every member of a fleet must use the same one.
type Key struct {
	// Bucket is the GCS bucket.
	Bucket string
	// Object is the object name within the bucket.
	Object string
	// Generation is the object's GCS generation. It is part of the key so
	// that bytes of different generations never share an owner's entry.
	Generation int64
	// Chunk is the chunk index, from 0.
	Chunk int
}

// String returns the key as bucket/object@generation#chunk, for logs.
func (k Key) String() string {
	return fmt.Sprintf("%s/%s@%d#%d", k.Bucket, k.Object, k.Generation, k.Chunk)
}

// hash returns xxhash64 of the key's canonical encoding: the bucket and
// object names each prefixed by their length as a uvarint (so "a"+"bc" and
// "ab"+"c" differ), then the generation and the chunk index as 8-byte
// little-endian integers. The encoding is fixed; changing it moves every
// key, which TestOwnerPinned catches.
func (k Key) hash() uint64 {
	var d xxhash.Digest
	d.Reset()
	var buf [2 * binary.MaxVarintLen64]byte
	_, _ = d.Write(binary.AppendUvarint(buf[:0], uint64(len(k.Bucket))))
	_, _ = d.WriteString(k.Bucket)
	_, _ = d.Write(binary.AppendUvarint(buf[:0], uint64(len(k.Object))))
	_, _ = d.WriteString(k.Object)
	b := binary.LittleEndian.AppendUint64(buf[:0], uint64(k.Generation))
	b = binary.LittleEndian.AppendUint64(b, uint64(k.Chunk))
	_, _ = d.Write(b)
	return d.Sum64()
}

// Chunks returns how many chunks of chunkSize bytes an object of size bytes
// has: the last one may be short, and an empty object has none. It panics if
// chunkSize is not positive (a programmer error).
func Chunks(size, chunkSize int64) int {
	if chunkSize <= 0 {
		panic(fmt.Sprintf("placement: chunk size %d is not positive", chunkSize))
	}
	if size <= 0 {
		return 0
	}
	return int((size-1)/chunkSize + 1)
}

// ChunkRange returns the byte range [off, off+n) of chunk i of an object of
// size bytes cut into chunks of chunkSize bytes. It panics if chunkSize is not
// positive or i is not in [0, Chunks(size, chunkSize)) (programmer errors).
func ChunkRange(size, chunkSize int64, i int) (off, n int64) {
	if c := Chunks(size, chunkSize); i < 0 || i >= c {
		panic(fmt.Sprintf("placement: chunk %d out of range [0, %d)", i, c))
	}
	off = int64(i) * chunkSize
	return off, min(chunkSize, size-off)
}
