package tier

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// Locking (see Cache): idxMu, then mu; allocMu is a leaf. No I/O under mu;
// index I/O under idxMu; data files are written and deleted outside both.

// accessFlushInterval is how often last-access times (and in-shm flags) are
// written to the index. Hits update memory only; a crash loses at most this
// much LRU history.
const accessFlushInterval = 15 * time.Second

// earlyFlushGap is the least time between two flushes that trims ask for
// (see trimWarmLocked): enough to bound the index writes, short next to
// accessFlushInterval.
const earlyFlushGap = time.Second

// Cache is the cache: objects stored as files in a base tier (disk, or shm
// when shm-only) with a badger index, a byte budget and LRU eviction, and
// optionally a shm tier holding copies of the hottest objects. Create it
// with Open and release it with Close. Its methods are safe for concurrent
// use.
//
// Lock order: idxMu, then mu. allocMu is a leaf: nothing else is taken while
// it is held. Handle.Close takes mu.
type Cache struct {
	// Immutable after Open.
	cfg      settings
	base     *store // every cached object: the disk tier, or shm when shm-only
	hot      *store // the shm tier above the disk tier; nil if none
	idx      *index
	flights  singleflight.Group // fills, keyed by file id
	promos   singleflight.Group // promotions, keyed by file id
	promoteQ chan *entry        // promotions queued by Opens; nil without a hot tier
	segs     *segments          // the base tier's segment files (packed objects)
	packQ    chan *entry        // packed objects live but not yet durable, for the packer
	punch    punches            // evicted packed objects' regions, punched once their deletion is durable
	// idxSyncMu is held shared while flushPunches syncs the index
	// without idxMu (a sync needs no order with writes), and by Close to
	// close it.
	idxSyncMu sync.RWMutex
	dls       *downloads     // downloads in flight, which promotions give way to
	stop      chan struct{}  // closed by Close to stop the background goroutines
	flushNow  chan struct{}  // asks the flusher for a flush now (capacity 1)
	bg        sync.WaitGroup // the flusher, the promoter, the planner, the packer and the watcher
	// onJoin, if set (by tests, before use), is called with the number of
	// callers waiting on a fill each time one joins it.
	onJoin func(waiters int)
	// hooks lets tests observe and gate background work.
	hooks atomic.Pointer[testHooks]
	// reclaimers are OnNoSpace's callbacks.
	reclaimers reclaimers
	// plans holds the announced access plans (see plan.go); its fields
	// are guarded by mu.
	plans *plans

	// running counts public operations, fills and promotions in progress;
	// Close waits for it. Add only under mu while !closed, so no Add races
	// Close's Wait.
	running sync.WaitGroup

	// allocMu serialises the free-space check and fallocate of fills and
	// promotions, so two cannot both pass the check and together eat into
	// the headroom.
	allocMu sync.Mutex

	// idxMu serialises index writes together with the memory changes they
	// mirror, so badger sees the changes in the order memory made them:
	// every change to the set of entries or to their persisted fields (other
	// than access and check times and the in-shm flag, which the flusher
	// writes) is made holding idxMu. Index I/O happens under idxMu;
	// data-file I/O never does.
	idxMu     sync.Mutex
	idxClosed bool // guarded by idxMu

	// mu protects the fields below, both stores' accounting and every
	// entry's mutable fields. No I/O is done while holding mu.
	mu         sync.Mutex
	closed     bool
	cancels    map[uint64]context.CancelCauseFunc // detached contexts, cancelled by Close
	nextCancel uint64
	entries    map[string]*entry // live base entries by index key: the warm set
	byID       map[fileID]*entry // the same, by file id (for the watcher)
	// cold and pinnedCold hold the live base entries frozen at rest,
	// unpinned and pinned (see freeze.go); both nil before reconcile and
	// after Close.
	cold, pinnedCold *coldSet
	colds            [2]*coldSet               // scratch for coldSets
	urgencies        map[fileID]*sharedUrgency // urgency of each fill, shared by its waiters
	// dirty lists the entries marked dirty since the last flush (see
	// markDirtyLocked), so that a flush costs O(changes), not a walk of
	// every entry under mu. It may hold entries dropped since.
	dirty []*entry
	stats counters
}

