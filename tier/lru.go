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

// entryState is where an entry is in its life.
type entryState uint8

const (
	// live: in Cache.entries, indexed, file present.
	live entryState = iota
	// zombie: replaced or dropped while handles were open; the file stays
	// until the last handle closes. Not indexed; in Cache.zombies.
	zombie
	// gone: the file is deleted or being deleted (see Cache.deleting).
	gone
)

// entry is one cached generation of an object. All fields except key and id
// are guarded by Cache.mu.
type entry struct {
	key string // bucket + "\x00" + name; immutable
	// stale is set, never cleared, when the entry stops being live: a
	// handle's holder then knows a fresher or better copy may exist. Read
	// without Cache.mu (Handle.Stale).
	stale atomic.Bool
	id    fileID // data file name; immutable
	rec   record // persisted fields; rec.gen and rec.size are immutable
	refs  int32  // open handles
	// dirty is set when rec.access or rec.checked changed since the last
	// index write.
	dirty bool
	state entryState
	elem  *list.Element // position in Cache.lru; nil when pinned or not live
}

// newEntry returns a live entry for a freshly published file.
func newEntry(a fetch.Attrs, blocks int64, now int64) *entry {
	var updated int64
	if !a.Updated.IsZero() {
		updated = a.Updated.UnixNano()
	}
	return &entry{
		key: indexKey(a.Bucket, a.Name),
		id:  idOf(a.Bucket, a.Name, a.Generation),
		rec: record{gen: a.Generation, size: a.Size, blocks: blocks, crc: a.CRC32C, hasCRC: a.HasCRC32C,
			updated: updated, checked: now, access: now},
	}
}

// attrs returns the object's attributes. Needs Cache.mu for rec.
func (e *entry) attrs() fetch.Attrs {
	bucket, name, _ := splitKey(e.key)
	a := fetch.Attrs{Object: fetch.Object{Bucket: bucket, Name: name, Generation: e.rec.gen},
		Size: e.rec.size, CRC32C: e.rec.crc, HasCRC32C: e.rec.hasCRC}
	if e.rec.updated != 0 {
		a.Updated = time.Unix(0, e.rec.updated)
	}
	return a
}

// Entry describes one cached object. It is a snapshot.
type Entry struct {
	// Attrs are the cached generation's attributes.
	Attrs fetch.Attrs
	// Tier is the tier holding the object: "disk".
	Tier string
	// Pinned entries are never evicted to make room.
	Pinned bool
	// InUse reports open handles.
	InUse bool
	// Blocks is the space the file occupies, in bytes (st_blocks*512).
	Blocks int64
	// LastAccess is when the object was last opened or prefetched.
	LastAccess time.Time
	// CheckedAt is when the generation was last confirmed at the source.
	CheckedAt time.Time
}

// snapshotLocked returns e as an Entry.
func (e *entry) snapshotLocked() Entry {
	return Entry{Attrs: e.attrs(), Tier: "disk", Pinned: e.rec.pinned, InUse: e.refs > 0,
		Blocks: e.rec.blocks, LastAccess: time.Unix(0, e.rec.access), CheckedAt: time.Unix(0, e.rec.checked)}
}

// installLocked makes e live: indexed under its key, accounted, and at the
// most recently used end of the LRU unless pinned.
func (c *Cache) installLocked(e *entry) {
	e.state = live
	c.entries[e.key] = e
	c.used += e.rec.blocks
	if e.rec.pinned {
		c.pinnedBytes += e.rec.blocks
	} else {
		e.elem = c.lru.PushFront(e)
	}
}

// touchLocked records a use of e at now (unix ns).
func (c *Cache) touchLocked(e *entry, now int64) {
	e.rec.access = now
	e.dirty = true
	if e.elem != nil {
		c.lru.MoveToFront(e.elem)
	}
}

// setPinnedLocked pins or unpins live entries, moving them out of or into
// the LRU.
func (c *Cache) setPinnedLocked(es []*entry, pinned bool) {
	var unpinned []*entry
	for _, e := range es {
		if e.rec.pinned == pinned {
			continue
		}
		e.rec.pinned = pinned
		if pinned {
			c.pinnedBytes += e.rec.blocks
			c.lru.Remove(e.elem)
			e.elem = nil
			continue
		}
		c.pinnedBytes -= e.rec.blocks
		unpinned = append(unpinned, e)
	}
	c.linkByAccessLocked(unpinned)
}

