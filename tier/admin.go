package tier

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Pin pins every cached object of bucket whose name starts with prefix:
// pinned entries are never evicted to make room (Evict still removes them).
// A pin carries over to a newer generation that replaces the entry. It
// returns how many entries it newly pinned.
func (c *Cache) Pin(ctx context.Context, bucket, prefix string) (int, error) {
	return c.setPinned(ctx, bucket, prefix, true)
}

// Unpin unpins every cached object of bucket whose name starts with prefix
// and returns how many entries it unpinned.
func (c *Cache) Unpin(ctx context.Context, bucket, prefix string) (int, error) {
	return c.setPinned(ctx, bucket, prefix, false)
}

// setPinned implements Pin and Unpin: the index first, then memory, both
// under idxMu so nothing changes the entries in between.
func (c *Cache) setPinned(ctx context.Context, bucket, prefix string, pinned bool) (int, error) {
	end, err := c.begin()
	if err != nil {
		return 0, err
	}
	defer end()
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("tier: pin: %w", err)
	}
	c.idxMu.Lock()
	defer c.idxMu.Unlock()
	if c.idxClosed {
		return 0, ErrClosed
	}
	c.mu.Lock()
	var es []*entry
	var keys []string
	var recs []record
	for _, e := range c.matchLocked(bucket, prefix) {
		if e.rec.pinned != pinned {
			r := e.rec
			r.pinned = pinned
			es, keys, recs = append(es, e), append(keys, e.key), append(recs, r)
		}
	}
	c.mu.Unlock()
	if err := c.idx.putBatch(keys, recs); err != nil {
		return 0, fmt.Errorf("tier: pin gs://%s/%s: %w", bucket, prefix, err)
	}
	c.mu.Lock()
	c.setPinnedLocked(es, pinned)
	c.mu.Unlock()
	return len(es), nil
}

// Evict removes every cached object of bucket whose name starts with prefix,
// except pinned ones (unpin them first) and those with open handles, which
// it counts as skipped.
func (c *Cache) Evict(ctx context.Context, bucket, prefix string) (evicted, skipped int, err error) {
	end, err := c.begin()
	if err != nil {
		return 0, 0, err
	}
	defer end()
	if err := ctx.Err(); err != nil {
		return 0, 0, fmt.Errorf("tier: evict: %w", err)
	}
	c.idxMu.Lock()
	if c.idxClosed {
		c.idxMu.Unlock()
		return 0, 0, ErrClosed
	}
	c.mu.Lock()
	var victims []*entry
	for _, e := range c.matchLocked(bucket, prefix) {
		if e.refs > 0 || e.rec.pinned {
			skipped++
			continue
		}
		victims = append(victims, e)
	}
	c.evictLocked(victims)
	c.mu.Unlock()
	c.deleteRecords(victims)
	c.idxMu.Unlock()
	c.removeFiles(victims)
	return len(victims), skipped, nil
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
