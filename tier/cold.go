package tier

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A cache of small objects holds millions of entries; as *entry values
// (a struct, two map slots and a key each, ~300 bytes with the runtime's
// overhead) 1.28 M of them took 470 MB of live heap and ~900 MB of RSS. So
// only the entries in use are kept as *entry (the warm set: Cache.entries,
// bounded by settings.warmEntries); packed base entries at rest (no handle,
// no pin, no hot copy, nothing unwritten) are frozen into a coldSet: their
// key and index record in an arena outside the Go heap, ~90 bytes each, and
// a 4-byte slot of a hash table. A use thaws an entry back (a lookup, a
// decode and one allocation); the warm set's least recently used entries
// are frozen again as it grows past its bound.
//
// The arena is appended to in the order entries are frozen, which is their
// order of last use (the warm LRU's tail is frozen first, and start-up
// freezes by last access), so its oldest live record is the cold set's
// least recently used entry: eviction thaws from there (see thawOldLocked).

// coldChunkShift sizes the arena's chunks (1 MiB): mapped one at a time as
// the arena grows, so its resident size follows its contents.
const coldChunkShift = 20

const coldChunk = 1 << coldChunkShift

// coldHeader is the size of a record's header: kind, record length, key
// length and the key's hash.
const coldHeader = 8

// Record kinds; 0 (a chunk's unused tail) ends a chunk's records.
const (
	coldLive = 1
	coldDead = 2
)

// coldSet is a set of frozen entries: key → index record, in freezing
// order. Not safe for concurrent use (the Cache guards it with mu). Its
// memory is mapped outside the Go heap and returned by release.
type coldSet struct {
	seed   maphash.Seed
	chunks [][]byte // mmapped, coldChunk bytes each
	end    uint64   // where the next record goes
	head   uint64   // no live record is before it
	// table maps hash(key)&mask to pos/8+1 (0: empty), linear probing,
	// deletion by backward shift (no tombstones).
	table []uint32
	mask  uint32
	n     int    // live records
	live  uint64 // bytes of live records
	dead  uint64 // bytes of dead records (compaction reclaims them)
}

// newColdSet returns an empty cold set.
func newColdSet() *coldSet {
	cs := &coldSet{seed: maphash.MakeSeed()}
	cs.table = make([]uint32, 1024)
	cs.mask = 1023
	return cs
}

// len returns the number of live records.
func (cs *coldSet) len() int { return cs.n }

// hash returns the hash of key.
func (cs *coldSet) hash(key []byte) uint32 { return uint32(maphash.Bytes(cs.seed, key)) }

// rec returns the bytes from pos to the end of its chunk.
func (cs *coldSet) rec(pos uint64) []byte {
	return cs.chunks[pos>>coldChunkShift][pos&(coldChunk-1):]
}

// parse returns the record at pos: its kind, key (aliasing the arena:
// valid until the set changes) and encoded index record.
func (cs *coldSet) parse(pos uint64) (kind byte, key, val []byte) {
	b := cs.rec(pos)
	vl, kl := int(b[1]), int(binary.LittleEndian.Uint16(b[2:4]))
	return b[0], b[coldHeader : coldHeader+kl], b[coldHeader+kl : coldHeader+kl+vl]
}

// size returns the bytes the record at pos takes, padding included.
func (cs *coldSet) size(pos uint64) uint64 {
	b := cs.rec(pos)
	return roundUp8(coldHeader + uint64(binary.LittleEndian.Uint16(b[2:4])) + uint64(b[1]))
}

func roundUp8(n uint64) uint64 { return (n + 7) &^ 7 }

// next returns the position of the record after the one at pos (or of the
// next chunk's first), and false at the end of the arena.
func (cs *coldSet) next(pos uint64) (uint64, bool) {
	pos += cs.size(pos)
	if pos >= cs.end {
		return cs.end, false
	}
	if pos&(coldChunk-1) > coldChunk-coldHeader || cs.rec(pos)[0] == 0 {
		pos = (pos>>coldChunkShift + 1) << coldChunkShift
	}
	return pos, pos < cs.end
}

// fits reports whether an entry of key and encoded record val can be frozen.
func fits(key, val []byte) bool {
	return len(key) <= 0xffff && len(val) <= 0xff && coldHeader+len(key)+len(val) <= coldChunk
}

// add appends a live record of key (not in the set) and encoded record val,
// which must fit (see fits), and returns its position.
func (cs *coldSet) add(key, val []byte) (uint64, error) {
	n := roundUp8(coldHeader + uint64(len(key)) + uint64(len(val)))
	if cs.end&(coldChunk-1)+n > coldChunk {
		cs.end = (cs.end>>coldChunkShift + 1) << coldChunkShift
	}
	if int(cs.end>>coldChunkShift) == len(cs.chunks) {
		m, err := unix.Mmap(-1, 0, coldChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return 0, fmt.Errorf("tier: map the cold index: %w", err)
		}
		cs.chunks = append(cs.chunks, m)
	}
	pos := cs.end
	b := cs.rec(pos)
	h := cs.hash(key)
	b[0], b[1] = coldLive, byte(len(val))
	binary.LittleEndian.PutUint16(b[2:4], uint16(len(key)))
	binary.LittleEndian.PutUint32(b[4:8], h)
	copy(b[coldHeader:], key)
	copy(b[coldHeader+len(key):], val)
	cs.end += n
	cs.n++
	cs.live += n
	if uint64(cs.n)*4 > uint64(len(cs.table))*3 {
		cs.rehash(len(cs.table) * 2)
	} else {
		cs.insert(h, pos)
	}
	return pos, nil
}

