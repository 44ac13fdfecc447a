package tier

import (
	"slices"
	"strings"
)

// Lookup returns the cached entry of bucket/name, if any. It does not count
// as a use.
func (c *Cache) Lookup(bucket, name string) (Entry, bool) {
	key := indexKey(bucket, name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil {
		return e.snapshotLocked(), true
	}
	if r, ok := c.coldRecordLocked(key); ok { // read in place: a lookup is no use
		return c.coldSnapshotLocked(key, r), true
	}
	return Entry{}, false
}

// coldSnapshotLocked returns the frozen entry of key, with record r, as an
// Entry (frozen entries are on disk and not in use).
func (c *Cache) coldSnapshotLocked(key string, r record) Entry {
	e := entry{key: key, st: c.base, rec: r}
	return e.snapshotLocked()
}

// Entries returns the cached objects of bucket whose names start with
// prefix, sorted by name.
func (c *Cache) Entries(bucket, prefix string) []Entry {
	c.mu.Lock()
	es := c.warmMatchLocked(bucket, prefix)
	out := make([]Entry, len(es))
	for i, e := range es {
		out[i] = e.snapshotLocked()
	}
	c.coldEachLocked(bucket, prefix, func(key string, r record) { out = append(out, c.coldSnapshotLocked(key, r)) })
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Attrs.Name, b.Attrs.Name) })
	return out
}

// matchLocked returns the live entries of bucket under prefix, in no order,
// thawing the frozen ones. It scans every entry.
func (c *Cache) matchLocked(bucket, prefix string) []*entry {
	out := c.warmMatchLocked(bucket, prefix)
	if bucket == "" || strings.IndexByte(bucket, 0) >= 0 {
		return out
	}
	keys := c.coldKeysLocked(bucket, prefix)
	for _, k := range keys {
		out = append(out, c.entryLocked(k))
	}
	return out
}

// bulkBatch is how many entries a bulk operation (Evict, Pin, Unpin) thaws
// and changes under one hold of mu: the heap holds a batch of thawed
// entries at a time, not every match. Tests lower it.
var bulkBatch = 4096

// matchKeysLocked returns the index keys of the cached objects of bucket
// under prefix, warm and frozen, in no order, without thawing any.
func (c *Cache) matchKeysLocked(bucket, prefix string) []string {
	if bucket == "" || strings.IndexByte(bucket, 0) >= 0 {
		return nil
	}
	keys := c.coldKeysLocked(bucket, prefix)
	for _, e := range c.warmMatchLocked(bucket, prefix) {
		keys = append(keys, e.key)
	}
	return keys
}

// warmMatchLocked returns the warm entries of bucket under prefix.
func (c *Cache) warmMatchLocked(bucket, prefix string) []*entry {
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
