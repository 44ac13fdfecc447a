package tier

import (
	"sync"
)

// A packed object's blocks are punched out of its segment only once the
// deletion of its index record is durable. The index is written without
// syncs (a lost record only loses a cached object), and a punch is
// filesystem metadata that reaches the disk on its own within seconds: if
// a power loss kept the punch and lost the deletion, the next start would
// adopt the record (its segment still reaches the object's end) and serve
// the hole, zeros. So evictions queue their copies (punches.add) and
// flush: one index sync for everything queued, then the punches. Flushes
// run one at a time, so the evictions that queue while one syncs share the
// next sync. (Flushing behind the fills, on the packer, was tried: it made
// TestClairvoyantCache in package loader, a loader at the edge of its
// budget, fail with ErrNoSpace in 19 runs of 20, and the session that
// tried it found no cause in its time; flushing in line, 0 of 20.)

// punches are the gone packed copies whose regions wait for a flush.
type punches struct {
	// flushMu makes flushes one at a time, so a flush returns only after
	// every region queued before it began is punched (or kept for the
	// next, if the index could not be synced).
	flushMu sync.Mutex
	mu      sync.Mutex // a leaf lock guarding pending
	pending []*entry
}

// add queues es, gone packed copies.
func (p *punches) add(es []*entry) {
	p.mu.Lock()
	p.pending = append(p.pending, es...)
	p.mu.Unlock()
}

// take returns the queued copies and empties the queue.
func (p *punches) take() []*entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.pending
	p.pending = nil
	return q
}

// queuePunches queues gone packed copies and flushes.
func (c *Cache) queuePunches(es []*entry) {
	if len(es) == 0 {
		return
	}
	c.punch.add(es)
	c.flushPunches()
}

// flushPunches makes the index's deletions durable and punches the regions
// queued until now. If the index cannot be synced, the regions stay queued
// for the next flush (their bytes stay on disk meanwhile: never a hole a
// surviving record could name). After Close the index is closed, and its
// close made every deletion durable.
func (c *Cache) flushPunches() {
	c.punch.flushMu.Lock()
	defer c.punch.flushMu.Unlock()
	q := c.punch.take()
	if len(q) == 0 {
		return
	}
	// Each copy was dropped holding idxMu, which its dropper holds on
	// until the record's deletion is written (or failed: keepBytes). Once
	// idxMu is had, every deletion of q is written, and a sync from then
	// covers it; the sync itself needs no lock against writes (idxClosed
	// is set under idxSyncMu too).
	c.idxMu.Lock()
	//lint:ignore SA2001 a barrier: see above
	c.idxMu.Unlock()
	c.idxSyncMu.RLock()
	var err error
	if !c.idxClosed {
		err = c.idx.sync()
	}
	c.idxSyncMu.RUnlock()
	if err != nil {
		c.cfg.log.Warn("tier: make evictions durable before freeing their space; retrying at the next flush",
			"objects", len(q), "err", err)
		c.punch.add(q)
		return
	}
	// A copy whose record could not be deleted keeps its bytes (deleteRecords
	// set keepBytes holding idxMu, before the barrier above).
	regions := make(map[*segment][]region)
	n := 0
	c.mu.Lock()
	for _, e := range q {
		if !e.keepBytes {
			regions[e.seg] = append(regions[e.seg], region{e.rec.off, e.rec.blocks})
			n++
		}
	}
	c.mu.Unlock()
	c.hooks.Load().onPunching(n)
	for seg, rs := range regions {
		if err := punchRegions(seg, rs); err != nil {
			c.cfg.log.Warn("tier: free packed objects' space", "segment", seg.path, "err", err)
		}
	}
}
