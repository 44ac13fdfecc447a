package tier

import (
	"cmp"
	"fmt"
	"runtime/debug"
	"slices"
	"unsafe"
)

// defaultWarmEntries bounds the warm set (Cache.entries) that trimWarmLocked
// keeps when it can freeze: 65,536 entries is ~20 MB of heap, and more than
// the objects a node opens in the seconds between access-time flushes.
var defaultWarmEntries = 1 << 16

// warmSlack is how far past its bound (at least) the warm set may grow
// before a flush is asked for. Tests lower it.
var warmSlack = 4096

// entryLocked returns the live base entry of index key key, thawing it if
// it is frozen, or nil. A thawed entry goes into the warm LRU where its
// last use places it; it stays warm until trimWarmLocked freezes it again,
// which callers run only at points where they hold no *entry that could be
// frozen (see freezableLocked).
func (c *Cache) entryLocked(key string) *entry {
	if e := c.entries[key]; e != nil {
		return e
	}
	for _, cs := range c.coldSets() {
		if pos, ok := cs.findString(key); ok {
			e := c.thawLocked(cs, pos)
			if !e.rec.pinned { // pinned entries are not in the LRU
				c.base.linkByAccessLocked([]*entry{e})
			}
			return e
		}
	}
	return nil
}

// coldSets returns the cold sets: unpinned entries (in last-use order, for
// eviction) and pinned ones (never evicted). None before start-up has
// loaded them or after Close.
func (c *Cache) coldSets() []*coldSet {
	if c.cold == nil {
		return nil
	}
	c.colds = [2]*coldSet{c.cold, c.pinnedCold} // a field: the slice costs no allocation
	return c.colds[:]
}

// currentLocked returns the entry that now stands for e, which the caller
// held across an unlock of mu: e itself, or the thawed entry of e's copy
// if e was frozen meanwhile (nil if the copy has left the cache). A copy of
// the same generation filled again since is another copy: it lies
// elsewhere (segments are only appended to), and whatever the caller
// learned of e's bytes says nothing of its.
func (c *Cache) currentLocked(e *entry) *entry {
	if e.state != frozen {
		return e
	}
	n := c.entryLocked(e.key)
	if n != nil && n.rec.gen == e.rec.gen && n.rec.packed && n.rec.seg == e.rec.seg && n.rec.off == e.rec.off {
		return n
	}
	return nil
}

// thawLocked turns the record at pos of cold set cs back into a live base
// entry, in Cache.entries but not yet in the LRU: the caller links it
// unless it is pinned.
func (c *Cache) thawLocked(cs *coldSet, pos uint64) *entry {
	_, k, v := cs.parse(pos)
	key := string(k)
	r, err := decodeRecord(v)
	if err != nil { // it was encoded by freezeLocked
		panic(fmt.Sprintf("tier: cold record of %q: %v", key, err))
	}
	cs.remove(pos)
	e := c.entryOf(key, r, live)
	c.entries[key] = e
	c.byID[e.id] = e
	return e
}

// freezableLocked reports whether live base entry e can be frozen: packed,
// at rest (no handle, hot copy or hot pin, promotion, doom or unwritten
// change), and in the LRU unless pinned. Whoever may still use an entry
// keeps one of these.
func (c *Cache) freezableLocked(e *entry) bool {
	return e.state == live && e.seg != nil && e.owner == nil && e.hot == nil && !e.rec.inShm && !e.rec.hotPin &&
		e.refs == 0 && !e.dirty && !e.promoting && !e.doomed && e.keep == 0 && (e.linked() || e.rec.pinned)
}

// freezeLocked moves freezable entry e into the cold set, as its newest.
// Its accounting (the store's used blocks and copies, the segment's
// objects) is unchanged: a frozen entry is still a cached object.
func (c *Cache) freezeLocked(e *entry) bool { return c.freezeAtLocked(e, false) }

