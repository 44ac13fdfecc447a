package tier

import (
	"cmp"
	"container/list"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/fetch"
)

// entryState is where a copy is in its life.
type entryState uint8

const (
	// live: served. A base entry is in Cache.entries and indexed; a hot
	// copy is its owner's hot.
	live entryState = iota
	// zombie: dropped while handles were open; the file stays until the
	// last handle closes. In its store's zombies (or detached).
	zombie
	// gone: the file is deleted or being deleted (see store.deleting).
	gone
)

// entry is one copy of one cached generation of an object: a base entry
// (the object's copy in the base tier, indexed) or a hot copy (its copy in
// the shm tier, owned by a base entry). key, st, owner, id and ident are
// immutable; every other field is guarded by Cache.mu.
type entry struct {
	key   string    // bucket + "\x00" + name
	st    *store    // the tier holding the file
	owner *entry    // for a hot copy, its base entry; nil for base entries
	id    fileID    // data file name
	ident fileIdent // the file as published
	// stale is the flag that handles opened on this copy report (Handle.
	// Stale). It is set, never cleared, when the copy stops being the best
	// one: it left the cache, or (base entries) a hot copy was published.
	// When a base entry's hot copy goes away, a fresh flag replaces it for
	// new handles; the old one stays set for the old handles.
	stale *atomic.Bool
	rec   record // persisted fields; rec.gen and rec.size are immutable
	refs  int32  // open handles
	// dirty is set when persisted fields that the flusher writes (access
	// and check times, the in-shm flag) changed since the last index write.
	dirty bool
	state entryState
	// doomed copies were dropped (Evict, Demote, a damaged file) while in
	// use: no new handle is given on them, even by exact generation.
	doomed bool
	// detached is set on a zombie whose path a newer copy took over.
	detached bool
	elem     *list.Element // position in st.lru; nil when pinned or not live
	hot      *entry        // base entries: the live hot copy, if any
	// Promotion on hits (base entries): promoting is set while a promotion
	// is queued or running; winHits Opens since winStart (unix ns).
	promoting bool
	winHits   int32
	winStart  int64
}

// newEntry returns a base entry for a freshly published file in st.
func newEntry(st *store, a fetch.Attrs, blocks int64, ident fileIdent, now int64) *entry {
	var updated int64
	if !a.Updated.IsZero() {
		updated = a.Updated.UnixNano()
	}
	return &entry{
		key: indexKey(a.Bucket, a.Name), st: st, id: idOf(a.Bucket, a.Name, a.Generation), ident: ident,
		stale: new(atomic.Bool),
		rec: record{gen: a.Generation, size: a.Size, blocks: blocks, crc: a.CRC32C, hasCRC: a.HasCRC32C,
			updated: updated, checked: now, access: now},
	}
}

// attrs returns the object's attributes (immutable fields only).
func (e *entry) attrs() fetch.Attrs {
	bucket, name, _ := splitKey(e.key)
	a := fetch.Attrs{Object: fetch.Object{Bucket: bucket, Name: name, Generation: e.rec.gen},
		Size: e.rec.size, CRC32C: e.rec.crc, HasCRC32C: e.rec.hasCRC}
	if e.rec.updated != 0 {
		a.Updated = time.Unix(0, e.rec.updated)
	}
	return a
}

// inUseLocked reports open handles on e or on its hot copy.
func (e *entry) inUseLocked() bool { return e.refs > 0 || (e.hot != nil && e.hot.refs > 0) }

// lastUseLocked is the last access of the object e copies.
func (e *entry) lastUseLocked() int64 {
	if e.owner != nil {
		return e.owner.rec.access
	}
	return e.rec.access
}

// Entry describes one cached object. It is a snapshot.
type Entry struct {
	// Attrs are the cached generation's attributes.
	Attrs fetch.Attrs
	// Tier is the fastest tier holding the object: Shm or Disk.
	Tier string
	// Pinned entries are never evicted to make room.
	Pinned bool
	// PinnedHot entries are pinned and kept in the shm tier too.
	PinnedHot bool
	// InUse reports open handles.
	InUse bool
	// Blocks is the space the base tier's file occupies, in bytes
	// (st_blocks*512); ShmBlocks the shm copy's (0 if none, or shm-only).
	Blocks, ShmBlocks int64
	// LastAccess is when the object was last opened or prefetched.
	LastAccess time.Time
	// CheckedAt is when the generation was last confirmed at the source.
	CheckedAt time.Time
}

// snapshotLocked returns base entry e as an Entry.
func (e *entry) snapshotLocked() Entry {
	s := Entry{Attrs: e.attrs(), Tier: e.st.name, Pinned: e.rec.pinned, PinnedHot: e.rec.hotPin,
		InUse: e.inUseLocked(), Blocks: e.rec.blocks,
		LastAccess: time.Unix(0, e.rec.access), CheckedAt: time.Unix(0, e.rec.checked)}
	if e.hot != nil {
		s.Tier, s.ShmBlocks = e.hot.st.name, e.hot.rec.blocks
	}
	return s
}