// insert puts pos, whose key hashes to h, into the table.
func (cs *coldSet) insert(h uint32, pos uint64) {
	for i := h & cs.mask; ; i = (i + 1) & cs.mask {
		if cs.table[i] == 0 {
			cs.table[i] = uint32(pos>>3) + 1
			return
		}
	}
}

// rehash rebuilds the table with size slots from the live records.
func (cs *coldSet) rehash(size int) {
	cs.table = make([]uint32, size)
	cs.mask = uint32(size - 1)
	cs.each(func(pos uint64, _, _ []byte) bool {
		cs.insert(binary.LittleEndian.Uint32(cs.rec(pos)[4:8]), pos)
		return true
	})
}

// find returns the position of key's live record.
func (cs *coldSet) find(key []byte) (uint64, bool) {
	if cs.n == 0 {
		return 0, false
	}
	h := cs.hash(key)
	for i := h & cs.mask; cs.table[i] != 0; i = (i + 1) & cs.mask {
		pos := uint64(cs.table[i]-1) << 3
		b := cs.rec(pos)
		if binary.LittleEndian.Uint32(b[4:8]) != h {
			continue
		}
		if _, k, _ := cs.parse(pos); string(k) == string(key) {
			return pos, true
		}
	}
	return 0, false
}

// findString is find for a string key, without copying it.
func (cs *coldSet) findString(key string) (uint64, bool) {
	return cs.find(unsafe.Slice(unsafe.StringData(key), len(key)))
}

// remove marks the live record at pos dead and takes it out of the table.
func (cs *coldSet) remove(pos uint64) {
	b := cs.rec(pos)
	b[0] = coldDead
	sz := cs.size(pos)
	cs.n--
	cs.live -= sz
	cs.dead += sz
	// Find its slot, then shift back the run after it.
	slot := uint32(pos>>3) + 1
	i := binary.LittleEndian.Uint32(b[4:8]) & cs.mask
	for cs.table[i] != slot {
		i = (i + 1) & cs.mask
	}
	for j := (i + 1) & cs.mask; cs.table[j] != 0; j = (j + 1) & cs.mask {
		home := binary.LittleEndian.Uint32(cs.rec(uint64(cs.table[j]-1) << 3)[4:8]) & cs.mask
		// The entry at j may move to i if its home is not in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			cs.table[i] = cs.table[j]
			i = j
		}
	}
	cs.table[i] = 0
	for cs.head < cs.end && cs.rec(cs.head)[0] != coldLive {
		var ok bool
		if cs.head, ok = cs.next(cs.head); !ok {
			break
		}
	}
}

// each calls fn with the live records in arena order (oldest first) until
// fn returns false. fn must not change the set.
func (cs *coldSet) each(fn func(pos uint64, key, val []byte) bool) {
	for pos, ok := cs.head, cs.head < cs.end; ok; pos, ok = cs.next(pos) {
		if kind, k, v := cs.parse(pos); kind == coldLive && !fn(pos, k, v) {
			return
		}
	}
}

// oldest returns the position of the first live record.
func (cs *coldSet) oldest() (uint64, bool) {
	if cs.n == 0 {
		return 0, false
	}
	return cs.head, true
}

// needsCompaction reports whether dead records take more than the live
// ones (and at least a few chunks).
func (cs *coldSet) needsCompaction() bool {
	return cs.dead > cs.live && cs.dead >= 4*coldChunk
}

// compact rewrites the live records into a fresh arena, in the order of
// positions if given (each live record exactly once) or in arena order, and
// unmaps the old one.
func (cs *coldSet) compact(positions []uint64) error {
	if positions == nil {
		positions = make([]uint64, 0, cs.n)
		cs.each(func(pos uint64, _, _ []byte) bool {
			positions = append(positions, pos)
			return true
		})
	}
	fresh := &coldSet{seed: cs.seed}
	fresh.table = make([]uint32, len(cs.table))
	fresh.mask = cs.mask
	for _, pos := range positions {
		_, k, v := cs.parse(pos)
		if _, err := fresh.add(k, v); err != nil {
			fresh.release()
			return err
		}
	}
	cs.release()
	*cs = *fresh
	return nil
}

// release unmaps the arena; the set is empty afterwards.
func (cs *coldSet) release() {
	for _, m := range cs.chunks {
		_ = unix.Munmap(m) // only fails for a bad address
	}
	cs.chunks = nil
	cs.end, cs.head, cs.n, cs.live, cs.dead = 0, 0, 0, 0, 0
	clear(cs.table)
}
