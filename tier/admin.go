package tier

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Pin pins every cached object of bucket whose name starts with prefix:
// pinned entries are never evicted to make room, nor by Evict (Unpin them
// first). A pin carries over to a newer generation that replaces the entry.
// It returns how many entries it newly pinned.
func (c *Cache) Pin(ctx context.Context, bucket, prefix string) (int, error) {
	n, _, err := c.setPins(ctx, bucket, prefix, func(r *record) { r.pinned = true })
	return n, err
}

// Unpin lifts the pins (and hot pins) of every cached object of bucket whose
// name starts with prefix and returns how many entries it changed.
func (c *Cache) Unpin(ctx context.Context, bucket, prefix string) (int, error) {
	n, _, err := c.setPins(ctx, bucket, prefix, func(r *record) { r.pinned, r.hotPin = false, false })
	return n, err
}

// PinHot pins every cached object of bucket whose name starts with prefix
// (as Pin does) and keeps it in the shm tier too: it promotes them now,
// synchronously, and their shm copies are never demoted to make room nor by
// Demote (Unpin lifts both pins). A hot-pinned object whose shm copy is
// lost (a reboot clears the tmpfs; someone deletes the file) is promoted
// again at start-up and at its next Open. PinHot returns how many entries it
// newly pinned hot; promotions that fail are returned joined, as Promote
// does, and retried at the next Open. In shm-only mode PinHot is Pin;
// without a shm tier it returns ErrNoShm.
func (c *Cache) PinHot(ctx context.Context, bucket, prefix string) (int, error) {
	if c.hot == nil {
		if err := c.noShm(); err != nil {
			return 0, err
		}
		return c.Pin(ctx, bucket, prefix)
	}
	n, es, err := c.setPins(ctx, bucket, prefix, func(r *record) { r.pinned, r.hotPin = true, true })
	if err != nil {
		return n, err
	}
	end, err := c.begin()
	if err != nil {
		return n, err
	}
	defer end()
	c.mu.Lock()
	var cold []*entry
	for _, e := range es {
		if e.state == live && e.hot == nil {
			cold = append(cold, e)
		}
	}
	c.mu.Unlock()
	_, err = c.promoteAll(ctx, cold)
	return n, err
}

// setPins applies pin to the records of every live entry of bucket under
// prefix: the index first, then memory, both under idxMu so nothing
// changes the entries in between. It returns how many records changed and
// the matching entries.
func (c *Cache) setPins(ctx context.Context, bucket, prefix string, pin func(r *record)) (int, []*entry, error) {
	end, err := c.begin()
	if err != nil {
		return 0, nil, err
	}
	defer end()
	if err := ctx.Err(); err != nil {
		return 0, nil, fmt.Errorf("tier: pin: %w", err)
	}
	c.idxMu.Lock()
	defer c.idxMu.Unlock()
	if c.idxClosed {
		return 0, nil, ErrClosed
	}
	c.mu.Lock()
	all := c.matchLocked(bucket, prefix)
	var es []*entry
	var keys []string
	var recs []record
	for _, e := range all {
		r := e.rec
		pin(&r)
		if r != e.rec {
			es, keys, recs = append(es, e), append(keys, e.key), append(recs, r)
		}
	}
	c.mu.Unlock()
	if err := c.idx.putBatch(keys, recs); err != nil {
		return 0, nil, fmt.Errorf("tier: pin gs://%s/%s: %w", bucket, prefix, err)
	}
	c.mu.Lock()
	c.setPinsLocked(es, pin)
	c.mu.Unlock()
	return len(es), all, nil
}

// EvictResult is what Evict and Demote did.
type EvictResult struct {
	// Evicted counts copies removed, files deleted.
	Evicted int
	// Pending counts copies in use: they left the cache at once (no new
	// handle is given on them; the next Open fetches or promotes the
	// object again) and their files are deleted when their last handle
	// closes. Stats.PendingBytes (ShmPendingBytes) counts their space.
	Pending int
	// Skipped counts pinned copies (pinned hot, for Demote), left alone.
	Skipped int
}

// Evict removes every cached object of bucket whose name starts with prefix
// from the cache, with its shm copy, except pinned ones (Unpin them first).
// Objects in use leave the cache too, pending the last Close of their
// handles, which then become stale.
func (c *Cache) Evict(ctx context.Context, bucket, prefix string) (EvictResult, error) {
	var res EvictResult
	end, err := c.begin()
	if err != nil {
		return res, err
	}
	defer end()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("tier: evict: %w", err)
	}
	c.idxMu.Lock()
	if c.idxClosed {
		c.idxMu.Unlock()
		return res, ErrClosed
	}
	c.mu.Lock()
	var victims, dead []*entry
	for _, e := range c.matchLocked(bucket, prefix) {
		if e.rec.pinned {
			res.Skipped++
			continue
		}
		if e.inUseLocked() {
			res.Pending++
		} else {
			res.Evicted++
		}
		victims = append(victims, e)
		dead = c.dropLocked(e, true, dead)
		c.stats.evictions++
	}
	c.mu.Unlock()
	c.deleteRecords(victims)
	c.idxMu.Unlock()
	c.removeFiles(dead)
	return res, nil
}

// Demote drops the shm copies of every cached object of bucket whose name
// starts with prefix, except those pinned hot; the objects stay cached on
// disk and are served from there (and may be promoted again by later
// Opens). Copies in use are pending, as for Evict. In shm-only mode there
// is nothing to demote to and Demote does nothing; without a shm tier it
// returns ErrNoShm.
func (c *Cache) Demote(ctx context.Context, bucket, prefix string) (EvictResult, error) {
	var res EvictResult
	end, err := c.begin()
	if err != nil {
		return res, err
	}
	defer end()
	if c.hot == nil {
		return res, c.noShm()
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("tier: demote: %w", err)
	}
	c.mu.Lock()
	var dead []*entry
	for _, e := range c.matchLocked(bucket, prefix) {
		switch {
		case e.hot == nil:
		case e.rec.hotPin:
			res.Skipped++
		default:
			if e.hot.refs > 0 {
				res.Pending++
			} else {
				res.Evicted++
			}
			dead = c.unhotLocked(e, dead)
		}
	}
	c.mu.Unlock()
	c.removeFiles(dead)
	return res, nil
}

// Lookup returns the cached entry of bucket/name, if any. It does not count
// as a use.
func (c *Cache) Lookup(bucket, name string) (Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[indexKey(bucket, name)]
	if e == nil {
		return Entry{}, false
	}
	return e.snapshotLocked(), true
}

// Entries returns the cached objects of bucket whose names start with
// prefix, sorted by name.
func (c *Cache) Entries(bucket, prefix string) []Entry {
	c.mu.Lock()
	es := c.matchLocked(bucket, prefix)
	out := make([]Entry, len(es))
	for i, e := range es {
		out[i] = e.snapshotLocked()
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Attrs.Name, b.Attrs.Name) })
	return out
}

// matchLocked returns the live entries of bucket under prefix, in no order.
// It scans every entry.
func (c *Cache) matchLocked(bucket, prefix string) []*entry {
	if bucket == "" || strings.IndexByte(bucket, 0) >= 0 {
		return nil
	}
	kp := indexKey(bucket, prefix)
	var out []*entry
	for k, e := range c.entries {
		if strings.HasPrefix(k, kp) {
			out = append(out, e)
		}
	}
	return out
}
