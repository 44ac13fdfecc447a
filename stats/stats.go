// Package stats holds the figures cacheagent measures, each defined once:
// the package that measures a figure fills it, control carries it, metrics
// exports it, the CLI prints it.
//
// Adding a figure is adding a documented field here (with its JSON key)
// and filling it where it is measured; metrics exports it with one row of
// its table. The package imports only the standard library. Its types are
// plain values, safe to copy and to share once filled.
package stats

// Tier is one tier's usage and counters. Byte counts are in filesystem
// blocks. Counters only grow; the rest are gauges at the time of the
// snapshot.
type Tier struct {
	// Name is the tier's kind: "disk" or "shm".
	Name string `json:"name"`
	// Dir is the tier's directory.
	Dir string `json:"dir"`
	// Entries is the number of objects with a copy in the tier.
	Entries int64 `json:"entries"`
	// UsedBytes is the space the tier's copies occupy, including copies
	// that left the cache but are kept alive by open handles.
	UsedBytes int64 `json:"used_bytes"`
	// MaxBytes is the tier's byte budget.
	MaxBytes int64 `json:"max_bytes"`
	// PinnedBytes is the space of pinned copies (in shm: pinned hot).
	PinnedBytes int64 `json:"pinned_bytes"`
	// ReservedBytes is the space set aside by fills (in shm: promotions)
	// in progress.
	ReservedBytes int64 `json:"reserved_bytes"`
	// DirtyBytes is the space held for files not in the bucket yet (a
	// checkpoint's before its upload): counted in the budget, never
	// evicted. Base tier only.
	DirtyBytes int64 `json:"dirty_bytes"`
	// InUseBytes is the space of unpinned copies with open handles (leases,
	// reads), including PendingBytes.
	InUseBytes int64 `json:"in_use_bytes"`
	// PendingBytes is the space of copies that left the cache while handles
	// used them (evicted, replaced by a newer generation, or damaged): each
	// is deleted, and its space freed, when its last handle closes.
	PendingBytes int64 `json:"pending_bytes"`
	// Hits counts the opens this tier served; Misses the opens it could not
	// serve (the base tier's: those that fetched; the shm tier's: those
	// served by the base tier or fetched).
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
	// HitRatio is Hits/(Hits+Misses); 0 before any open.
	HitRatio float64 `json:"hit_ratio"`
	// Fills counts the objects downloaded into the tier; BytesFetched
	// their bytes. Only the base tier fills.
	Fills        int64 `json:"fills"`
	BytesFetched int64 `json:"bytes_fetched"`
	// Revalidations counts the generation checks sent to the source for
	// cached objects (base tier).
	Revalidations int64 `json:"revalidations"`
	// Evictions counts the copies removed to make room or by evict; in the
	// shm tier, the demotions (to make room, by demote, with their entry,
	// or damaged).
	Evictions int64 `json:"evictions"`
	// Damaged counts the copies dropped because their file was deleted,
	// replaced, truncated or written to behind the cache's back (base
	// tier; a damaged shm copy counts as an eviction of the shm tier).
	Damaged int64 `json:"damaged"`
	// VerifiedBytes counts the bytes of the tier's copies read by
	// verification (tier.Cache.Verify: cacheagent verify, the scrub);
	// Verified the copies whose CRC32C matched the index, Unverifiable the
	// copies indexed without a CRC32C (checked by size only: filled
	// before copies of sources without one got their bytes' CRC32C), Corrupt
	// the copies whose bytes did not match (or could not be read) and
	// were dropped.
	VerifiedBytes int64 `json:"verified_bytes"`
	Verified      int64 `json:"verified"`
	Unverifiable  int64 `json:"unverifiable"`
	Corrupt       int64 `json:"corrupt"`
	// Promotions counts the copies made into the tier from the one below
	// it; PromotionsSkipped the promotions that did not fit (budget or
	// filesystem full). Only a tier above another (shm above disk)
	// promotes.
	Promotions        int64 `json:"promotions,omitempty"`
	PromotionsSkipped int64 `json:"promotions_skipped,omitempty"`
}

// SetHitRatio sets t.HitRatio from t.Hits and t.Misses.
func (t *Tier) SetHitRatio() {
	t.HitRatio = 0
	if n := t.Hits + t.Misses; n > 0 {
		t.HitRatio = float64(t.Hits) / float64(n)
	}
}

// Cache is a tiered cache's usage and counters: what tier.Cache.Stats
// returns.
type Cache struct {
	// Tiers are the cache's tiers, fastest first: the shm tier, when there
	// is one above the disk tier, then the base tier, which holds every
	// cached object (the disk tier, or shm in shm-only mode). A Cache from
	// tier.Cache.Stats has one or two.
	Tiers []Tier `json:"tiers"`
}

// Base returns the base tier: the last, which holds every cached object.
// It returns the zero Tier if c has none.
func (c Cache) Base() Tier {
	if len(c.Tiers) == 0 {
		return Tier{}
	}
	return c.Tiers[len(c.Tiers)-1]
}

// Shm returns the shm tier above the base tier, and false if there is none
// (also in shm-only mode, where shm is the base tier).
func (c Cache) Shm() (Tier, bool) {
	if len(c.Tiers) < 2 {
		return Tier{}, false
	}
	return c.Tiers[0], true
}

// Hits counts the opens served from the cache, by any tier.
func (c Cache) Hits() int64 {
	var n int64
	for _, t := range c.Tiers {
		n += t.Hits
	}
	return n
}

// Misses counts the opens that fetched: the base tier's misses.
func (c Cache) Misses() int64 { return c.Base().Misses }
