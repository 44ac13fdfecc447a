package tier

import (
	"context"
	"fmt"

	"github.com/dustin/go-humanize"
)

// Stats is a snapshot of the cache's usage and counters. The fields without
// a Shm prefix describe the base tier, which holds every cached object (the
// disk, or shm in shm-only mode: see Tier); the Shm fields describe the shm
// tier above the disk tier, and are zero without one (and in shm-only mode).
type Stats struct {
	// Tier is the base tier: Disk, or Shm in shm-only mode.
	Tier Kind
	// Entries is the number of cached objects.
	Entries int
	// UsedBytes is the space cached files occupy (including dropped files
	// kept alive by open handles), in filesystem blocks.
	UsedBytes int64
	// MaxBytes is the byte budget.
	MaxBytes int64
	// ReservedBytes is the space set aside by fills in progress.
	ReservedBytes int64
	// PinnedBytes is the space of pinned entries.
	PinnedBytes int64
	// InUseBytes is the space of unpinned entries with open handles,
	// including the pending bytes.
	InUseBytes int64
	// PendingBytes is the space of files that left the cache while handles
	// used them (evicted, replaced by a newer generation, or damaged): each
	// is deleted, and its space freed, when its last handle closes.
	PendingBytes int64
	// Hits counts Opens served from the cache (either tier); Misses those
	// that fetched.
	Hits, Misses int64
	// Revalidations counts Stats sent to the source for cached objects.
	Revalidations int64
	// Fills counts objects downloaded; BytesFetched their bytes.
	Fills, BytesFetched int64
	// Evictions counts entries removed to make room or by Evict.
	Evictions int64
	// Damaged counts copies dropped because their file was deleted, replaced,
	// truncated or written to behind the cache's back.
	Damaged int64

	// ShmEntries is the number of objects with a copy in the shm tier.
	ShmEntries int
	// ShmUsedBytes, ShmMaxBytes, ShmReservedBytes, ShmPinnedBytes,
	// ShmInUseBytes and ShmPendingBytes are the shm tier's figures, as above
	// (pinned means pinned hot; reserved, set aside by promotions).
	ShmUsedBytes, ShmMaxBytes, ShmReservedBytes, ShmPinnedBytes, ShmInUseBytes, ShmPendingBytes int64
	// ShmHits counts the Hits served from the shm tier.
	ShmHits int64
	// Promotions counts copies made into the shm tier; PromotionsSkipped
	// the promotions that did not fit (budget or tmpfs full); Demotions the
	// shm copies dropped (to make room, by Demote, with their entry, or
	// damaged).
	Promotions, PromotionsSkipped, Demotions int64
}

// Stats returns a snapshot of usage and counters. It costs O(1), whatever
// the number of entries: the tiers keep their figures as copies change.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.statsLocked()
}

// statsLocked is Stats with c.mu held.
func (c *Cache) statsLocked() Stats {
	b := c.base
	_, inUse := b.fixedBytesLocked()
	s := Stats{
		Tier: b.name, Entries: len(c.entries), UsedBytes: b.used, MaxBytes: b.maxBytes, ReservedBytes: b.reserved,
		PinnedBytes: b.pinnedBytes, InUseBytes: inUse, PendingBytes: b.pending,
		Hits: c.stats.hits, Misses: c.stats.misses, Revalidations: c.stats.revalidations,
		Fills: c.stats.fills, BytesFetched: c.stats.bytesFetched, Evictions: c.stats.evictions,
		Damaged: c.stats.damaged,
	}
	if h := c.hot; h != nil {
		s.ShmEntries = h.copies
		_, s.ShmInUseBytes = h.fixedBytesLocked()
		s.ShmUsedBytes, s.ShmMaxBytes, s.ShmReservedBytes = h.used, h.maxBytes, h.reserved
		s.ShmPinnedBytes, s.ShmPendingBytes = h.pinnedBytes, h.pending
		s.ShmHits, s.Promotions = c.stats.shmHits, c.stats.promotions
		s.PromotionsSkipped, s.Demotions = c.stats.promoteSkips, c.stats.demotions
	}
	return s
}

