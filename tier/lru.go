package tier

import (
	"cmp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/object"
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
	// frozen: a base entry moved into the cold set (see freeze.go); the
	// object is still cached, under a thawed entry when next used. An
	// *entry held across an unlock is resolved with currentLocked.
	frozen
)

// entry is one copy of one cached generation of an object: a base entry
// (the object's copy in the base tier, indexed) or a hot copy (its copy in
// the shm tier, owned by a base entry). key, st, owner, id and ident are
// immutable; every other field is guarded by Cache.mu.
//
// A cache holds one entry per cached object (two with a shm copy), so its
// size is the index's footprint: keep it small and its pointers few (the
// garbage collector traces them all at every cycle). The LRU links are
// intrusive (lruList) for that reason.
type entry struct {
	key   string    // bucket + "\x00" + name
	st    *store    // the tier holding the file
	owner *entry    // for a hot copy, its base entry; nil for base entries
	id    fileID    // data file name
	ident fileIdent // the file as published (own files; unused when packed)
	// seg is the segment holding a packed copy's bytes (at rec.off); nil
	// for a copy in a file of its own.
	seg *segment
	// stale is the flag that handles opened on this copy report (Handle.
	// Stale), created by the first handle (most cached objects are never
	// opened while cached: see staleFlagLocked). It is set, never cleared,
	// when the copy stops being the best one: it left the cache, or (base
	// entries) a hot copy was published. When a base entry's hot copy goes
	// away, a fresh flag replaces it for new handles; the old one stays set
	// for the old handles.
	stale *atomic.Bool
	rec   record // persisted fields; rec.gen and rec.size are immutable
	// prev and next link the copy into st.lru (see lruList); both are nil
	// when it is pinned or not live.
	prev, next *entry
	hot        *entry // base entries: the live hot copy, if any
	refs       int32  // open handles
	// Promotion on hits (base entries): winHits Opens since winStart (unix
	// ns); promoting is set while a promotion is queued or running.
	winHits  int32
	winStart int64
	// dirty is set when persisted fields that the flusher writes (access
	// and check times, the in-shm flag) changed since the last index write;
	// Cache.dirty lists the entries it is set on (markDirtyLocked).
	dirty bool
	// unsynced is set on a packed copy that is live before its segment is
	// synced: only the packer writes its record, after the fdatasync (see
	// commitGroup); it stays dirty, so it is not frozen, until then.
	unsynced bool
	state    entryState
	// doomed copies were dropped (Evict, Demote, a damaged file) while in
	// use: no new handle is given on them, even by exact generation.
	doomed bool
	// detached is set on a zombie whose path a newer copy took over.
	detached bool
	// keepBytes is set on a dropped packed copy whose record could not
	// be deleted: its region is not punched (see deleteRecords).
	keepBytes bool
	// transient is set on a copy outside the cache (see transientLocked)
	// before its fill returns it, and never changes after; fillHold is set
	// on it while the reference its fill holds is not yet handed over.
	transient, fillHold bool
	promoting           bool
	// staleSet is the value a stale flag created now starts with.
	staleSet bool
	// owned caches ownership.keepLocked's answer for ownership version
	// ownVer (0: not asked yet).
	owned  bool
	ownVer uint32
	// counted records that the copy's blocks are in st.inUse (see
	// syncInUseLocked).
	counted bool
	// keep counts operations using the entry outside mu (a promotion, a
	// verification): it is not frozen meanwhile.
	keep int32
}

// newEntry returns a base entry for a freshly published file in st.
func newEntry(st *store, a object.Attrs, blocks int64, ident fileIdent, now int64) *entry {
	var updated int64
	if !a.Updated.IsZero() {
		updated = a.Updated.UnixNano()
	}
	return &entry{
		key: indexKey(a.Bucket, a.Name), st: st, id: idOf(a.Bucket, a.Name, a.Generation), ident: ident,
		rec: record{gen: a.Generation, size: a.Size, blocks: blocks, crc: a.CRC32C, hasCRC: a.HasCRC32C,
			updated: updated, checked: now, access: now},
	}
}