// installLocked makes base entry e live: indexed under its key and id,
// accounted, and at the most recently used end of the LRU unless pinned.
func (c *Cache) installLocked(e *entry) {
	e.state = live
	c.entries[e.key] = e
	c.byID[e.id] = e
	c.base.used += e.rec.blocks
	if e.rec.pinned {
		c.base.pinnedBytes += e.rec.blocks
	} else {
		e.elem = c.base.lru.PushFront(e)
	}
}

// touchLocked records a use of base entry e at now (unix ns).
func (c *Cache) touchLocked(e *entry, now int64) {
	e.rec.access = now
	e.dirty = true
	if e.elem != nil {
		c.base.lru.MoveToFront(e.elem)
	}
	if h := e.hot; h != nil && h.elem != nil {
		c.hot.lru.MoveToFront(h.elem)
	}
}

// setPinsLocked applies pin to the records of live base entries and moves
// them, and their hot copies, out of or into the LRUs to match.
func (c *Cache) setPinsLocked(es []*entry, pin func(r *record)) {
	var unpinned, unpinnedHot []*entry
	for _, e := range es {
		was := e.rec
		pin(&e.rec)
		if e.rec.pinned != was.pinned {
			unpinned = c.base.movePinLocked(e, e.rec.pinned, unpinned)
		}
		if e.hot != nil && e.rec.hotPin != was.hotPin {
			unpinnedHot = c.hot.movePinLocked(e.hot, e.rec.hotPin, unpinnedHot)
		}
	}
	c.base.linkByAccessLocked(unpinned)
	if c.hot != nil {
		c.hot.linkByAccessLocked(unpinnedHot)
	}
}

// movePinLocked moves live copy e out of the LRU (pinned) or appends it to
// unlinked, for the caller to link back by access time.
func (st *store) movePinLocked(e *entry, pinned bool, unlinked []*entry) []*entry {
	if pinned {
		st.pinnedBytes += e.rec.blocks
		st.lru.Remove(e.elem)
		e.elem = nil
		return unlinked
	}
	st.pinnedBytes -= e.rec.blocks
	return append(unlinked, e)
}

// linkByAccessLocked puts unlinked live copies into the LRU where their
// last use places them, in one pass over the list.
func (st *store) linkByAccessLocked(es []*entry) {
	slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.lastUseLocked(), b.lastUseLocked()) })
	// Walk from the least recently used end; cur is the oldest element
	// newer than the entry being placed (nil: none is).
	cur := st.lru.Back()
	for _, e := range es {
		for cur != nil && cur.Value.(*entry).lastUseLocked() <= e.lastUseLocked() {
			cur = cur.Prev()
		}
		if cur == nil {
			e.elem = st.lru.PushFront(e)
		} else {
			e.elem = st.lru.InsertAfter(e, cur)
		}
	}
}

// dropLocked takes live base entry e, and its hot copy, out of the cache.
// doomed forbids new handles on e even by exact generation (Evict, a damaged
// file). Copies without open handles are buried and appended to dead, which
// it returns: the caller passes them to removeFiles. Copies with handles
// become zombies, deleted by their last Handle.Close. The caller also
// removes e's index record unless a new record replaced it.
func (c *Cache) dropLocked(e *entry, doomed bool, dead []*entry) []*entry {
	if e.hot != nil {
		dead = c.unhotLocked(e, dead)
	}
	delete(c.entries, e.key)
	if c.byID[e.id] == e {
		delete(c.byID, e.id)
	}
	if e.elem != nil {
		c.base.lru.Remove(e.elem)
		e.elem = nil
	}
	if e.rec.pinned {
		c.base.pinnedBytes -= e.rec.blocks
	}
	e.doomed = doomed
	return c.retireLocked(e, dead)
}

// retireLocked ends the life of a copy that left the cache: with handles
// open it becomes a zombie; otherwise it is buried and appended to dead.
func (c *Cache) retireLocked(e *entry, dead []*entry) []*entry {
	e.stale.Store(true)
	if e.refs == 0 {
		c.buryLocked(e)
		return append(dead, e)
	}
	e.state = zombie
	if old := e.st.zombies[e.id]; old != nil { // its path is e's now
		old.detached = true
		e.st.detached[old] = struct{}{}
	}
	e.st.zombies[e.id] = e
	return dead
}

// buryLocked marks e gone and registers its deletion; removeFiles finishes it.
func (c *Cache) buryLocked(e *entry) {
	e.stale.Store(true)
	e.state = gone
	e.st.used -= e.rec.blocks
	if _, ok := e.st.deleting[e.id]; !ok {
		e.st.deleting[e.id] = make(chan struct{})
	}
}

// lruVictimsLocked walks st's LRU from its least recently used end and
// returns unused copies (never pinned ones: they are not in the LRU) whose
// blocks add up to at least need, or all it found if there are not enough.
// A base entry is in use if its hot copy is. skip is never chosen. While
// access plans are announced the same copies are taken in the plans' order
// instead (see plans.victimsLocked).
func (st *store) lruVictimsLocked(need int64, skip *entry) (victims []*entry, freed int64) {
	if st.plans.active() {
		return st.plans.victimsLocked(st, need, skip)
	}
	for el := st.lru.Back(); el != nil && freed < need; el = el.Prev() {
		e := el.Value.(*entry)
		if e.inUseLocked() || e == skip {
			continue
		}
		victims = append(victims, e)
		freed += e.rec.blocks
	}
	return victims, freed
}

