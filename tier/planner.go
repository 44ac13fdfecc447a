package tier

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/plan"
)

// victimsLocked is eviction while plans are announced: among st's unused,
// unpinned copies (never skip), those plan.Index.Select picks to free need
// bytes, in eviction order (all of them if they cannot); frozen ones
// chosen are thawed. It walks every copy (the cold set's too) and looks up
// each one's next use: O(n) per eviction.
func (p *plans) victimsLocked(st *store, need int64, skip *entry) (victims []*entry, freed int64) {
	if need <= 0 {
		return nil, 0
	}
	cands := p.candidatesLocked(st, skip)
	n, freed := p.idx.Select(cands, need, -1)
	victims = make([]*entry, n)
	var thawed []*entry
	for i, c := range cands[:n] {
		if c.Tag < 0 { // frozen: its record stays where it is until thawed
			victims[i] = st.cold.thawAt(p.coldPos[-c.Tag-1])
			thawed = append(thawed, victims[i])
		} else {
			victims[i] = p.ents[c.Tag]
		}
	}
	if len(thawed) > 0 {
		st.cold.link(thawed)
	}
	clear(p.ents)
	p.coldPos = p.coldPos[:0]
	return victims, freed
}

// candidatesLocked returns st's evictable copies (not in use, not pinned,
// not skip) as candidates, least recently used first (the frozen ones,
// then the LRU's); a Tag ≥ 0 indexes p.ents, a Tag < 0 is a frozen copy at
// p.coldPos[-Tag-1]. The slices (and the keys of frozen copies, which alias
// the cold set) are valid until the next call or change of the cache.
func (p *plans) candidatesLocked(st *store, skip *entry) []plan.Candidate[string] {
	p.cands, p.ents, p.coldPos = p.cands[:0], p.ents[:0], p.coldPos[:0]
	var age int64
	if st.cold.each != nil {
		st.cold.each(func(key string, r record, pos uint64) {
			age++
			keep := false
			if st.own.owns != nil {
				keep = st.own.owns(recAttrs(strings.Clone(key), r))
			}
			p.cands = append(p.cands, plan.Candidate[string]{Key: key, Size: r.blocks, LastUse: age,
				Due: p.dueLocked(key), Keep: keep, Tag: -len(p.coldPos) - 1})
			p.coldPos = append(p.coldPos, pos)
		})
	}
	for e := st.lru.back(); e != nil; e = st.lru.prev(e) {
		age++ // the least recently used copy gets the smallest LastUse
		if e.inUseLocked() || e == skip {
			continue
		}
		p.cands = append(p.cands, plan.Candidate[string]{Key: e.key, Size: e.rec.blocks, LastUse: age, Due: p.dueLocked(e.key), Keep: st.own.keepLocked(e),
			Tag: len(p.ents)})
		p.ents = append(p.ents, e)
	}
	return p.cands
}

