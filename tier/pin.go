package tier

import (
	"context"
	"fmt"
	"slices"
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
	n, keys, err := c.setPins(ctx, bucket, prefix, func(r *record) { r.pinned, r.hotPin = true, true })
	if err != nil {
		return n, err
	}
	end, err := c.begin()
	if err != nil {
		return n, err
	}
	defer end()
	c.mu.Lock()
	var notHot []*entry // pinned hot: they stay warm
	for _, k := range keys {
		if e := c.entryLocked(k); e != nil && e.hot == nil {
			notHot = append(notHot, e)
		}
	}
	c.mu.Unlock()
	_, err = c.promoteAll(ctx, notHot)
	return n, err
}

// setPins applies pin to the records of every live entry of bucket under
// prefix, bulkBatch entries at a time: the index first, then memory, both
// under idxMu so nothing changes the entries in between. It returns how
// many records changed and the keys of the entries it matched.
func (c *Cache) setPins(ctx context.Context, bucket, prefix string, pin func(r *record)) (int, []string, error) {
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
	all := c.matchKeysLocked(bucket, prefix)
	c.mu.Unlock()
	n := 0
	for batch := range slices.Chunk(all, bulkBatch) {
		changed, err := c.setPinsBatch(batch, pin)
		n += changed
		if err != nil {
			return n, nil, fmt.Errorf("tier: pin gs://%s/%s: %w", bucket, prefix, err)
		}
	}
	return n, all, nil
}

// setPinsBatch is setPins for the entries of keys (all live: idxMu is held).
func (c *Cache) setPinsBatch(keys []string, pin func(r *record)) (int, error) {
	c.mu.Lock()
	var changed, unsynced []string
	var recs []record
	for _, k := range keys {
		e := c.entryLocked(k)
		if e == nil { // cannot be while idxMu is held; skipped all the same
			continue
		}
		r := e.rec
		pin(&r)
		switch {
		case r == e.rec:
		case e.unsynced: // the packer writes its record, pins included
			unsynced = append(unsynced, k)
		default:
			changed, recs = append(changed, k), append(recs, r)
		}
	}
	c.mu.Unlock()
	if err := c.idx.putBatch(changed, recs); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	es := make([]*entry, 0, len(changed)+len(unsynced))
	for _, k := range append(changed, unsynced...) {
		if e := c.entryLocked(k); e != nil { // thawed again if it froze meanwhile
			es = append(es, e)
		}
	}
	c.setPinsLocked(es, pin)
	c.trimWarmLocked()
	return len(es), nil
}
