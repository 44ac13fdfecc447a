package tier

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/dustin/go-humanize"
)

// promoteQueueLen bounds the promotions waiting for the promoter. When it is
// full, promotions on hits are dropped; later Opens queue them again.
const promoteQueueLen = 256

// newHotCopyLocked returns the hot copy of base entry e for a file published
// in the hot tier; installHotLocked makes it live. Of its record only the
// immutable fields and blocks are used.
func (c *Cache) newHotCopyLocked(e *entry, blocks int64, ident fileIdent) *entry {
	r := e.rec
	r.blocks = blocks
	r.packed, r.seg, r.off = false, 0, 0 // a file of its own
	return &entry{key: e.key, st: c.hot, owner: e, id: e.id, ident: ident, rec: r}
}

// installHotLocked makes h the live hot copy of base entry e and marks the
// handles on e's base copy stale: a better copy exists.
func (c *Cache) installHotLocked(e, h *entry) {
	h.state = live
	e.hot = h
	if !e.rec.inShm {
		e.rec.inShm = true
		c.markDirtyLocked(e)
	}
	e.markStaleLocked()
	c.hot.used += h.rec.blocks
	c.hot.copies++
	if e.rec.hotPin {
		c.hot.pinnedBytes += h.rec.blocks
	} else {
		c.hot.lru.pushFront(h)
	}
	syncObjectLocked(e)
}

// unhotLocked takes the hot copy of base entry e out of the cache (a
// demotion): e serves from its base copy again, with a fresh stale flag for
// new handles. The copy is doomed: with handles open it becomes a zombie,
// otherwise it is buried and appended to dead.
func (c *Cache) unhotLocked(e *entry, dead []*entry) []*entry {
	h := e.hot
	e.hot = nil
	e.rec.inShm = false
	c.markDirtyLocked(e)
	if e.state == live {
		e.renewStaleLocked()
	}
	c.hot.copies--
	if h.linked() {
		c.hot.lru.remove(h)
	} else {
		c.hot.pinnedBytes -= h.rec.blocks
	}
	h.doomed = true
	c.stats.demotions++
	dead = c.retireLocked(h, dead)
	h.syncInUseLocked()
	e.syncInUseLocked()
	return dead
}

// notePromoteLocked counts an Open of live base entry e that is not in the
// shm tier, and queues its promotion once it has been opened PromoteHits
// times within PromoteWindow, or at once if it is pinned hot.
func (c *Cache) notePromoteLocked(e *entry, now int64) {
	if c.hot == nil || e.hot != nil || e.promoting {
		return
	}
	if e.rec.hotPin || e.countOpen(now, c.cfg.promoteHits, c.cfg.promoteWindow) {
		c.queuePromoteLocked(e)
	}
}

// countOpen counts an Open at now (unix ns) and reports whether e has been
// opened hits times within the current window: windows start at the first
// Open after the previous one ended. hits ≤ 0 never promotes.
func (e *entry) countOpen(now int64, hits int, window time.Duration) bool {
	if hits <= 0 {
		return false
	}
	if e.winHits == 0 || now-e.winStart > int64(window) {
		e.winStart, e.winHits = now, 0
	}
	if e.winHits < math.MaxInt32 {
		e.winHits++
	}
	return int(e.winHits) >= hits
}

// queuePromoteLocked hands e to the promoter unless its queue is full.
func (c *Cache) queuePromoteLocked(e *entry) {
	if c.hot == nil || e.hot != nil || e.promoting {
		return
	}
	select {
	case c.promoteQ <- e:
		e.promoting = true
		e.winHits = 0
	default: // a later Open tries again
	}
}

