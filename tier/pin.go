package tier

import (
	"context"
	"fmt"
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
	// Entries may have been frozen meanwhile (not dropped: that takes idxMu).
	for i, e := range es {
		es[i] = c.currentLocked(e)
	}
	for i, e := range all {
		all[i] = c.currentLocked(e)
	}
	c.setPinsLocked(es, pin)
	c.mu.Unlock()
	return len(es), all, nil
}