// freezeAtLocked is freezeLocked, e going first in the cold set's order if
// oldest.
func (c *Cache) freezeAtLocked(e *entry, oldest bool) bool {
	var buf [256]byte
	val := appendRecord(buf[:0], e.rec)
	key := unsafe.Slice(unsafe.StringData(e.key), len(e.key))
	if !fits(key, val) {
		return false
	}
	cs := c.cold
	if e.rec.pinned {
		cs = c.pinnedCold
	}
	if _, err := cs.addAt(key, val, oldest && !e.rec.pinned); err != nil {
		c.cfg.log.Warn("tier: cannot freeze an entry; the warm set grows", "err", err)
		return false
	}
	delete(c.entries, e.key)
	if c.byID[e.id] == e {
		delete(c.byID, e.id)
	}
	if e.linked() {
		c.base.lru.remove(e)
	}
	e.markStaleLocked()
	e.state = frozen
	return true
}

// trimLook bounds the entries one trimWarmLocked looks at, so that a warm
// set whose tail cannot freeze yet costs every caller little.
const trimLook = 256

// trimWarmLocked freezes the least recently used freezable entries until
// the warm set is within its bound, looking at no more than trimLook
// entries (those in use stay warm and are passed over). Entries used since
// the last flush cannot freeze until the flusher has written them: when
// the warm set is more than warmSlack over its bound and some are
// unwritten, it asks the flusher for a flush now (which trims again; at
// most one such flush per earlyFlushGap). Then it tidies the cold set (see
// coldSet.tidy).
func (c *Cache) trimWarmLocked() {
	if c.cold == nil {
		return
	}
	over := len(c.entries) - c.cfg.warmEntries
	for e, looked := c.base.lru.back(), 0; e != nil && over > 0 && looked < trimLook; looked++ {
		prev := c.base.lru.prev(e)
		if c.freezableLocked(e) && c.freezeLocked(e) {
			over--
		}
		e = prev
	}
	if over > 0 && c.base.pinnedBytes > 0 { // pinned entries are not in the LRU: look at some
		looked := 0
		for _, e := range c.entries {
			if over == 0 || looked == trimLook {
				break
			}
			looked++
			if e.rec.pinned && c.freezableLocked(e) && c.freezeLocked(e) {
				over--
			}
		}
	}
	if over > max(c.cfg.warmEntries/2, warmSlack) && len(c.dirty) > 0 { // a flush frees only unwritten ones
		select {
		case c.flushNow <- struct{}{}:
		default:
		}
	}
	for _, cs := range c.coldSets() {
		if err := cs.tidy(); err != nil {
			c.cfg.log.Warn("tier: compact the cold index", "err", err)
		}
	}
}

// thawOldLocked thaws the least recently used cold entries, up to need
// bytes of blocks, into the warm LRU, so that eviction, which walks the
// warm LRU from its tail, sees the oldest objects of both sets. With an
// ownership preference (SetOwnership) it thaws first the copies this node
// does not own among the ownScan least recently used, as
// lruOwnedVictimsLocked would take them.
func (c *Cache) thawOldLocked(need int64) []*entry {
	if c.cold == nil || c.cold.len() == 0 {
		return nil
	}
	var es []*entry
	got := int64(0)
	if owns := c.base.own.owns; owns != nil {
		var unowned []uint64
		looked := 0
		c.cold.each(func(pos uint64, k, v []byte) bool {
			looked++
			if r, err := decodeRecord(v); err == nil && !owns(recAttrs(string(k), r)) {
				unowned = append(unowned, pos)
				got += r.blocks
			}
			return got < need && looked < ownScan
		})
		for _, pos := range unowned { // removing leaves the others' positions as they are
			es = append(es, c.thawLocked(c.cold, pos))
		}
	}
	for got < need {
		pos, ok := c.cold.oldest()
		if !ok {
			break
		}
		e := c.thawLocked(c.cold, pos)
		es = append(es, e)
		got += e.rec.blocks
	}
	c.base.linkByAccessLocked(es)
	return es
}

// refreezeLocked freezes again the entries thawOldLocked thawed that are
// not among victims, newest first as the oldest of the cold set, so that
// they keep their places in its order.
func (c *Cache) refreezeLocked(thawed, victims []*entry) {
	if len(thawed) == 0 {
		return
	}
	chosen := make(map[*entry]bool, len(victims))
	for _, v := range victims {
		chosen[v] = true
	}
	left := thawed[:0]
	for _, e := range thawed {
		if !chosen[e] {
			left = append(left, e)
		}
	}
	slices.SortFunc(left, func(a, b *entry) int { return cmp.Compare(b.rec.access, a.rec.access) })
	for _, e := range left {
		if c.freezableLocked(e) {
			c.freezeAtLocked(e, true)
		}
	}
}

