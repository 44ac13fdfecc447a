package tier

import (
	"slices"
	"strings"
)

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
