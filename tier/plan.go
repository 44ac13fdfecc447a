package tier

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/plan"
	"github.com/cacheagent/cacheagent/stats"
)

// Access plans make the cache clairvoyant (see the package documentation,
// Plans): loaders announce the order in which they will open objects, and
// the cache prefetches ahead of them, promotes just before use, and evicts
// what is needed last. The policy itself is package plan; this file wires
// it to the tiers.

const (
	// planMeterSpan is the least span over which the planner measures its
	// aggregate fetch rate.
	planMeterSpan = 100 * time.Millisecond
	// planLookaheadTime is the least fetching time, at the measured
	// aggregate fetch rate, that the lookahead covers: a reader that
	// pauses (a slow step, a checkpoint, a burst of page faults) lets the
	// lookahead fill, and a shorter one would leave the link idle while
	// it catches up.
	planLookaheadTime = 2 * time.Second
	// planFetchHalfLife is the half-life of the fetch meter's average: a
	// link's rate changes with the objects and the other traffic on it, and
	// the lookahead should follow within a second or two.
	planFetchHalfLife = time.Second
	// promoteAhead is how many plan positions ahead of a reader cached
	// objects are queued for promotion to the shm tier.
	promoteAhead = 4
	// planBudgetShare is the share of the base budget that the lookahead
	// may hold, so plans never crowd out everything else.
	planBudgetShare = 2
)

// ErrNoPlan means AdvancePlan or DropPlan named a plan that is not
// announced.
var ErrNoPlan = errors.New("tier: no such plan")

// plans is what the cache knows of the announced plans. Every field but
// wake and inflight is guarded by Cache.mu.
type plans struct {
	// inflight is how many objects the planner fetches at once
	// (Config.PrefetchParallelism): enough to keep a downloader's
	// connections busy while each object's metadata lookup and first byte
	// are in flight; the downloader's budget, granted by priority, bounds
	// the connections they use. Measured (bench/pyplan.py, 2000
	// objects of 100 KiB behind a 20 ms first byte, on an idle host): 16
	// in flight took 4.1-4.3 s, 64 took 3.2 s on 8 + 8 connections and
	// 2.2 s on 32 + 32. Prefetch takes it as its window too, and
	// Cache.SetPrefetchParallelism changes it.
	inflight atomic.Int32
	wake     chan struct{} // capacity 1: wakes the planner goroutine
	idx      *plan.Index[string]
	readers  map[string]*reader       // by plan id
	objects  map[string]planned       // by index key: every object of every plan
	dirs     map[string]*planDir      // by index key of bucket and directory: those of objects
	failed   map[string]bool          // prefetches that failed; retried when re-announced
	busy     map[string]bool          // being prefetched by the planner
	sizes    int64                    // sum of the known sizes in objects
	known    int                      // how many sizes are known
	fetch    plan.Meter               // bytes per second the cache downloads, all downloads together
	meterAt  time.Time                // start of the span the fetch meter has not seen yet
	meterN   int64                    // bytes fetched in that span
	consume  plan.Meter               // bytes per second readers advance through plans
	stats    stats.Plan               // counters
	cands    []plan.Candidate[string] // scratch for victimsLocked
	ents     []*entry                 // scratch: the entries cands tag
	coldPos  []uint64                 // scratch: the frozen copies cands tag (see candidatesLocked)

	// gen counts the cached copies dropped (Cache.dropLocked): a walk's
	// frontier (reader.skip) holds while it has not moved.
	gen uint64
}

// reader is one plan's reader: its keys, its position, when it last
// advanced, and the positions it passed whose objects were not yet opened.
type reader struct {
	keys   []string
	cursor int
	at     time.Time
	// passed are positions before cursor, ascending, whose objects were
	// not opened when the cursor passed them (at most planTrail, the
	// latest): a reader's position runs ahead of its reads (a DataLoader's
	// sampler hands batches to workers that read them later), so these
	// are the objects needed soonest. The planner fetches the missing ones
	// first and drops those opened since (see passedLocked).
	passed []int
	// skip is where the planner's last walk over this plan stopped (see
	// planWalk.sequenceLocked): every position from promoteAhead past the
	// cursor up to it held a cached object, or one being fetched or
	// failed, as long as plans.gen is still skipGen.
	skip    int
	skipGen uint64
}

// planTrail is how many passed positions a reader's plan remembers (see
// reader.passed): more than a DataLoader keeps handed out (its workers
// times prefetch_factor batches), so an object never opened is forgotten
// once the reader is that far past it.
const planTrail = 1 << 14

