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
// no hot copy or hot pin, nothing unwritten) are frozen into a coldSet: their
// key and index record in an arena outside the Go heap, ~100 bytes each, a
// 4-byte slot of a hash table and a 4-byte slot of the order list. A use
// thaws an entry back (a lookup, a decode and one allocation); the warm
// set's least recently used entries are frozen again as it grows past its
// bound (see freeze.go).
//
// The order list holds the records in the order they were frozen, which
// is their order of last use (the warm LRU's tail is frozen first, and
// start-up orders them by last access): its first live slot is the cold
// set's least recently used entry, where eviction thaws from. Because the
// order is kept apart from where records lie, the arena is compacted a
// chunk at a time (tidy): a chunk mostly dead has its live records moved
// to the chunk being filled and is unmapped, so the arena stays within a
// third of its contents and never needs a second copy of itself.

// coldChunkShift sizes the arena's chunks (1 MiB), mapped as needed.
const coldChunkShift = 20

const coldChunk = 1 << coldChunkShift

// coldHeader is the size of a record's header: kind, record length, key
// length, the key's hash, and the record's slot in the order list.
const coldHeader = 12

// coldAlign is the alignment of records: table and order slots hold a
// record's position divided by it (plus one), so 32 bits address 16 GiB.
const coldAlign = 4

// Record kinds; 0 (a chunk's unused tail) ends a chunk's records.
const (
	coldLive = 1
	coldDead = 2
)

// coldSet is a set of frozen entries: key → encoded index record, in
// freezing order. Not safe for concurrent use (the Cache guards it with
// mu). Its arena is mapped outside the Go heap and returned by release.
type coldSet struct {
	seed   maphash.Seed
	chunks [][]byte // mmapped coldChunk bytes each; nil once freed
	live   []int    // bytes of live records in each chunk
	free   []int    // freed chunk numbers, for reuse
	cur    int      // the chunk being appended to (-1: none yet)
	end    int      // where in it the next record goes
	// sparse lists chunks that fell below a quarter live (tidy compacts
	// them); inSparse marks them.
	sparse   []int
	inSparse map[int]bool
	// table maps hash(key)&mask to a record's slot value (0: empty);
	// linear probing, deletion by backward shift (no tombstones).
	table []uint32
	mask  uint32
	// order holds the slot values of the records in freezing order; 0 is a
	// record removed since. head is the first slot that may be live.
	order []uint32
	head  int
	stale int // zero slots in order
	n     int // live records
}

// newColdSet returns an empty cold set.
func newColdSet() *coldSet {
	return &coldSet{seed: maphash.MakeSeed(), cur: -1, table: make([]uint32, 1024), mask: 1023,
		inSparse: make(map[int]bool)}
}

// slotOf and posOf convert between arena positions and slot values.
func slotOf(pos uint64) uint32 { return uint32(pos/coldAlign) + 1 }
func posOf(slot uint32) uint64 { return uint64(slot-1) * coldAlign }

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

// recSize returns the bytes a record of key and value lengths takes.
func recSize(kl, vl int) int { return (coldHeader + kl + vl + coldAlign - 1) &^ (coldAlign - 1) }

// size returns the bytes the record at pos takes.
func (cs *coldSet) size(pos uint64) int {
	b := cs.rec(pos)
	return recSize(int(binary.LittleEndian.Uint16(b[2:4])), int(b[1]))
}

// fits reports whether an entry of key and encoded record val can be frozen.
func fits(key, val []byte) bool {
	return len(key) <= 0xffff && len(val) <= 0xff && recSize(len(key), len(val)) <= coldChunk
}

// place returns the position for n more bytes, starting a chunk (a freed
// one if any) when the current one is full.
func (cs *coldSet) place(n int) (uint64, error) {
	if cs.cur < 0 || cs.end+n > coldChunk {
		m, err := unix.Mmap(-1, 0, coldChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return 0, fmt.Errorf("tier: map the cold index: %w", err)
		}
		if k := len(cs.free); k > 0 {
			cs.cur, cs.free = cs.free[k-1], cs.free[:k-1]
			cs.chunks[cs.cur] = m
		} else {
			cs.cur = len(cs.chunks)
			cs.chunks, cs.live = append(cs.chunks, m), append(cs.live, 0)
		}
		cs.end = 0
	}
	pos := uint64(cs.cur)<<coldChunkShift | uint64(cs.end)
	cs.end += n
	cs.live[cs.cur] += n
	return pos, nil
}

