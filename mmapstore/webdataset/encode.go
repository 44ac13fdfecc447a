package webdataset

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"strings"
)

// The saved index is:
//
//	magic      8 bytes "WDSIDX\x00\x01" (the last byte is the version)
//	size       uvarint, the object size
//	count      uvarint, the number of members
//	members    count times:
//	             uvarint name length, name bytes,
//	             uvarint gap, in 512-byte blocks, between the earliest
//	               place the member's data can start (after the previous
//	               member's padded data and one header) and its offset,
//	             uvarint data size
//	crc        4 bytes, little-endian CRC-32C of everything before it
//
// Offsets are thus 512-byte aligned, increasing and non-overlapping by
// construction; UnmarshalShard still checks them against the object size.
const indexMagic = "WDSIDX\x00\x01"

// crcTable is the Castagnoli CRC table of the saved index.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// MarshalBinary encodes the shard's index compactly: member names, offsets
// and sizes and the object size; samples are recomputed on decoding. It
// never fails.
func (s *Shard) MarshalBinary() ([]byte, error) {
	n := len(indexMagic) + 2*binary.MaxVarintLen64 + 4
	for _, m := range s.members {
		n += len(m.Name) + 3*binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	b = append(b, indexMagic...)
	b = binary.AppendUvarint(b, uint64(s.size))
	b = binary.AppendUvarint(b, uint64(len(s.members)))
	next := int64(blockSize) // the earliest data offset
	for _, m := range s.members {
		b = binary.AppendUvarint(b, uint64(len(m.Name)))
		b = append(b, m.Name...)
		b = binary.AppendUvarint(b, uint64((m.Offset-next)/blockSize))
		b = binary.AppendUvarint(b, uint64(m.Size))
		next = padded(m.Offset+m.Size) + blockSize
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable)), nil
}

// padded rounds n up to a multiple of the block size; n is at most
// math.MaxInt64 - blockSize.
func padded(n int64) int64 {
	return (n + blockSize - 1) &^ (blockSize - 1)
}

// UnmarshalShard decodes an index MarshalBinary encoded, for an object of
// objectSize bytes, and checks it again: the checksum, the object size,
// non-empty names without NULs, and every member's data within the object,
// 512-byte aligned, after the previous member's data and a header. Errors
// wrap ErrIndex, or ErrSample if the members do not group into samples.
func UnmarshalShard(b []byte, objectSize int64) (*Shard, error) {
	if len(b) < len(indexMagic)+4 || string(b[:len(indexMagic)]) != indexMagic {
		return nil, fmt.Errorf("%w: bad magic or %d bytes, too short", ErrIndex, len(b))
	}
	body := b[:len(b)-4]
	if got, want := crc32.Checksum(body, crcTable), binary.LittleEndian.Uint32(b[len(body):]); got != want {
		return nil, fmt.Errorf("%w: checksum %08x, want %08x", ErrIndex, got, want)
	}
	d := decoder{b: body, off: len(indexMagic)}
	size := d.uvarint()
	count := d.uvarint()
	switch {
	case d.err != nil:
		return nil, d.err
	case objectSize < 0 || objectSize > math.MaxInt64/2 || size != uint64(objectSize):
		return nil, fmt.Errorf("%w: made for an object of %d bytes, not %d", ErrIndex, size, objectSize)
	case count > uint64(len(body)-d.off)/3: // a member takes 3 bytes or more
		return nil, fmt.Errorf("%w: %d members cannot fit in %d bytes", ErrIndex, count, len(body)-d.off)
	}
	members := make([]Member, 0, int(count))
	next := int64(blockSize)
	for i := range int(count) {
		nameLen := d.uvarint()
		if d.err == nil && nameLen > uint64(len(body)-d.off) {
			return nil, fmt.Errorf("%w: member %d has a %d-byte name, %d bytes are left",
				ErrIndex, i, nameLen, len(body)-d.off)
		}
		name := string(d.bytes(int(nameLen)))
		gap, msize := d.uvarint(), d.uvarint()
		if d.err != nil {
			return nil, d.err
		}
		if name == "" || strings.IndexByte(name, 0) >= 0 {
			return nil, fmt.Errorf("%w: member %d has name %q", ErrIndex, i, name)
		}
		// next < objectSize+2*blockSize here, so no sum below overflows.
		room := objectSize - next
		if room < 0 || gap > uint64(room)/blockSize || msize > uint64(room)-gap*blockSize {
			return nil, fmt.Errorf("%w: member %d (%q, %d bytes) does not fit the %d-byte object after byte %d",
				ErrIndex, i, name, msize, objectSize, next)
		}
		off := next + int64(gap)*blockSize
		members = append(members, Member{Name: name, Offset: off, Size: int64(msize)})
		next = padded(off+int64(msize)) + blockSize
	}
	if d.off != len(body) {
		return nil, fmt.Errorf("%w: %d bytes after the last member", ErrIndex, len(body)-d.off)
	}
	return newShard(members, objectSize)
}

// decoder reads uvarints and byte strings, remembering the first error.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 || v > math.MaxInt64 {
		d.err = fmt.Errorf("%w: bad number at byte %d", ErrIndex, d.off)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	v := d.b[d.off : d.off+n]
	d.off += n
	return v
}