// attrs returns the object's attributes (immutable fields only).
func (e *entry) attrs() object.Attrs {
	// Field by field: the others (access times) change under Cache.mu,
	// which the callers need not hold.
	return recAttrs(e.key, record{gen: e.rec.gen, size: e.rec.size, crc: e.rec.crc, hasCRC: e.rec.hasCRC,
		updated: e.rec.updated})
}

// recAttrs returns the attributes of the object of index key key with
// record r.
func recAttrs(key string, r record) object.Attrs {
	bucket, name, _ := splitKey(key)
	a := object.Attrs{Object: object.Object{Bucket: bucket, Name: name, Generation: r.gen},
		Size: r.size, CRC32C: r.crc, HasCRC32C: r.hasCRC}
	if r.updated != 0 {
		a.Updated = time.Unix(0, r.updated)
	}
	return a
}

// markStaleLocked tells the handles on copy e, and any opened on it later,
// that the cache has moved on from it.
func (e *entry) markStaleLocked() {
	e.staleSet = true
	if e.stale != nil {
		e.stale.Store(true)
	}
}

// renewStaleLocked gives the handles opened on e from now on a fresh flag
// (e is the best copy again); those opened before keep theirs, set.
func (e *entry) renewStaleLocked() { e.stale, e.staleSet = nil, false }

// staleFlagLocked returns the flag a new handle on e reports, creating it
// on first use.
func (e *entry) staleFlagLocked() *atomic.Bool {
	if e.stale == nil {
		e.stale = new(atomic.Bool)
		e.stale.Store(e.staleSet)
	}
	return e.stale
}

// inUseLocked reports open handles on e or on its hot copy.
func (e *entry) inUseLocked() bool { return e.refs > 0 || (e.hot != nil && e.hot.refs > 0) }

// linked reports whether e is in its store's LRU: live and not pinned.
func (e *entry) linked() bool { return e.next != nil }

// syncInUseLocked brings e.st.inUse up to date with copy e: its blocks
// count there while it is live, unpinned and in use (for a base entry,
// also when its hot copy is). Every change to those (handles, pins, hot
// copies, leaving the cache) is followed by a call; extra calls are
// harmless.
func (e *entry) syncInUseLocked() {
	now := e.state == live && e.linked() && e.inUseLocked()
	if now == e.counted {
		return
	}
	e.counted = now
	if now {
		e.st.inUse += e.rec.blocks
	} else {
		e.st.inUse -= e.rec.blocks
		if e.st.wakeOnRelease {
			e.st.wakeOnRelease = false
			e.st.signalLocked()
		}
	}
}

// syncObjectLocked brings the in-use accounting of base entry e and of its
// hot copy up to date.
func syncObjectLocked(e *entry) {
	e.syncInUseLocked()
	if e.hot != nil {
		e.hot.syncInUseLocked()
	}
}

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
	Attrs object.Attrs
	// Tier is the fastest tier holding the object: Shm or Disk.
	Tier Kind
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
	c.base.copies++
	if e.rec.pinned {
		c.base.pinnedBytes += e.rec.blocks
	} else {
		c.base.lru.pushFront(e)
	}
	e.syncInUseLocked()
}