// add appends a live record of key (not in the set) and encoded record val,
// which must fit (see fits), as the newest, and returns its position.
func (cs *coldSet) add(key, val []byte) (uint64, error) { return cs.addAt(key, val, false) }

// addAt is add, the record going first in the order if oldest (older than
// every record in the set), else last.
func (cs *coldSet) addAt(key, val []byte, oldest bool) (uint64, error) {
	n := recSize(len(key), len(val))
	pos, err := cs.place(n)
	if err != nil {
		return 0, err
	}
	b := cs.rec(pos)
	h := cs.hash(key)
	b[0], b[1] = coldLive, byte(len(val))
	binary.LittleEndian.PutUint16(b[2:4], uint16(len(key)))
	binary.LittleEndian.PutUint32(b[4:8], h)
	copy(b[coldHeader:], key)
	copy(b[coldHeader+len(key):], val)
	if oldest {
		if cs.head == 0 {
			cs.roomAhead()
		}
		cs.head--
		cs.order[cs.head] = slotOf(pos)
		binary.LittleEndian.PutUint32(b[8:12], uint32(cs.head))
	} else {
		binary.LittleEndian.PutUint32(b[8:12], uint32(len(cs.order)))
		cs.order = append(cs.order, slotOf(pos))
	}
	cs.n++
	if uint64(cs.n)*4 > uint64(len(cs.table))*3 {
		cs.rehash(len(cs.table) * 2)
	} else {
		cs.insert(h, slotOf(pos))
	}
	return pos, nil
}

// roomAhead makes free slots before the order's head (a quarter of its
// length, at least 1024), renumbering the records' slots.
func (cs *coldSet) roomAhead() {
	extra := max(1024, len(cs.order)/4)
	order := make([]uint32, extra+len(cs.order)-cs.head, extra+len(cs.order)-cs.head+len(cs.order)/4)
	for i, slot := range cs.order[cs.head:] {
		order[extra+i] = slot
		if slot != 0 {
			binary.LittleEndian.PutUint32(cs.rec(posOf(slot))[8:12], uint32(extra+i))
		}
	}
	cs.order, cs.head = order, extra
}

// insert puts slot, whose key hashes to h, into the table.
func (cs *coldSet) insert(h, slot uint32) {
	for i := h & cs.mask; ; i = (i + 1) & cs.mask {
		if cs.table[i] == 0 {
			cs.table[i] = slot
			return
		}
	}
}

// hashAt returns the stored hash of the record in slot.
func (cs *coldSet) hashAt(slot uint32) uint32 {
	return binary.LittleEndian.Uint32(cs.rec(posOf(slot))[4:8])
}

// rehash rebuilds the table with size slots from the live records.
func (cs *coldSet) rehash(size int) {
	cs.table = make([]uint32, size)
	cs.mask = uint32(size - 1)
	for _, slot := range cs.order[cs.head:] {
		if slot != 0 {
			cs.insert(cs.hashAt(slot), slot)
		}
	}
}

// tableIndex returns the table index holding slot.
func (cs *coldSet) tableIndex(slot uint32) uint32 {
	i := cs.hashAt(slot) & cs.mask
	for cs.table[i] != slot {
		i = (i + 1) & cs.mask
	}
	return i
}

// find returns the position of key's live record.
func (cs *coldSet) find(key []byte) (uint64, bool) {
	if cs.n == 0 {
		return 0, false
	}
	h := cs.hash(key)
	for i := h & cs.mask; cs.table[i] != 0; i = (i + 1) & cs.mask {
		slot := cs.table[i]
		if cs.hashAt(slot) != h {
			continue
		}
		if _, k, _ := cs.parse(posOf(slot)); string(k) == string(key) {
			return posOf(slot), true
		}
	}
	return 0, false
}

// findString is find for a string key, without copying it.
func (cs *coldSet) findString(key string) (uint64, bool) {
	return cs.find(unsafe.Slice(unsafe.StringData(key), len(key)))
}