// linkByAccessLocked puts unlinked live entries into the LRU where their
// last access places them, in one pass over the list.
func (c *Cache) linkByAccessLocked(es []*entry) {
	slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.rec.access, b.rec.access) })
	// Walk from the least recently used end; cur is the oldest element
	// newer than the entry being placed (nil: none is).
	cur := c.lru.Back()
	for _, e := range es {
		for cur != nil && cur.Value.(*entry).rec.access <= e.rec.access {
			cur = cur.Prev()
		}
		if cur == nil {
			e.elem = c.lru.PushFront(e)
		} else {
			e.elem = c.lru.InsertAfter(e, cur)
		}
	}
}

// dropLocked takes live e out of the cache. With handles open it becomes a
// zombie, deleted by the last Handle.Close; otherwise it is gone and the
// caller must pass it to removeFiles (dead reports that). The caller also
// removes e's index record unless a new record replaced it.
func (c *Cache) dropLocked(e *entry) (dead bool) {
	delete(c.entries, e.key)
	if e.elem != nil {
		c.lru.Remove(e.elem)
		e.elem = nil
	}
	if e.rec.pinned {
		c.pinnedBytes -= e.rec.blocks
	}
	e.stale.Store(true)
	if e.refs > 0 {
		e.state = zombie
		c.zombies[e.id] = e
		return false
	}
	c.buryLocked(e)
	return true
}

// buryLocked marks e gone and registers its deletion; removeFiles finishes it.
func (c *Cache) buryLocked(e *entry) {
	e.stale.Store(true)
	e.state = gone
	c.used -= e.rec.blocks
	if _, ok := c.deleting[e.id]; !ok {
		c.deleting[e.id] = make(chan struct{})
	}
}

// lruVictimsLocked walks the LRU from its least recently used end and
// returns unused entries (never pinned ones: they are not in the LRU) whose
// blocks add up to at least need, or all it found if there are not enough.
// skip is never chosen.
func (c *Cache) lruVictimsLocked(need int64, skip *entry) (victims []*entry, freed int64) {
	for el := c.lru.Back(); el != nil && freed < need; el = el.Prev() {
		e := el.Value.(*entry)
		if e.refs > 0 || e == skip {
			continue
		}
		victims = append(victims, e)
		freed += e.rec.blocks
	}
	return victims, freed
}

// evictLocked drops victims (all unused, so all dead) and counts them.
func (c *Cache) evictLocked(victims []*entry) {
	for _, v := range victims {
		c.dropLocked(v)
		c.stats.evictions++
	}
}

// fixedBytesLocked returns the bytes that eviction cannot free now: pinned
// entries and entries (or zombies) with open handles.
func (c *Cache) fixedBytesLocked() (pinned, inUse int64) {
	for _, e := range c.entries {
		if !e.rec.pinned && e.refs > 0 {
			inUse += e.rec.blocks
		}
	}
	for _, e := range c.zombies {
		inUse += e.rec.blocks
	}
	return c.pinnedBytes, inUse
}

// checkInvariantsLocked verifies the accounting; tests call it at quiescent
// points.
//
// INVARIANT: used = blocks of live entries + zombies (+ gone entries whose
// deletion is still registered). pinnedBytes = blocks of pinned live entries.
// The LRU holds exactly the live unpinned entries. Zombies have refs > 0.
func (c *Cache) checkInvariantsLocked() error {
	var used, pinned int64
	var errs []error
	for k, e := range c.entries {
		if e.key != k || e.state != live {
			errs = append(errs, fmt.Errorf("entry %q: key %q state %d", k, e.key, e.state))
		}
		used += e.rec.blocks
		if e.rec.pinned {
			pinned += e.rec.blocks
		}
		if (e.elem == nil) != e.rec.pinned {
			errs = append(errs, fmt.Errorf("entry %q: pinned %v but in LRU %v", k, e.rec.pinned, e.elem != nil))
		}
	}
	for id, e := range c.zombies {
		if e.id != id || e.state != zombie || e.refs <= 0 {
			errs = append(errs, fmt.Errorf("zombie %s: state %d refs %d", id, e.state, e.refs))
		}
		used += e.rec.blocks
	}
	if n := c.lru.Len(); n != len(c.entries)-c.pinnedCountLocked() {
		errs = append(errs, fmt.Errorf("lru has %d entries; want %d", n, len(c.entries)-c.pinnedCountLocked()))
	}
	if len(c.deleting) == 0 && used != c.used {
		errs = append(errs, fmt.Errorf("used = %d; entries add up to %d", c.used, used))
	}
	if pinned != c.pinnedBytes {
		errs = append(errs, fmt.Errorf("pinnedBytes = %d; entries add up to %d", c.pinnedBytes, pinned))
	}
	if c.reserved < 0 {
		errs = append(errs, fmt.Errorf("reserved = %d", c.reserved))
	}
	return errors.Join(errs...)
}

func (c *Cache) pinnedCountLocked() int {
	n := 0
	for _, e := range c.entries {
		if e.rec.pinned {
			n++
		}
	}
	return n
}