// counters are cumulative event counts, guarded by Cache.mu.
type counters struct {
	hits, misses, revalidations, fills, bytesFetched, evictions int64
	shmHits, promotions, promoteSkips, demotions, damaged       int64
	verify, shmVerify                                           verifyCounters // by tier
}

// Open opens (creating if needed) the cache in cfg.Dir (and cfg.ShmDir),
// takes their locks, reconciles the index with the data files and starts
// the access flusher, the promoter, the planner and the file watcher. A
// directory owned by another Cache or process yields a *LockedError.
func Open(ctx context.Context, cfg Config) (*Cache, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	base, err := openStore(s.baseTier, newLayout(s.dir), s.maxBytes, s.baseShare)
	if err != nil {
		return nil, err
	}
	var hot *store
	if s.shmDir != "" {
		if hot, err = openStore(Shm, newHotLayout(s.shmDir), s.shmMaxBytes, defaultShmShare); err != nil {
			return nil, errors.Join(err, base.lock.release())
		}
	}
	c, err := open(ctx, s, base, hot)
	if err != nil {
		err = errors.Join(err, base.lock.release())
		if hot != nil {
			err = errors.Join(err, hot.lock.release())
		}
		return nil, err
	}
	return c, nil
}

// open does Open's work once the directories are locked.
func open(ctx context.Context, s settings, base, hot *store) (*Cache, error) {
	idx, err := openIndex(base.lay.index, s.log)
	if err != nil {
		return nil, err
	}
	c := &Cache{
		cfg: s, base: base, hot: hot, idx: idx, stop: make(chan struct{}), flushNow: make(chan struct{}, 1),
		cancels: make(map[uint64]context.CancelCauseFunc),
		entries: make(map[string]*entry), byID: make(map[fileID]*entry),
		urgencies: make(map[fileID]*sharedUrgency), plans: newPlans(s.parallelism), dls: newDownloads(),
		packQ: make(chan *entry, maxPackGroup),
	}
	base.plans = c.plans
	base.cold = coldAccess{thawOld: c.thawOldLocked, refreeze: c.refreezeLocked, each: c.coldEachUnpinnedLocked,
		thawAt: func(pos uint64) *entry { return c.thawLocked(c.cold, pos) },
		link:   func(es []*entry) { c.base.linkByAccessLocked(es) }}
	if hot != nil {
		hot.plans = c.plans
	}
	c.hooks.Store(s.hooks)
	if hot != nil {
		c.promoteQ = make(chan *entry, promoteQueueLen)
	}
	if err := c.reconcile(ctx); err != nil {
		return nil, errors.Join(err, c.idx.close())
	}
	if err := c.settle(); err != nil {
		return nil, err // settle released the index and the cold set
	}
	c.bg.Go(c.flushLoop)
	if hot != nil {
		c.bg.Go(c.promoteLoop)
	}
	c.bg.Go(c.planLoop)
	c.bg.Go(c.packLoop)
	c.startWatch()
	return c, nil
}

// Close cancels fills and promotions in progress, waits for every operation
// and background goroutine, writes the last-access times, closes the index
// and releases the directory locks. Handles stay readable after Close;
// files they keep alive are removed at the next Open. A second Close
// returns ErrClosed.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.closed = true
	for _, cancel := range c.cancels {
		cancel(ErrClosed)
	}
	c.mu.Unlock()
	c.running.Wait()
	close(c.stop)
	c.bg.Wait()
	if err := c.segs.closeActive(); err != nil {
		c.cfg.log.Warn("tier: free the active segment's unused space", "err", err)
	}
	ferr := c.flushAccess()
	c.flushPunches()
	c.releaseCold()
	c.idxSyncMu.Lock()
	c.idxMu.Lock()
	c.idxClosed = true
	ierr := c.idx.close()
	c.idxMu.Unlock()
	c.idxSyncMu.Unlock()
	err := errors.Join(ferr, ierr, c.base.lock.release())
	if c.hot != nil {
		err = errors.Join(err, c.hot.lock.release())
	}
	return err
}