// touchLocked records a use of base entry e at now (unix ns).
func (c *Cache) touchLocked(e *entry, now int64) {
	e.rec.access = now
	c.markDirtyLocked(e)
	if e.linked() {
		c.base.lru.moveToFront(e)
	}
	if h := e.hot; h != nil && h.linked() {
		c.hot.lru.moveToFront(h)
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
	for _, e := range es {
		syncObjectLocked(e)
	}
}

// movePinLocked moves live copy e out of the LRU (pinned) or appends it to
// unlinked, for the caller to link back by access time.
func (st *store) movePinLocked(e *entry, pinned bool, unlinked []*entry) []*entry {
	if pinned {
		st.pinnedBytes += e.rec.blocks
		st.lru.remove(e)
		return unlinked
	}
	st.pinnedBytes -= e.rec.blocks
	return append(unlinked, e)
}

// linkByAccessLocked puts unlinked live copies into the LRU where their
// last use places them, in one pass over the list.
func (st *store) linkByAccessLocked(es []*entry) {
	slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.lastUseLocked(), b.lastUseLocked()) })
	// Walk from the least recently used end; cur is the oldest copy newer
	// than the one being placed (nil: none is).
	cur := st.lru.back()
	for _, e := range es {
		for cur != nil && cur.lastUseLocked() <= e.lastUseLocked() {
			cur = st.lru.prev(cur)
		}
		if cur == nil {
			st.lru.pushFront(e)
		} else {
			st.lru.insertAfter(e, cur)
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
	c.plans.gen++ // a planned copy may be gone: the planner walks its plans whole
	c.base.copies--
	if e.linked() {
		c.base.lru.remove(e)
	}
	if e.rec.pinned {
		c.base.pinnedBytes -= e.rec.blocks
	}
	e.doomed = doomed
	dead = c.retireLocked(e, dead)
	e.syncInUseLocked()
	return dead
}

// retireLocked ends the life of a copy that left the cache: with handles
// open it becomes a zombie; otherwise it is buried and appended to dead.
func (c *Cache) retireLocked(e *entry, dead []*entry) []*entry {
	e.markStaleLocked()
	if e.refs == 0 {
		c.buryLocked(e)
		return append(dead, e)
	}
	e.state = zombie
	e.st.pending += e.rec.blocks
	if old := e.st.zombies[e.id]; old != nil {
		if e.seg != nil && old.seg == nil {
			// old keeps its file's path; e, whose bytes are in a
			// segment, waits apart and frees its own region.
			e.detached = true
			e.st.detached[e] = struct{}{}
			return dead
		}
		// The id is e's now; old's path too unless old is packed (a
		// packed detached zombie still frees its region).
		old.detached = true
		e.st.detached[old] = struct{}{}
	}
	e.st.zombies[e.id] = e
	return dead
}

// buryLocked marks e gone and registers its deletion; removeFiles finishes it.
// A packed copy's deletion (a hole punched in its segment) frees no path,
// so it is not registered.
func (c *Cache) buryLocked(e *entry) {
	e.markStaleLocked()
	e.state = gone
	e.st.used -= e.rec.blocks
	if e.seg != nil {
		return
	}
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
	if st.plans.active() { // the plans see frozen entries themselves
		return st.plans.victimsLocked(st, need, skip)
	}
	if st.cold.thawOld == nil || need <= 0 {
		return st.pickVictimsLocked(need, skip)
	}
	thawed := st.cold.thawOld(need)
	victims, freed = st.pickVictimsLocked(need, skip)
	st.cold.refreeze(thawed, victims)
	return victims, freed
}

// pickVictimsLocked is lruVictimsLocked over the LRU as it is.
func (st *store) pickVictimsLocked(need int64, skip *entry) (victims []*entry, freed int64) {
	if st.plans.active() {
		return st.plans.victimsLocked(st, need, skip)
	}
	if st.own.owns != nil {
		return st.lruOwnedVictimsLocked(need, skip)
	}
	for e := st.lru.back(); e != nil && freed < need; e = st.lru.prev(e) {
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
// pinned copies, and copies (or zombies) with open handles. O(1): the
// store keeps these counts as copies change.
func (st *store) fixedBytesLocked() (pinned, inUse int64) {
	return st.pinnedBytes, st.inUse + st.pending
}

// committedLocked returns the space the budget has given out: copies,
// reservations and holds.
func (st *store) committedLocked() int64 { return st.used + st.reserved + st.held }
