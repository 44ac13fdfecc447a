package tier

import (
	"errors"
	"fmt"
)

// checkInvariantsLocked verifies the accounting; tests call it at quiescent
// points.
//
// INVARIANT: in each store, used = blocks of live copies + zombies +
// detached zombies (+ gone copies whose deletion is still registered),
// pinnedBytes = blocks of pinned live copies, inUse = blocks of live
// unpinned copies in use (counted set on exactly those), pending = blocks
// of zombies and detached zombies, and copies = the number of live copies;
// the LRU holds exactly the live unpinned copies. Zombies have refs > 0.
// byID indexes exactly the entries. A base entry has a hot copy iff its
// record says inShm; hotPin implies pinned.
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
	var used, pinned, inUse, pending int64
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
			if e.inUseLocked() {
				inUse += e.rec.blocks
			}
		}
		if e.state != live || e.linked() == isPinned {
			errs = append(errs, fmt.Errorf("%s copy %s: state %d, pinned %v, in LRU %v", st.name, e.id, e.state, isPinned, e.linked()))
		}
		if e.counted != (!isPinned && e.inUseLocked()) {
			errs = append(errs, fmt.Errorf("%s copy %s: counted %v, pinned %v, in use %v", st.name, e.id, e.counted, isPinned, e.inUseLocked()))
		}
	}
	for i, cs := range c.coldSets() { // frozen entries: live, not in the LRU
		if st != c.base {
			break
		}
		pinnedSet := i == 1
		cs.each(func(_ uint64, k, v []byte) bool {
			r, err := decodeRecord(v)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("cold %q: %w", k, err))
			case c.entries[string(k)] != nil:
				errs = append(errs, fmt.Errorf("cold %q: warm too", k))
			case !r.packed || r.pinned != pinnedSet || r.hotPin || r.inShm || c.segs.get(r.seg) == nil:
				errs = append(errs, fmt.Errorf("cold %q: packed %v pinned %v (in the pinned set %v) hotPin %v inShm %v segment %d",
					k, r.packed, r.pinned, pinnedSet, r.hotPin, r.inShm, r.seg))
			}
			n++
			used += r.blocks
			if r.pinned {
				pinned += r.blocks
			}
			return true
		})
	}
	for id, e := range st.zombies {
		if e.id != id || e.state != zombie || e.refs <= 0 || e.detached || e.counted || e.linked() {
			errs = append(errs, fmt.Errorf("%s zombie %s: state %d refs %d", st.name, id, e.state, e.refs))
		}
		used += e.rec.blocks
		pending += e.rec.blocks
	}
	for e := range st.detached {
		if e.state != zombie || e.refs <= 0 || !e.detached || e.counted || e.linked() {
			errs = append(errs, fmt.Errorf("%s detached zombie %s: state %d refs %d", st.name, e.id, e.state, e.refs))
		}
		used += e.rec.blocks
		pending += e.rec.blocks
	}
	if got := st.lru.len(); got != unpinned {
		errs = append(errs, fmt.Errorf("%s lru has %d copies; want %d", st.name, got, unpinned))
	}
	linked := 0
	for e := st.lru.back(); e != nil && linked <= unpinned; e = st.lru.prev(e) {
		linked++
	}
	if linked != unpinned {
		errs = append(errs, fmt.Errorf("%s lru links %d copies; want %d", st.name, linked, unpinned))
	}
	if st.copies != n {
		errs = append(errs, fmt.Errorf("%s copies = %d; want %d", st.name, st.copies, n))
	}
	if st.inUse != inUse {
		errs = append(errs, fmt.Errorf("%s inUse = %d; copies add up to %d", st.name, st.inUse, inUse))
	}
	if st.pending != pending {
		errs = append(errs, fmt.Errorf("%s pending = %d; zombies add up to %d", st.name, st.pending, pending))
	}
	used += st.dead
	if len(st.deleting) == 0 && used != st.used {
		errs = append(errs, fmt.Errorf("%s used = %d; copies add up to %d", st.name, st.used, used))
	}
	if pinned != st.pinnedBytes {
		errs = append(errs, fmt.Errorf("%s pinnedBytes = %d; copies add up to %d", st.name, st.pinnedBytes, pinned))
	}
	if st.held < 0 {
		errs = append(errs, fmt.Errorf("%s held = %d", st.name, st.held))
	}
	if st.reserved < 0 {
		errs = append(errs, fmt.Errorf("%s reserved = %d", st.name, st.reserved))
	}
	return errs
}
