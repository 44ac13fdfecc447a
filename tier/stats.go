package tier

import (
	"context"
	"fmt"
	"math"

	"github.com/dustin/go-humanize"

	"github.com/cacheagent/cacheagent/stats"
)

// Stats returns a snapshot of every tier's usage and counters, fastest
// first: the shm tier above the disk tier, if there is one, then the base
// tier, which holds every cached object (see stats.Cache). Hits are split
// by the tier that served them. It costs O(1), whatever the number of
// entries: the tiers keep their figures as copies change.
func (c *Cache) Stats() stats.Cache {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.statsLocked()
}

// statsLocked is Stats with c.mu held.
func (c *Cache) statsLocked() stats.Cache {
	b, n := c.base, c.stats
	base := stats.Tier{Name: string(b.name), Dir: c.cfg.dir, Entries: int64(b.copies),
		UsedBytes: b.used, MaxBytes: b.maxBytes, ReservedBytes: b.reserved, PinnedBytes: b.pinnedBytes,
		DirtyBytes: b.held, PendingBytes: b.pending, Hits: n.hits - n.shmHits, Misses: n.misses, Revalidations: n.revalidations,
		Fills: n.fills, BytesFetched: n.bytesFetched, Evictions: n.evictions, Damaged: n.damaged}
	n.verify.fill(&base)
	_, base.InUseBytes = b.fixedBytesLocked()
	base.SetHitRatio()
	h := c.hot
	if h == nil {
		return stats.Cache{Tiers: []stats.Tier{base}}
	}
	// Every open the shm tier did not serve, the base tier served or
	// fetched.
	shm := stats.Tier{Name: string(h.name), Dir: c.cfg.shmDir, Entries: int64(h.copies),
		UsedBytes: h.used, MaxBytes: h.maxBytes, ReservedBytes: h.reserved, PinnedBytes: h.pinnedBytes,
		PendingBytes: h.pending, Hits: n.shmHits, Misses: n.hits - n.shmHits + n.misses,
		Evictions: n.demotions, Promotions: n.promotions, PromotionsSkipped: n.promoteSkips}
	n.shmVerify.fill(&shm)
	_, shm.InUseBytes = h.fixedBytesLocked()
	shm.SetHitRatio()
	return stats.Cache{Tiers: []stats.Tier{shm, base}}
}

// MaxBytes returns the base tier's byte budget (as SetMaxBytes last
// set it, or as configured).
func (c *Cache) MaxBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.maxBytes
}

// SetPrefetchParallelism changes how many objects Prefetch and the
// planner keep in flight (Config.PrefetchParallelism) to n, at least 1:
// for the planner at once, for a Prefetch from its start.
func (c *Cache) SetPrefetchParallelism(n int) {
	c.plans.inflight.Store(int32(min(max(n, 1), math.MaxInt32)))
	c.plans.notify()
}

// PrefetchParallelism returns how many objects Prefetch and the planner
// keep in flight (as SetPrefetchParallelism last set it, or as
// configured).
func (c *Cache) PrefetchParallelism() int { return int(c.plans.inflight.Load()) }

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
	victims, _ := b.lruVictimsLocked(b.committedLocked()-b.maxBytes, nil)
	dead := c.evictLocked(victims, nil)
	over := b.committedLocked() - b.maxBytes
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

// fill copies the verification counts into t.
func (v verifyCounters) fill(t *stats.Tier) {
	t.VerifiedBytes, t.Verified, t.Unverifiable, t.Corrupt = v.bytes, v.verified, v.unverifiable, v.corrupt
}