// remove marks the live record at pos dead and takes it out of the table
// and the order. Nothing moves: positions held by the caller stay valid
// until the next tidy.
func (cs *coldSet) remove(pos uint64) {
	b := cs.rec(pos)
	b[0] = coldDead
	cs.n--
	cs.order[binary.LittleEndian.Uint32(b[8:12])] = 0
	cs.stale++
	chunk := int(pos >> coldChunkShift)
	if cs.live[chunk] -= cs.size(pos); cs.live[chunk] < coldChunk/4 && !cs.inSparse[chunk] {
		cs.inSparse[chunk] = true
		cs.sparse = append(cs.sparse, chunk)
	}
	// Shift back the run after the record's table slot.
	i := cs.tableIndex(slotOf(pos))
	for j := (i + 1) & cs.mask; cs.table[j] != 0; j = (j + 1) & cs.mask {
		home := cs.hashAt(cs.table[j]) & cs.mask
		// The slot at j may move to i if its home is not in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			cs.table[i] = cs.table[j]
			i = j
		}
	}
	cs.table[i] = 0
}

// each calls fn with the live records in order (oldest first) until fn
// returns false. fn must not change the set.
func (cs *coldSet) each(fn func(pos uint64, key, val []byte) bool) {
	for _, slot := range cs.order[cs.head:] {
		if slot == 0 {
			continue
		}
		if _, k, v := cs.parse(posOf(slot)); !fn(posOf(slot), k, v) {
			return
		}
	}
}

// oldest returns the position of the oldest live record.
func (cs *coldSet) oldest() (uint64, bool) {
	for cs.head < len(cs.order) && cs.order[cs.head] == 0 {
		cs.head++
		cs.stale--
	}
	if cs.head == len(cs.order) {
		return 0, false
	}
	return posOf(cs.order[cs.head]), true
}

// reorder makes the n positions at(0), …, at(n-1) (each live record
// exactly once) the order.
func (cs *coldSet) reorder(n int, at func(i int) uint64) {
	order := make([]uint32, n)
	for i := range n {
		pos := at(i)
		order[i] = slotOf(pos)
		binary.LittleEndian.PutUint32(cs.rec(pos)[8:12], uint32(i))
	}
	cs.order, cs.head, cs.stale = order, 0, 0
}

// tidy compacts the chunks that fell below a quarter live (their live
// records move to the chunk being filled; the chunk is unmapped for reuse)
// and the order list once it is half removed slots. Positions held by the
// caller are invalid afterwards.
func (cs *coldSet) tidy() error {
	for i := 0; i < len(cs.sparse); {
		chunk := cs.sparse[i]
		if chunk == cs.cur { // compacted once it is no longer the chunk being filled
			i++
			continue
		}
		if cs.live[chunk] < coldChunk/4 {
			if err := cs.evacuate(chunk); err != nil {
				return err
			}
		}
		delete(cs.inSparse, chunk)
		cs.sparse[i] = cs.sparse[len(cs.sparse)-1]
		cs.sparse = cs.sparse[:len(cs.sparse)-1]
	}
	if cs.stale > 1024 && cs.stale*2 > len(cs.order) {
		order := make([]uint32, 0, cs.n+cs.n/4)
		for _, slot := range cs.order[cs.head:] {
			if slot != 0 {
				binary.LittleEndian.PutUint32(cs.rec(posOf(slot))[8:12], uint32(len(order)))
				order = append(order, slot)
			}
		}
		cs.order, cs.head, cs.stale = order, 0, 0
	}
	return nil
}

// evacuate moves the live records of chunk to the chunk being filled and
// unmaps it.
func (cs *coldSet) evacuate(chunk int) error {
	m := cs.chunks[chunk]
	for off := 0; off+coldHeader <= coldChunk && m[off] != 0; {
		old := uint64(chunk)<<coldChunkShift | uint64(off)
		n := cs.size(old)
		if m[off] == coldLive {
			pos, err := cs.place(n)
			if err != nil {
				return err
			}
			copy(cs.rec(pos)[:n], m[off:off+n])
			cs.table[cs.tableIndex(slotOf(old))] = slotOf(pos)
			cs.order[binary.LittleEndian.Uint32(m[off+8:off+12])] = slotOf(pos)
		}
		off += n
	}
	if err := unix.Munmap(m); err != nil {
		return fmt.Errorf("tier: unmap a cold index chunk: %w", err)
	}
	cs.chunks[chunk], cs.live[chunk] = nil, 0
	cs.free = append(cs.free, chunk)
	return nil
}

// release unmaps the arena; the set is empty afterwards.
func (cs *coldSet) release() {
	for _, m := range cs.chunks {
		if m != nil {
			_ = unix.Munmap(m) // only fails for a bad address
		}
	}
	*cs = coldSet{seed: cs.seed, cur: -1, table: make([]uint32, 1024), mask: 1023, inSparse: make(map[int]bool)}
}