// planLoop is the planner goroutine: each time a plan is announced or
// advances, and each time one of its fetches ends, it starts fetching the
// next planned objects that are missing, keeping up to plans.inflight in
// flight, until the plans' lookahead is cached (or nothing more fits). It
// owns the fetch goroutines and waits for them before it returns, at Close.
func (c *Cache) planLoop() {
	defer func() { c.hooks.Load().onExit("planner") }() // the hooks in place at exit
	ctx, cancel := c.detach(context.Background())
	done := make(chan planResult)
	jobs := make(chan object.Object)
	var wg sync.WaitGroup
	inflight, workers := 0, 0
	defer func() {
		cancel()
		for ; inflight > 0; inflight-- {
			<-done
		}
		close(jobs)
		wg.Wait()
	}()
	for {
		select {
		case <-c.stop:
			return
		case <-c.plans.wake:
		case r := <-done:
			// Take every fetch that has ended before walking the plans
			// again: one walk (over the lookahead) for all of them.
			for more := true; more; {
				inflight--
				c.planDone(r)
				c.hooks.Load().onPlanned(1, r.err)
				select {
				case r = <-done:
				default:
					more = false
				}
			}
		}
		if limit := int(c.plans.inflight.Load()); inflight < limit && ctx.Err() == nil {
			c.mu.Lock()
			todo := c.planNextLocked(limit - inflight)
			list := todo
			if c.plans.avgSize() == 0 {
				// No size known: the lookahead is two objects until a
				// listing (or fetch) ends. List the directories of
				// those the planner fetches next meanwhile, not one
				// round trip later.
				list = append(c.plans.soonLocked(limit), todo...)
			}
			lists := c.plans.startListingsLocked(list, time.Now())
			c.mu.Unlock()
			for _, l := range lists {
				wg.Go(func() { c.listPlanDir(ctx, l) })
			}
			// Each fetch goes to an idle worker, or a new one while
			// there are fewer than the limit. A worker is idle unless
			// its fetch is in flight, so with as many workers as the
			// limit one is idle (or about to be) for every fetch that
			// the limit lets start.
			for _, o := range todo {
				inflight++
				if workers < limit {
					select {
					case jobs <- o:
						continue
					default:
					}
					workers++
					wg.Go(func() { c.planWorker(ctx, jobs, done, o) })
					continue
				}
				jobs <- o
			}
		}
		if inflight == 0 {
			c.hooks.Load().onPlanned(0, nil) // idle until the next wake
		}
	}
}

// planResult is how one of the planner's fetches went.
type planResult struct {
	obj     object.Object
	fetched int64 // bytes downloaded
	err     error
}

// planWorker is one of the planner's fetching goroutines: it fetches first,
// then what jobs brings, until jobs is closed, sending each result to done.
// Small objects are filled on this goroutine (see shareHere), whose stack
// grows to the storage client's depth once, not once per object, on a
// context of its own (fillHere).
func (c *Cache) planWorker(ctx context.Context, jobs <-chan object.Object, done chan<- planResult, first object.Object) {
	here, release := fillHere(ctx)
	defer release()
	done <- c.planFetch(ctx, here, first)
	for o := range jobs {
		done <- c.planFetch(ctx, here, o)
	}
}

// planFetch fetches o at plan priority: by its listed attributes where
// its directory was listed (see planlist.go), else as FetchObjects does.
// here is the worker's context for small fills (see shareHere).
func (c *Cache) planFetch(ctx, here context.Context, o object.Object) planResult {
	r := planResult{obj: o}
	if a, ok := c.listedAttrs(ctx, o, planListTTL); ok {
		c.mu.Lock()
		c.plans.stats.Listed++
		c.mu.Unlock()
		r.fetched, _, r.err = c.prefetchOne(ctx, here, a, object.Plan)
		return r
	}
	r.err = c.fetchObjects(ctx, []object.Object{o}, object.Plan, func(pr Progress) { r.fetched = pr.BytesFetched })
	return r
}

// planDone records the end of one of the planner's fetches.
func (c *Cache) planDone(r planResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.plans
	k := indexKey(r.obj.Bucket, r.obj.Name)
	delete(p.busy, k)
	if e := c.entryLocked(k); e != nil {
		p.noteSizeLocked(k, e.rec.size)
	} else if _, ok := p.objects[k]; ok {
		p.failed[k] = true // not retried until announced again
	}
	if r.fetched > 0 {
		p.stats.Prefetched++
		p.stats.PrefetchedBytes += r.fetched
	}
}

