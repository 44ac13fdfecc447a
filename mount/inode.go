package mount

// Inode numbers are a 63-bit hash of what a node is, so they are the same in
// every mount: FNV-1a over a kind byte, the bucket, NUL, the path, NUL and
// (for files) the generation, then the SplitMix64 finalizer to spread the
// bits. Buckets contain no NUL and listed names none either, so the input is
// unambiguous. 0 and 1 (the root) are never produced.

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211

	kindDir  = 'd'
	kindFile = 'f'

	rootIno = 1
)

// fileIno returns the inode number of one generation of bucket/name.
func fileIno(bucket, name string, gen int64) uint64 {
	return inoOf(kindFile, bucket, name, gen)
}

// dirIno returns the inode number of directory path in bucket ("" is the
// bucket's own directory).
func dirIno(bucket, path string) uint64 {
	return inoOf(kindDir, bucket, path, 0)
}

func inoOf(kind byte, bucket, path string, gen int64) uint64 {
	h := fnvByte(fnvOffset, kind)
	h = fnvString(h, bucket)
	h = fnvByte(h, 0)
	h = fnvString(h, path)
	h = fnvByte(h, 0)
	for i := range 8 {
		h = fnvByte(h, byte(uint64(gen)>>(8*i)))
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	h &^= 1 << 63 // go-fuse numbers nodes without an inode number from 2^63
	if h <= rootIno {
		h += 2
	}
	return h
}

func fnvByte(h uint64, c byte) uint64 { return (h ^ uint64(c)) * fnvPrime }

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = fnvByte(h, s[i])
	}
	return h
}