// promoteLoop is the promoter goroutine: it restores the hot pins (whose
// shm copies a reboot clears), then promotes what Opens, the planner and
// StageObjects queue, one object at a time, each once the cache is quiet
// (no download in flight, no open for promoteQuiet) or after promoteYield,
// until Close.
func (c *Cache) promoteLoop() {
	defer func() { c.hooks.Load().onExit("promoter") }()
	c.mu.Lock()
	var pinned []*entry
	for _, e := range c.entries {
		if e.rec.hotPin && e.hot == nil && !e.promoting {
			e.promoting = true
			pinned = append(pinned, e)
		}
	}
	c.mu.Unlock()
	for _, e := range pinned {
		select {
		case <-c.stop:
			return
		default:
			c.promoteQueued(e)
		}
	}
	for {
		select {
		case e := <-c.promoteQ:
			c.dls.yield(promoteYield, promoteQuiet, c.stop)
			c.promoteQueued(e)
		case <-c.stop:
			return
		}
	}
}

// promoteQueued promotes one queued entry in the background.
func (c *Cache) promoteQueued(e *entry) {
	_, err := c.promoteShared(context.Background(), e)
	c.mu.Lock()
	e.promoting = false
	c.mu.Unlock()
	switch {
	case err == nil || errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled):
	case errors.Is(err, ErrNoSpace): // counted in the shm tier's PromotionsSkipped (Stats)
		c.cfg.log.Debug("tier: promotion skipped", "object", e.attrs().Object.String(), "err", err)
	default:
		c.cfg.log.Warn("tier: promotion failed", "object", e.attrs().Object.String(), "err", err)
	}
	c.hooks.Load().onPromoted(e.key, err)
}

// reserveHot sets aside n bytes of the shm budget for promoting e, demoting
// least recently used unused shm copies as needed. It does not wait for
// other promotions: if pinned, in-use and reserved copies leave no room it
// fails with ErrNoSpace.
func (c *Cache) reserveHot(n int64, e *entry) error {
	h := c.hot
	c.mu.Lock()
	if n > h.maxBytes {
		c.mu.Unlock()
		return fmt.Errorf("%w: %s needs %s of shm, more than its whole budget of %s", ErrNoSpace,
			e.attrs().Object, humanize.IBytes(uint64(n)), humanize.IBytes(uint64(h.maxBytes)))
	}
	var dead []*entry
	if short := h.used + h.reserved + n - h.maxBytes; short > 0 {
		victims, freed := h.lruVictimsLocked(short, nil)
		if freed < short {
			pinned, inUse := h.fixedBytesLocked()
			err := fmt.Errorf("%w: %s needs %s of shm; its budget of %s holds %s pinned, %s in use and %s reserved",
				ErrNoSpace, e.attrs().Object, humanize.IBytes(uint64(n)), humanize.IBytes(uint64(h.maxBytes)),
				humanize.IBytes(uint64(pinned)), humanize.IBytes(uint64(inUse)), humanize.IBytes(uint64(h.reserved)))
			c.mu.Unlock()
			return err
		}
		for _, v := range victims {
			dead = c.unhotLocked(v.owner, dead)
		}
	}
	h.reserved += n
	c.mu.Unlock()
	c.removeFiles(dead)
	return nil
}

// unreserveHot releases a shm reservation that did not become a copy.
func (c *Cache) unreserveHot(n int64) {
	c.mu.Lock()
	c.hot.reserved -= n
	c.hot.signalLocked()
	c.mu.Unlock()
}

// commitHot makes h, published in the shm tier, the hot copy of e and turns
// the reservation into used space. It reports false (the caller removes the
// file) if e left the cache or got a hot copy meanwhile. dead lists copies
// demoted because h occupies more blocks than reserved: the caller passes
// them to removeFiles.
func (c *Cache) commitHot(e, h *entry, reservation int64) (ok bool, dead []*entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hot.reserved -= reservation
	c.hot.signalLocked()
	if e.state != live || e.hot != nil {
		return false, nil
	}
	c.installHotLocked(e, h)
	c.stats.promotions++
	over, _ := c.hot.lruVictimsLocked(c.hot.used+c.hot.reserved-c.hot.maxBytes, h)
	for _, v := range over {
		dead = c.unhotLocked(v.owner, dead)
	}
	return true, dead
}