// downloadStarted and downloadEnded keep the fetch meter: it sees the bytes
// of every download the cache makes (the planner's, readers' and prefetch
// jobs' alike, since they share the link) over the time downloads are in
// flight, in spans of at least planMeterSpan: the aggregate rate, which is
// what the lookahead needs.
func (c *Cache) downloadStarted() (end func(bytes int64)) {
	if c.dls.n.Add(1) == 1 {
		c.mu.Lock()
		c.plans.meterAt, c.plans.meterN = time.Now(), 0 // a busy span starts
		c.mu.Unlock()
	}
	return func(bytes int64) {
		c.mu.Lock()
		defer c.mu.Unlock()
		idle := c.dls.n.Add(-1) == 0
		p := c.plans
		p.meterN += bytes
		if span := time.Since(p.meterAt); span >= planMeterSpan || idle {
			if p.meterN > 0 {
				p.fetch.Observe(span, float64(p.meterN))
			}
			p.meterAt, p.meterN = time.Now(), 0
		}
		if idle {
			c.dls.signalIdle()
		}
	}
}

// planNextLocked returns the objects to prefetch next: walking the plans'
// upcoming objects in order of next use (first those their readers passed
// but have not opened, see reader.passed), until the lookahead's bytes are
// covered, the missing ones that fit without evicting anything needed
// sooner (at most max). Cached ones near the readers are queued for
// promotion.
func (c *Cache) planNextLocked(max int) []object.Object {
	p := c.plans
	if p.idx.Plans() == 0 {
		return nil
	}
	item := p.avgSize()
	w := planWalk{c: c, max: max, item: item,
		ahead: p.lookaheadLocked(item, c.base.maxBytes/planBudgetShare, c.hooks.Load()),
		free:  c.base.maxBytes - c.base.committedLocked()}
	for _, id := range slices.Sorted(maps.Keys(p.readers)) {
		if !w.passedLocked(p.readers[id]) {
			break
		}
	}
	if w.more() {
		if len(p.readers) == 1 && !p.idx.Repeats() {
			for _, r := range p.readers {
				w.sequenceLocked(r)
			}
		} else {
			for k, d := range p.idx.Upcoming() {
				if !w.considerLocked(k, d) {
					break
				}
			}
		}
	}
	clear(p.ents)
	p.coldPos = p.coldPos[:0]
	return w.todo
}

// soonLocked returns the planned objects the readers need next, at most
// n: those passed but not opened, then the upcoming ones.
func (p *plans) soonLocked(n int) []object.Object {
	var out []object.Object
	for _, id := range slices.Sorted(maps.Keys(p.readers)) {
		r := p.readers[id]
		for _, pos := range r.passed[:min(len(r.passed), n-len(out))] {
			out = append(out, p.objects[r.keys[pos]].obj)
		}
	}
	for k := range p.idx.Upcoming() {
		if len(out) >= n {
			break
		}
		out = append(out, p.objects[k].obj)
	}
	return out
}

// planWalk is one walk of planNextLocked over the planned objects.
type planWalk struct {
	c           *Cache
	max         int
	item, ahead int64
	free        int64                    // bytes free in the budget, less those of todo
	cands       []plan.Candidate[string] // evictable copies with their Next; set on first need
	taken       int64                    // bytes of them counted as evicted already
	held        int64                    // bytes (or objects, while no size is known) of lookahead covered
	todo        []object.Object
}

// more reports whether the walk goes on.
func (w *planWalk) more() bool { return w.held < w.ahead && len(w.todo) < w.max }

// passedLocked considers the objects r passed, in order, dropping from
// r.passed those opened since (or no longer planned); it reports whether
// the walk goes on.
func (w *planWalk) passedLocked(r *reader) bool {
	p := w.c.plans
	kept := r.passed[:0]
	for i, pos := range r.passed {
		k := r.keys[pos]
		if !p.dueLocked(k) {
			continue
		}
		kept = append(kept, pos)
		if !w.considerLocked(k, 0) {
			kept = append(kept, r.passed[i+1:]...)
			break
		}
	}
	r.passed = kept
	return w.more()
}