// begin registers an operation that Close must wait for; it fails once the
// cache is closed. Call end when the operation is over.
func (c *Cache) begin() (end func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	c.running.Add(1)
	return c.running.Done, nil
}

// detach returns a context with ctx's values that ignores ctx's
// cancellation (one waiter giving up must not fail a shared fill) and is
// cancelled by Close instead. Call cancel when done.
func (c *Cache) detach(ctx context.Context) (context.Context, func()) {
	return c.closable(context.WithoutCancel(ctx))
}

// closable returns ctx, also cancelled (with ErrClosed) by Close. Call
// cancel when done.
func (c *Cache) closable(ctx context.Context) (context.Context, func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	c.mu.Lock()
	id := c.nextCancel
	c.nextCancel++
	c.cancels[id] = cancel
	if c.closed {
		cancel(ErrClosed)
	}
	c.mu.Unlock()
	return cctx, func() {
		c.mu.Lock()
		delete(c.cancels, id)
		c.mu.Unlock()
		cancel(nil)
	}
}

// flushLoop writes last-access times periodically, and when the warm set
// has outgrown its bound with entries that only a flush lets freeze (see
// trimWarmLocked), until Close.
func (c *Cache) flushLoop() {
	t := time.NewTicker(accessFlushInterval)
	defer t.Stop()
	var early time.Time // the last flush asked for by a trim
	for {
		select {
		case <-c.flushNow:
			if time.Since(early) < earlyFlushGap {
				continue // a later trim asks again
			}
			early = time.Now()
			if err := c.flushAccess(); err != nil {
				c.cfg.log.Warn("tier: flush access times", "err", err)
			}
		case <-t.C:
			if err := c.flushAccess(); err != nil {
				c.cfg.log.Warn("tier: flush access times", "err", err)
			}
		case <-c.stop:
			return
		}
	}
}

// markDirtyLocked records that base entry e has persisted fields that the
// flusher writes (access and check times, the in-shm flag) changed since
// the last index write.
func (c *Cache) markDirtyLocked(e *entry) {
	if !e.dirty {
		e.dirty = true
		c.dirty = append(c.dirty, e)
	}
}

// flushAccess writes the records of live entries marked dirty since the
// last flush.
func (c *Cache) flushAccess() error {
	c.idxMu.Lock()
	defer c.idxMu.Unlock()
	if c.idxClosed {
		return nil
	}
	c.mu.Lock()
	var keys []string
	var recs []record
	var written []*entry
	var waiting []*entry // unsynced: the packer writes their records
	for _, e := range c.dirty {
		switch {
		case e.dirty && e.unsynced && e.state == live:
			waiting = append(waiting, e)
			continue
		case e.dirty && e.state == live && c.entries[e.key] == e:
			keys, recs, written = append(keys, e.key), append(recs, e.rec), append(written, e)
		}
		e.dirty = false
	}
	c.dirty = waiting
	c.mu.Unlock()
	// Holding idxMu, no entry can be replaced or dropped until the write ends.
	if err := c.idx.putBatch(keys, recs); err != nil {
		c.mu.Lock()
		for _, e := range written {
			c.markDirtyLocked(e)
		}
		c.mu.Unlock()
		return err
	}
	c.mu.Lock()
	c.trimWarmLocked() // the entries just written are clean: they may freeze
	c.mu.Unlock()
	return nil
}