// SetMaxBytes changes the base tier's byte budget (n > 0; 0 means the
// default share of the filesystem's size now: 90%, or a quarter when
// shm-only) and evicts least recently used entries down to it. If pinned
// and in-use entries alone exceed it, the new budget still holds and the
// error wraps ErrNoSpace; fills then evict as entries are released.
func (c *Cache) SetMaxBytes(ctx context.Context, n int64) error {
	if n < 0 {
		return fmt.Errorf("tier: set max bytes: %d is negative", n)
	}
	end, err := c.begin()
	if err != nil {
		return err
	}
	defer end()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tier: set max bytes: %w", err)
	}
	if n == 0 {
		fsi, err := statFS(c.base.lay.data)
		if err != nil {
			return err
		}
		n = budgetOf(fsi, c.base.share)
	}
	c.mu.Lock()
	c.base.maxBytes = n
	c.mu.Unlock()
	over := c.trim()
	if over > 0 {
		return fmt.Errorf("%w: budget set to %s but %s is pinned, in use or reserved",
			ErrNoSpace, humanize.IBytes(uint64(n)), humanize.IBytes(uint64(over+n)))
	}
	return nil
}

// SetShmMaxBytes sets the shm tier's byte budget (0: its default share of
// the shm filesystem) and demotes least recently used shm copies, never
// pinned or in-use ones, until the tier fits. Demoted objects stay cached on
// disk. If pinned or in-use copies alone exceed the budget, it applies
// anyway and the error matches ErrNoSpace. Without a shm tier it returns
// ErrNoShm; a shm-only cache's budget is SetMaxBytes's.
func (c *Cache) SetShmMaxBytes(ctx context.Context, n int64) error {
	if c.hot == nil && c.base.name == Shm {
		return c.SetMaxBytes(ctx, n)
	}
	if n < 0 {
		return fmt.Errorf("tier: set shm max bytes: %d is negative", n)
	}
	end, err := c.begin()
	if err != nil {
		return err
	}
	defer end()
	if c.hot == nil {
		return ErrNoShm
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tier: set shm max bytes: %w", err)
	}
	if n == 0 {
		fsi, err := statFS(c.hot.lay.data)
		if err != nil {
			return err
		}
		n = budgetOf(fsi, c.hot.share)
	}
	c.mu.Lock()
	h := c.hot
	h.maxBytes = n
	var dead []*entry
	short := h.used + h.reserved - n
	victims, freed := h.lruVictimsLocked(short, nil)
	for _, v := range victims {
		dead = c.unhotLocked(v.owner, dead)
	}
	h.signalLocked()
	c.mu.Unlock()
	c.removeFiles(dead)
	if over := short - freed; over > 0 {
		return fmt.Errorf("%w: shm budget set to %s but %s more is pinned, in use or reserved",
			ErrNoSpace, humanize.IBytes(uint64(n)), humanize.IBytes(uint64(over)))
	}
	return nil
}

// trim evicts least recently used unpinned, unused entries until usage and
// reservations fit the base budget, as far as they can, and returns how
// many bytes are still over it.
func (c *Cache) trim() int64 {
	c.idxMu.Lock()
	if c.idxClosed {
		c.idxMu.Unlock()
		return 0
	}
	c.mu.Lock()
	b := c.base
	victims, _ := b.lruVictimsLocked(b.used+b.reserved-b.maxBytes, nil)
	dead := c.evictLocked(victims, nil)
	over := b.used + b.reserved - b.maxBytes
	c.mu.Unlock()
	c.deleteRecords(victims)
	c.idxMu.Unlock()
	c.removeFiles(dead)
	return over
}

// trimHot demotes least recently used unpinned, unused shm copies until the
// shm tier fits its budget, as far as it can, and returns how many bytes
// are still over it.
func (c *Cache) trimHot() int64 {
	c.mu.Lock()
	h := c.hot
	victims, _ := h.lruVictimsLocked(h.used+h.reserved-h.maxBytes, nil)
	var dead []*entry
	for _, v := range victims {
		dead = c.unhotLocked(v.owner, dead)
	}
	over := h.used + h.reserved - h.maxBytes
	c.mu.Unlock()
	c.removeFiles(dead)
	return over
}