// sequenceLocked walks the only plan's positions from r's cursor on (its
// upcoming keys, none repeated), as Upcoming would, but skips from
// promoteAhead past the cursor to where the last walk stopped if no copy
// was dropped since: those positions all held a copy, or one being fetched
// or failed, and count as held at item bytes each. The planner walks after
// fetches end, and a walk over the whole lookahead each time (thousands of
// cached objects ahead of a fast reader) would cost O(lookahead) per
// object.
func (w *planWalk) sequenceLocked(r *reader) {
	gen := w.c.plans.gen
	pos := r.cursor
	for ; pos < len(r.keys); pos++ {
		if pos-r.cursor == promoteAhead && r.skipGen == gen && r.skip > pos {
			w.held += int64(r.skip-pos) * max(w.item, 1)
			if pos = r.skip; pos >= len(r.keys) {
				break
			}
		}
		if !w.considerLocked(r.keys[pos], pos-r.cursor) {
			break
		}
	}
	r.skip, r.skipGen = pos, gen
}

// considerLocked adds k, next used d positions ahead, to the walk: held
// if cached or being fetched, else to todo if it fits. It reports whether
// the walk goes on.
func (w *planWalk) considerLocked(k string, d int) bool {
	if !w.more() {
		return false
	}
	c, p := w.c, w.c.plans
	size := int64(1)
	if w.item > 0 {
		size = w.item
	}
	if e := c.entryLocked(k); e != nil {
		p.noteSizeLocked(k, e.rec.size)
		if d < promoteAhead {
			c.queuePromoteLocked(e)
		}
		if w.item > 0 {
			size = e.rec.size
		}
		w.held += size
		return true
	}
	w.held += size
	if p.busy[k] || p.failed[k] {
		return true
	}
	if need := size - w.free; w.item > 0 && need > 0 {
		if w.cands == nil {
			w.cands = p.candidatesLocked(c.base, nil)
			p.idx.Select(w.cands, 0, -1) // fills in Next
		}
		// Victims go farthest first, so those taken so far all lie
		// beyond d too: what is left beyond d must cover need. Past
		// the first evictAhead positions only copies no plan
		// needs again may go: evicting a copy needed later to fetch
		// one needed sooner trades a hit for a hit, and far ahead of
		// the readers it buys no time, only a later miss.
		limit := d
		if d >= p.evictAhead() {
			limit = plan.Never - 1
		}
		if farther(w.cands, limit)-w.taken < need {
			return false // only objects needed sooner could make room
		}
		w.taken += need
		w.free += need
	}
	w.free -= size
	p.busy[k] = true
	w.todo = append(w.todo, p.objects[k].obj)
	return true
}

// lookaheadLocked returns how far ahead of the readers to hold objects of
// item bytes (0: unknown), at most limit bytes: bytes from the measured
// rates (the fetch rate as h gives it, see testHooks.fetchRate), but never
// less than inflight+1 objects nor planLookaheadTime of fetching at the
// measured rate, or 2 objects while no size is known.
//
// The floor keeps every fetch slot busy while readers wait on the link: a
// consumption rate measured while readers wait is the fetch rate itself,
// so the rates alone would keep the lookahead at a few objects and leave
// the link idle between rounds of them.
func (p *plans) lookaheadLocked(item, limit int64, h *testHooks) int64 {
	if item <= 0 {
		return 2
	}
	fr, _ := p.fetch.Rate()
	fr = h.fetchRateOr(fr)
	cr, _ := p.consume.Rate()
	remaining := p.remainingLocked(item)
	ahead := plan.Lookahead(plan.Rates{Fetch: fr, Consume: cr}, item, remaining, limit)
	floor := max((int64(p.inflight.Load())+1)*item, int64(fr*planLookaheadTime.Seconds()))
	floor = min(floor, remaining)
	if limit > 0 {
		floor = min(floor, limit)
	}
	ahead = max(ahead, floor)
	p.stats.Lookahead = ahead
	return ahead
}

// remainingLocked estimates the bytes the plans hold ahead of their
// readers (and passed but not opened), each object counted as item bytes.
func (p *plans) remainingLocked(item int64) int64 {
	var n int64
	for _, r := range p.readers {
		n += int64(len(r.keys)-r.cursor+len(r.passed)) * item
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
