package tier

import "github.com/cacheagent/cacheagent/object"

// ownScan bounds how many copies, from the least recently used end, an
// eviction looks through for copies the cache does not own before it
// takes owned ones.
const ownScan = 4096

// ownership is what the cache owns for its fleet: the copies it keeps
// first. Guarded by Cache.mu.
type ownership struct {
	owns func(object.Attrs) bool // nil: no preference
	ver  uint32                  // bumped by each SetOwnership; entries cache their answer by it
}

// SetOwnership tells the cache which objects it owns for a fleet: owns
// reports whether a copy (an object at its generation, with its size) is
// this node's to keep.
// Eviction then takes the copies it does not own (held for its own
// readers) before the ones it owns, least recently used first within each
// kind; while plans are announced, among copies no plan needs again. Call
// it again whenever ownership changes (a member joins or leaves): each
// copy's answer is cached until then. owns runs holding the cache's lock,
// so it must be quick and must not call the cache; nil removes the
// preference.
func (c *Cache) SetOwnership(owns func(object.Attrs) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := &c.base.own
	o.owns = owns
	o.ver++
	if o.ver == 0 { // entries start at 0: never match it
		o.ver = 1
	}
}

// keepLocked reports whether e is a copy its store keeps before others
// (owned; false without a preference).
func (o *ownership) keepLocked(e *entry) bool {
	if o.owns == nil || e.owner != nil {
		return false
	}
	if e.ownVer != o.ver {
		e.owned, e.ownVer = o.owns(e.attrs()), o.ver
	}
	return e.owned
}

// lruOwnedVictimsLocked is lruVictimsLocked with an ownership preference:
// unowned copies among the ownScan least recently used first, then the
// rest in LRU order.
func (st *store) lruOwnedVictimsLocked(need int64, skip *entry) (victims []*entry, freed int64) {
	n := 0
	for e := st.lru.back(); e != nil && freed < need && n < ownScan; e = st.lru.prev(e) {
		n++
		if e.inUseLocked() || e == skip || st.own.keepLocked(e) {
			continue
		}
		victims = append(victims, e)
		freed += e.rec.blocks
	}
	i := 0
	for e := st.lru.back(); e != nil && freed < need; e = st.lru.prev(e) {
		i++
		// The first n were taken above unless owned.
		if e.inUseLocked() || e == skip || i <= n && !st.own.keepLocked(e) {
			continue
		}
		victims = append(victims, e)
		freed += e.rec.blocks
	}
	return victims, freed
}

// unownedInUseLocked reports whether copies this node does not own are in
// use among the ownScan least recently used: released, they become
// victims before owned ones.
func (st *store) unownedInUseLocked() bool {
	n := 0
	for e := st.lru.back(); e != nil && n < ownScan; e = st.lru.prev(e) {
		n++
		if e.inUseLocked() && !st.own.keepLocked(e) {
			return true
		}
	}
	return false
}
