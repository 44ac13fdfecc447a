package tier

import (
	"context"
	"fmt"
	"slices"
)

// EvictResult is what Evict and Demote did.
type EvictResult struct {
	// Evicted counts copies removed, files deleted.
	Evicted int
	// Pending counts copies in use: they left the cache at once (no new
	// handle is given on them; the next Open fetches or promotes the
	// object again) and their files are deleted when their last handle
	// closes. The tier's PendingBytes (see Stats) counts their space.
	Pending int
	// Skipped counts pinned copies (pinned hot, for Demote), left alone.
	Skipped int
}

// Evict removes every cached object of bucket whose name starts with prefix
// from the cache, with its shm copy, except pinned ones (Unpin them first).
// Objects in use leave the cache too, pending the last Close of their
// handles, which then become stale. The space of those evicted is free on
// disk when it returns.
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
	c.mu.Lock()
	keys := c.matchKeysLocked(bucket, prefix)
	c.mu.Unlock()
	for batch := range slices.Chunk(keys, bulkBatch) {
		if err := c.evictBatch(batch, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// evictBatch evicts the entries of keys that are still cached, for Evict.
func (c *Cache) evictBatch(keys []string, res *EvictResult) error {
	c.idxMu.Lock()
	if c.idxClosed {
		c.idxMu.Unlock()
		return ErrClosed
	}
	c.mu.Lock()
	var victims, dead []*entry
	for _, k := range keys {
		e := c.entryLocked(k)
		switch {
		case e == nil: // gone since the listing
			continue
		case e.rec.pinned:
			res.Skipped++
			continue
		case e.inUseLocked():
			res.Pending++
		default:
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
	return nil
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
	for _, e := range c.warmMatchLocked(bucket, prefix) { // frozen entries have no shm copy
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
