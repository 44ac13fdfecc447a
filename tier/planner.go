package tier

import (
	"context"
	"errors"
	"time"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/plan"
)

// victimsLocked is eviction while plans are announced: among st's unused,
// unpinned copies (never skip), those plan.Index.Select picks to free need
// bytes, in eviction order (all of them if they cannot). It walks the
// whole LRU list and looks up each copy's next use: O(n) per eviction.
func (p *plans) victimsLocked(st *store, need int64, skip *entry) (victims []*entry, freed int64) {
	if need <= 0 {
		return nil, 0
	}
	cands := p.candidatesLocked(st, skip)
	n, freed := p.idx.Select(cands, need, -1)
	victims = make([]*entry, n)
	for i, c := range cands[:n] {
		victims[i] = p.ents[c.Tag]
	}
	clear(p.ents)
	return victims, freed
}

// candidatesLocked returns st's evictable copies (not in use, not pinned,
// not skip) as candidates, least recently used first; each Tag indexes
// p.ents. The slices are scratch space, valid until the next call.
func (p *plans) candidatesLocked(st *store, skip *entry) []plan.Candidate[string] {
	p.cands, p.ents = p.cands[:0], p.ents[:0]
	var age int64
	for e := st.lru.back(); e != nil; e = st.lru.prev(e) {
		age++ // the least recently used copy gets the smallest LastUse
		if e.inUseLocked() || e == skip {
			continue
		}
		p.cands = append(p.cands, plan.Candidate[string]{Key: e.key, Size: e.rec.blocks, LastUse: age, Tag: len(p.ents)})
		p.ents = append(p.ents, e)
	}
	return p.cands
}

// planLoop is the planner goroutine: each time a plan is announced or
// advances, it prefetches until the plans' lookahead is cached (or
// nothing more fits), until Close.
func (c *Cache) planLoop() {
	defer func() { c.hooks.Load().onExit("planner") }() // the hooks in place at exit
	for {
		select {
		case <-c.stop:
			return
		case <-c.plans.wake:
		}
		for c.planRound() {
		}
		c.hooks.Load().onPlanned(0, nil) // idle until the next wake
	}
}

// planRound prefetches the next batch of planned objects that are missing
// and reports whether there was one.
func (c *Cache) planRound() bool {
	c.mu.Lock()
	todo := c.planNextLocked()
	c.mu.Unlock()
	if len(todo) == 0 {
		return false
	}
	ctx, cancel := c.detach(context.Background())
	defer cancel()
	start := time.Now()
	var fetched int64
	err := c.fetchObjects(ctx, todo, fetch.Plan, func(pr Progress) { fetched = pr.BytesFetched })
	took := time.Since(start)
	c.mu.Lock()
	p := c.plans
	for _, o := range todo {
		k := indexKey(o.Bucket, o.Name)
		delete(p.busy, k)
		if e := c.entries[k]; e != nil {
			p.noteSizeLocked(k, e.rec.size)
		} else if _, ok := p.objects[k]; ok {
			p.failed[k] = true // not retried until announced again
		}
	}
	if fetched > 0 {
		p.fetch.Observe(took, float64(fetched))
		p.stats.Prefetched += int64(len(todo))
		p.stats.PrefetchedBytes += fetched
	}
	c.mu.Unlock()
	c.hooks.Load().onPlanned(len(todo), err)
	return !errors.Is(err, ErrClosed)
}

// planNextLocked returns the objects to prefetch next: walking the plans'
// upcoming objects in order of next use, until the lookahead's bytes are
// covered, the missing ones that fit without evicting anything needed
// sooner (up to planFetchBatch). Cached ones near the readers are queued
// for promotion.
func (c *Cache) planNextLocked() []fetch.Object {
	p := c.plans
	if p.idx.Plans() == 0 {
		return nil
	}
	item := p.avgSize()
	ahead := p.lookaheadLocked(item, c.base.maxBytes/planBudgetShare)
	free := c.base.maxBytes - c.base.used - c.base.reserved
	var (
		cands []plan.Candidate[string] // evictable copies with their Next; set on first need
		taken int64                    // bytes of them counted as evicted already
		held  int64                    // bytes (or objects, while no size is known) of lookahead covered
		todo  []fetch.Object
	)
	for k, d := range p.idx.Upcoming() {
		if held >= ahead || len(todo) == planFetchBatch {
			break
		}
		size := int64(1)
		if item > 0 {
			size = item
		}
		if e := c.entries[k]; e != nil {
			p.noteSizeLocked(k, e.rec.size)
			if d < promoteAhead {
				c.queuePromoteLocked(e)
			}
			if item > 0 {
				size = e.rec.size
			}
			held += size
			continue
		}
		held += size
		if p.busy[k] || p.failed[k] {
			continue
		}
		if need := size - free; item > 0 && need > 0 {
			if cands == nil {
				cands = p.candidatesLocked(c.base, nil)
				p.idx.Select(cands, 0, -1) // fills in Next
			}
			// Victims go farthest first, so those taken so far all lie
			// beyond d too: what is left beyond d must cover need.
			if farther(cands, d)-taken < need {
				break // only objects needed sooner could make room
			}
			taken += need
			free += need
		}
		free -= size
		p.busy[k] = true
		todo = append(todo, p.objects[k].obj)
	}
	clear(p.ents)
	return todo
}

// lookaheadLocked returns how far ahead of the readers to hold objects of
// item bytes (0: unknown), at most limit bytes: bytes from the measured
// rates, or 2 objects while no size is known.
func (p *plans) lookaheadLocked(item, limit int64) int64 {
	if item <= 0 {
		return 2
	}
	fr, _ := p.fetch.Rate()
	cr, _ := p.consume.Rate()
	ahead := plan.Lookahead(plan.Rates{Fetch: fr, Consume: cr}, item, p.remainingLocked(item), limit)
	p.stats.Lookahead = ahead
	return ahead
}

// remainingLocked estimates the bytes the plans hold ahead of their
// readers, each object counted as item bytes.
func (p *plans) remainingLocked(item int64) int64 {
	var n int64
	for _, r := range p.readers {
		n += int64(len(r.keys)-r.cursor) * item
	}
	return n
}

// farther returns the bytes of the candidates whose next use is farther
// than d.
func farther(cands []plan.Candidate[string], d int) int64 {
	var n int64
	for _, c := range cands {
		if c.Next > d {
			n += c.Size
		}
	}
	return n
}