// evictLocked drops base victims (all unused, so all dead), counts them and
// returns dead with their files (and their hot copies') appended.
func (c *Cache) evictLocked(victims []*entry, dead []*entry) []*entry {
	for _, v := range victims {
		dead = c.dropLocked(v, false, dead)
		c.stats.evictions++
	}
	return dead
}

// fixedBytesLocked returns the bytes of st that eviction cannot free now:
// pinned copies, and copies (or zombies) with open handles.
func (c *Cache) fixedBytesLocked(st *store) (pinned, inUse int64) {
	for _, e := range c.entries {
		if st == c.hot {
			e = e.hot
		}
		if e != nil && e.elem != nil && e.inUseLocked() {
			inUse += e.rec.blocks
		}
	}
	return st.pinnedBytes, inUse + st.pendingBytesLocked()
}

// checkInvariantsLocked verifies the accounting; tests call it at quiescent
// points.
//
// INVARIANT: in each store, used = blocks of live copies + zombies +
// detached zombies (+ gone copies whose deletion is still registered), and
// pinnedBytes = blocks of pinned live copies; the LRU holds exactly the live
// unpinned copies. Zombies have refs > 0. byID indexes exactly the entries.
// A base entry has a hot copy iff its record says inShm; hotPin implies
// pinned.
func (c *Cache) checkInvariantsLocked() error {
	errs := c.checkStoreLocked(c.base, func(yield func(*entry) bool) {
		for _, e := range c.entries {
			if !yield(e) {
				return
			}
		}
	})
	if c.hot != nil {
		errs = append(errs, c.checkStoreLocked(c.hot, func(yield func(*entry) bool) {
			for _, e := range c.entries {
				if e.hot != nil && !yield(e.hot) {
					return
				}
			}
		})...)
	}
	if len(c.byID) != len(c.entries) {
		errs = append(errs, fmt.Errorf("byID has %d entries; want %d", len(c.byID), len(c.entries)))
	}
	for k, e := range c.entries {
		if e.key != k || c.byID[e.id] != e || e.st != c.base || e.owner != nil {
			errs = append(errs, fmt.Errorf("entry %q: misfiled", k))
		}
		if e.rec.inShm != (e.hot != nil) || (e.rec.hotPin && !e.rec.pinned) {
			errs = append(errs, fmt.Errorf("entry %q: inShm %v hotPin %v pinned %v with hot copy %v",
				k, e.rec.inShm, e.rec.hotPin, e.rec.pinned, e.hot != nil))
		}
		if h := e.hot; h != nil && (h.owner != e || h.st != c.hot || h.id != e.id) {
			errs = append(errs, fmt.Errorf("entry %q: hot copy misfiled", k))
		}
	}
	return errors.Join(errs...)
}

// checkStoreLocked checks one store's accounting against its live copies.
func (c *Cache) checkStoreLocked(st *store, copies func(yield func(*entry) bool)) []error {
	var errs []error
	var used, pinned int64
	n, unpinned := 0, 0
	for e := range copies {
		n++
		used += e.rec.blocks
		isPinned := e.rec.pinned
		if e.owner != nil {
			isPinned = e.owner.rec.hotPin
		}
		if isPinned {
			pinned += e.rec.blocks
		} else {
			unpinned++
		}
		if e.state != live || (e.elem == nil) != isPinned {
			errs = append(errs, fmt.Errorf("%s copy %s: state %d, pinned %v, in LRU %v", st.name, e.id, e.state, isPinned, e.elem != nil))
		}
	}
	for id, e := range st.zombies {
		if e.id != id || e.state != zombie || e.refs <= 0 || e.detached {
			errs = append(errs, fmt.Errorf("%s zombie %s: state %d refs %d", st.name, id, e.state, e.refs))
		}
		used += e.rec.blocks
	}
	for e := range st.detached {
		if e.state != zombie || e.refs <= 0 || !e.detached {
			errs = append(errs, fmt.Errorf("%s detached zombie %s: state %d refs %d", st.name, e.id, e.state, e.refs))
		}
		used += e.rec.blocks
	}
	if got := st.lru.Len(); got != unpinned {
		errs = append(errs, fmt.Errorf("%s lru has %d copies; want %d", st.name, got, unpinned))
	}
	if len(st.deleting) == 0 && used != st.used {
		errs = append(errs, fmt.Errorf("%s used = %d; copies add up to %d", st.name, st.used, used))
	}
	if pinned != st.pinnedBytes {
		errs = append(errs, fmt.Errorf("%s pinnedBytes = %d; copies add up to %d", st.name, st.pinnedBytes, pinned))
	}
	if st.reserved < 0 {
		errs = append(errs, fmt.Errorf("%s reserved = %d", st.name, st.reserved))
	}
	return errs
}