// coldEachLocked calls fn with the key and record of every frozen entry of
// bucket under prefix, without thawing them; fn must not change the cache.
func (c *Cache) coldEachLocked(bucket, prefix string, fn func(key string, r record)) {
	kp := indexKey(bucket, prefix)
	for _, cs := range c.coldSets() {
		cs.each(func(_ uint64, k, v []byte) bool {
			if len(k) >= len(kp) && string(k[:len(kp)]) == kp {
				if r, err := decodeRecord(v); err == nil {
					fn(string(k), r)
				}
			}
			return true
		})
	}
}

// coldKeysLocked returns the keys of the frozen entries of bucket under
// prefix (every one when bucket is "").
func (c *Cache) coldKeysLocked(bucket, prefix string) []string {
	var keys []string
	if bucket == "" {
		for _, cs := range c.coldSets() {
			cs.each(func(_ uint64, k, _ []byte) bool {
				keys = append(keys, string(k))
				return true
			})
		}
		return keys
	}
	c.coldEachLocked(bucket, prefix, func(key string, _ record) { keys = append(keys, key) })
	return keys
}

// settleAbove is the number of records above which Open settles its memory
// after loading the index (see settle).
const settleAbove = 100_000

// settle gives back, after a large index was loaded, the memory the load
// used and no longer needs: the index is reopened, which unmaps the table
// pages the scan touched (hundreds of MB of resident file pages at a
// million records, never read again: lookups are in memory), and the
// start-up's garbage is collected and returned to the system.
func (c *Cache) settle() error {
	if c.base.copies < settleAbove {
		return nil
	}
	dir := c.base.lay.index
	if err := c.idx.close(); err != nil {
		c.releaseCold()
		return err
	}
	idx, err := openIndex(dir, c.cfg.log)
	if err != nil {
		c.releaseCold()
		return err
	}
	c.idx = idx
	debug.FreeOSMemory()
	return nil
}

// releaseCold unmaps the cold sets and forgets them (Close, a failed Open).
func (c *Cache) releaseCold() {
	c.mu.Lock()
	sets := c.coldSets()
	c.cold, c.pinnedCold = nil, nil // Lookup and friends may still run: they find no cold entries
	c.mu.Unlock()
	for _, cs := range sets {
		cs.release()
	}
}

// coldEachUnpinnedLocked calls fn with every unpinned frozen entry, least
// recently used first; key aliases the cold set (valid until it changes).
func (c *Cache) coldEachUnpinnedLocked(fn func(key string, r record, pos uint64)) {
	if c.cold == nil {
		return
	}
	c.cold.each(func(pos uint64, k, v []byte) bool {
		if r, err := decodeRecord(v); err == nil {
			fn(unsafe.String(unsafe.SliceData(k), len(k)), r, pos)
		}
		return true
	})
}

// frozenStandInLocked returns, for the frozen entry of key, an entry in
// state frozen that reads its bytes (path, offset, size, CRC32C) without
// thawing it, or nil if key is not frozen. dropCopy given the stand-in
// drops the entry it stands for (if it still holds that generation).
func (c *Cache) frozenStandInLocked(key string) *entry {
	if r, ok := c.coldRecordLocked(key); ok {
		return c.entryOf(key, r, frozen)
	}
	return nil
}

// coldRecordLocked returns the record of the frozen entry of key, if key is
// frozen, without thawing it.
func (c *Cache) coldRecordLocked(key string) (record, bool) {
	for _, cs := range c.coldSets() {
		if pos, ok := cs.findString(key); ok {
			_, _, v := cs.parse(pos)
			r, err := decodeRecord(v)
			return r, err == nil
		}
	}
	return record{}, false
}

// entryOf returns a base entry in state for the packed object of key with
// record r.
func (c *Cache) entryOf(key string, r record, state entryState) *entry {
	bucket, name, _ := splitKey(key)
	seg := c.segs.get(r.seg)
	if seg == nil { // cannot be (its objects keep it); if it were, Open finds the file wrong and drops the entry
		seg = &segment{num: r.seg, path: segPath(c.segs.dir, r.seg), sealed: true}
	}
	return &entry{key: key, st: c.base, id: idOf(bucket, name, r.gen), seg: seg, ident: fileIdent{ino: seg.ino},
		rec: r, state: state}
}