// planned is one object of the plans: as announced (a non-zero
// generation pins it), how many plans hold it, its size if known, and
// whether it was opened since a plan holding it was last announced.
type planned struct {
	obj    object.Object
	refs   int
	size   int64
	opened bool
	// listed is the object as its directory's listing (started at
	// listedAt) gave it; zero if not listed.
	listed   object.Attrs
	listedAt time.Time
}

// newPlans returns the state of a cache without plans, whose planner
// fetches up to inflight objects at once.
func newPlans(inflight int) *plans {
	p := &plans{wake: make(chan struct{}, 1), idx: plan.NewIndex[string](),
		readers: make(map[string]*reader),
		fetch:   plan.Meter{HalfLife: planFetchHalfLife},
		objects: make(map[string]planned), dirs: make(map[string]*planDir),
		failed: make(map[string]bool), busy: make(map[string]bool)}
	p.inflight.Store(int32(inflight))
	return p
}

// active reports whether victims are chosen by plan (p may be nil).
func (p *plans) active() bool { return p != nil && p.idx.Plans() > 0 }

// notify wakes the planner.
func (p *plans) notify() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Plan announces that a reader will open objs in this order, as plan id
// (replacing a plan with that id), and that it is at position 0. From then
// on, while any plan is announced, eviction in both tiers takes first the
// entries that no plan will use again (least recently used first), then
// the planned ones whose next use is farthest; pinned entries and entries
// in use are never evicted. A background planner prefetches the objects
// the plans need next, as far ahead as the measured fetch and consumption
// rates call for (never displacing an object needed sooner), and queues
// the next few cached ones for promotion to the shm tier.
func (c *Cache) Plan(ctx context.Context, id string, objs []object.Object) error {
	keys := make([]string, len(objs))
	for i, o := range objs {
		if err := checkObject(o); err != nil {
			return fmt.Errorf("tier: plan %q: %w", id, err)
		}
		keys[i] = indexKey(o.Bucket, o.Name)
	}
	end, err := c.begin()
	if err != nil {
		return err
	}
	defer end()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tier: plan %q: %w", id, err)
	}
	c.mu.Lock()
	p := c.plans
	p.dropLocked(id)
	p.idx.Announce(id, keys)
	r := &reader{at: time.Now()}
	seen := make(map[string]bool, len(keys))
	for i, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		pl := p.objects[k]
		if pl.refs == 0 {
			p.addDirLocked(objs[i])
		}
		pl.obj, pl.refs, pl.opened = objs[i], pl.refs+1, false
		p.objects[k] = pl
		delete(p.failed, k)
	}
	r.keys = keys
	p.readers[id] = r
	c.mu.Unlock()
	p.notify()
	return nil
}

// AdvancePlan reports that plan id's reader is about to open the object
// at position pos; what comes before is behind it. It fails with
// ErrNoPlan for a plan that is not announced.
func (c *Cache) AdvancePlan(ctx context.Context, id string, pos int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tier: advance plan %q: %w", id, err)
	}
	c.mu.Lock()
	p := c.plans
	r := p.readers[id]
	if r == nil {
		c.mu.Unlock()
		return fmt.Errorf("tier: advance plan %q: %w", id, ErrNoPlan)
	}
	pos = min(max(pos, 0), len(r.keys))
	now := time.Now()
	if pos > r.cursor {
		var n int64
		avg := p.avgSize()
		for i, k := range r.keys[r.cursor:pos] {
			pl := p.objects[k]
			if pl.size > 0 {
				n += pl.size
			} else {
				n += avg
			}
			if !pl.opened {
				r.passed = append(r.passed, r.cursor+i)
			}
		}
		if over := len(r.passed) - planTrail; over > 0 {
			r.passed = append(r.passed[:0], r.passed[over:]...)
		}
		p.consume.Observe(now.Sub(r.at), float64(n))
	} else if pos < r.cursor {
		// Back (a reader that restarted): what lies ahead again is not
		// passed, and the planner's frontier says nothing of it.
		i, _ := slices.BinarySearch(r.passed, pos)
		r.passed = r.passed[:i]
		r.skip = 0
	}
	r.cursor, r.at = pos, now
	p.idx.Advance(id, pos)
	c.mu.Unlock()
	p.notify()
	return nil
}

// DropPlan forgets plan id. It fails with ErrNoPlan for a plan that is not
// announced.
func (c *Cache) DropPlan(ctx context.Context, id string) error {
	c.mu.Lock()
	ok := c.plans.dropLocked(id)
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("tier: drop plan %q: %w", id, ErrNoPlan)
	}
	return nil
}

// openedLocked records that planned object k (if planned) was opened.
func (p *plans) openedLocked(k string) {
	if pl, ok := p.objects[k]; ok && !pl.opened {
		pl.opened = true
		p.objects[k] = pl
	}
}

// evictAhead is how many plan positions ahead of a reader the planner may
// evict copies that a plan needs later to make room for the ones it needs
// sooner: enough to keep every fetch slot busy (see lookaheadLocked's
// floor). Farther ahead it only fills free space and the room of copies no
// plan needs again, so a cache smaller than a plan loses no hits to
// prefetching (a plan's second epoch over a cache of half its objects reads
// about half of them again).
func (p *plans) evictAhead() int { return int(p.inflight.Load()) + 1 }

// dueLocked reports whether planned object k is yet to be read: a plan
// holds it and it was not opened since. A reader's position may run ahead
// of its reads (a DataLoader's sampler runs ahead of its workers by their
// prefetch), so an object its plan has passed is done with only once
// opened, or when the plan is announced again or dropped.
func (p *plans) dueLocked(k string) bool {
	pl, ok := p.objects[k]
	return ok && !pl.opened
}

// dropLocked forgets plan id, if announced, and reports whether it was.
func (p *plans) dropLocked(id string) bool {
	r := p.readers[id]
	if r == nil {
		return false
	}
	delete(p.readers, id)
	p.idx.Remove(id)
	seen := make(map[string]bool, len(r.keys))
	for _, k := range r.keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		pl := p.objects[k]
		if pl.refs--; pl.refs > 0 {
			p.objects[k] = pl
			continue
		}
		if pl.size > 0 {
			p.sizes -= pl.size
			p.known--
		}
		p.dropDirLocked(pl.obj)
		delete(p.objects, k)
		delete(p.failed, k)
	}
	return true
}

// noteSizeLocked records the size of planned object k.
func (p *plans) noteSizeLocked(k string, size int64) {
	pl, ok := p.objects[k]
	if !ok || pl.size == size {
		return
	}
	if pl.size > 0 {
		p.sizes -= pl.size
		p.known--
	}
	pl.size = size
	p.objects[k] = pl
	p.sizes += size
	p.known++
}

// avgSize is the mean size of the planned objects whose size is known, or
// 0 if none is.
func (p *plans) avgSize() int64 {
	if p.known == 0 {
		return 0
	}
	return p.sizes / int64(p.known)
}

// PlanStats returns a snapshot of the plans and the planner's counters.
func (c *Cache) PlanStats() stats.Plan {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.plans
	s := p.stats
	s.Plans, s.Objects = len(p.readers), len(p.objects)
	s.FetchRate, _ = p.fetch.Rate()
	s.ConsumeRate, _ = p.consume.Rate()
	return s
}

// PromoteObjects copies each of objs that is cached (at its generation,
// if one is given) into the shm tier, synchronously, like Promote does for
// a prefix. It returns how many it copied and the failures joined
// (ErrNoSpace for those that do not fit); without a shm tier it returns
// ErrNoShm.
func (c *Cache) PromoteObjects(ctx context.Context, objs []object.Object) (int, error) {
	end, err := c.begin()
	if err != nil {
		return 0, err
	}
	defer end()
	if c.hot == nil {
		return 0, c.noShm()
	}
	return c.promoteAll(ctx, c.planEntries(objs))
}

// FetchObjects makes sure every one of objs is cached, downloading what is
// missing at priority p, as Prefetch does. An object with a Generation is
// cached at exactly that generation (stat'ed first unless cached at it).
func (c *Cache) FetchObjects(ctx context.Context, objs []object.Object, p object.Priority) error {
	return c.fetchObjects(ctx, objs, p, nil)
}

// fetchObjects is FetchObjects with Prefetch's progress callback.
func (c *Cache) fetchObjects(ctx context.Context, objs []object.Object, p object.Priority, progress func(Progress)) error {
	var errs []error
	as := make([]object.Attrs, 0, len(objs))
	for _, o := range objs {
		if o.Generation == 0 {
			as = append(as, object.Attrs{Object: o}) // Prefetch stats it
			continue
		}
		c.mu.Lock()
		e := c.entryLocked(indexKey(o.Bucket, o.Name))
		var a object.Attrs
		if e != nil && e.rec.gen == o.Generation {
			a = e.attrs()
		}
		c.mu.Unlock()
		if a.Generation == 0 {
			var err error
			if a, err = c.cfg.src.Stat(ctx, o); err != nil {
				errs = append(errs, fmt.Errorf("tier: fetch %s: %w", o, err))
				continue
			}
		}
		as = append(as, a)
	}
	return errors.Join(append(errs, c.Prefetch(ctx, as, p, progress))...)
}
