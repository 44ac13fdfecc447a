package tier

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"golang.org/x/sync/singleflight"
)

// Locking (see Cache): idxMu, then mu; allocMu is a leaf. No I/O under mu;
// index I/O under idxMu; data files are written and deleted outside both.

// accessFlushInterval is how often last-access times are written to the
// index. Hits update memory only; a crash loses at most this much LRU
// history.
const accessFlushInterval = 15 * time.Second

// Cache is the disk tier: objects cached as files under one directory, a
// badger index, a byte budget and LRU eviction. Create it with Open and
// release it with Close. Its methods are safe for concurrent use.
//
// Lock order: idxMu, then mu. allocMu is a leaf: nothing else is taken while
// it is held. Handle.Close takes mu.
type Cache struct {
	// Immutable after Open.
	cfg       settings
	lay       layout
	lock      *dirLock
	idx       *index
	bsize     int64 // filesystem block size: reservations are rounded up to it
	headroom  int64 // free bytes fills leave on the filesystem for the index
	flights   singleflight.Group
	stopFlush chan struct{}  // closed by Close to stop the flusher
	bg        sync.WaitGroup // the flusher goroutine
	// onJoin, if set (by tests, before use), is called with the number of
	// callers waiting on a fill each time one joins it.
	onJoin func(waiters int)

	// running counts public operations and fills in progress; Close waits
	// for it. Add only under mu while !closed, so no Add races Close's Wait.
	running sync.WaitGroup

	// allocMu serialises the free-space check and fallocate of fills, so two
	// fills cannot both pass the check and together eat into the headroom.
	allocMu sync.Mutex

	// idxMu serialises index writes together with the memory changes they
	// mirror, so badger sees the changes in the order memory made them:
	// every change to the set of entries or to their persisted fields (other
	// than access and check times, which the flusher writes) is made holding
	// idxMu. Index I/O happens under idxMu; data-file I/O never does.
	idxMu     sync.Mutex
	idxClosed bool // guarded by idxMu

	// mu protects the fields below and every entry's mutable fields. No I/O
	// is done while holding mu.
	mu          sync.Mutex
	closed      bool
	cancels     map[uint64]context.CancelCauseFunc // detached fill contexts, cancelled by Close
	nextCancel  uint64
	entries     map[string]*entry         // live entries by index key
	zombies     map[fileID]*entry         // replaced or dropped entries with open handles
	deleting    map[fileID]chan struct{}  // files being deleted; closed when gone
	urgencies   map[fileID]*sharedUrgency // urgency of each fill, shared by its waiters
	lru         *list.List                // live unpinned entries, most recently used at the front
	maxBytes    int64
	used        int64         // blocks of live and zombie entries
	reserved    int64         // space set aside by fills in progress
	pinnedBytes int64         // blocks of pinned live entries
	spaceFreed  chan struct{} // closed (and replaced) when reserved or used drops
	stats       counters
}

// counters are cumulative event counts, guarded by Cache.mu.
type counters struct {
	hits, misses, revalidations, fills, bytesFetched, evictions int64
}

// Open opens (creating if needed) the cache in cfg.Dir, takes its lock,
// reconciles the index with the data files and starts the access flusher.
// A directory owned by another Cache or process yields a *LockedError.
func Open(ctx context.Context, cfg Config) (*Cache, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("tier: create cache dir: %w", err)
	}
	lk, err := lockDir(s.dir)
	if err != nil {
		return nil, err
	}
	c, err := open(ctx, s, lk)
	if err != nil {
		return nil, errors.Join(err, lk.release())
	}
	return c, nil
}

// open does Open's work once the lock is held.
func open(ctx context.Context, s settings, lk *dirLock) (*Cache, error) {
	lay := newLayout(s.dir)
	if err := lay.create(); err != nil {
		return nil, err
	}
	fsi, err := statFS(lay.data)
	if err != nil {
		return nil, err
	}
	maxBytes := s.maxBytes
	if maxBytes == 0 {
		maxBytes = int64(float64(fsi.size)*defaultBudgetShare) / fsi.blockSize * fsi.blockSize
	}
	idx, err := openIndex(lay.index, s.log)
	if err != nil {
		return nil, err
	}
	c := &Cache{
		cfg: s, lay: lay, lock: lk, idx: idx, bsize: fsi.blockSize, headroom: headroomFor(fsi.size),
		stopFlush: make(chan struct{}),
		cancels:   make(map[uint64]context.CancelCauseFunc),
		entries:   make(map[string]*entry), zombies: make(map[fileID]*entry),
		deleting: make(map[fileID]chan struct{}), urgencies: make(map[fileID]*sharedUrgency),
		lru: list.New(), maxBytes: maxBytes, spaceFreed: make(chan struct{}),
	}
	if err := c.reconcile(ctx); err != nil {
		return nil, errors.Join(err, idx.close())
	}
	c.bg.Go(c.flushLoop)
	return c, nil
}

// Close cancels fills in progress, waits for every operation, writes the
// last-access times, closes the index and releases the directory lock.
// Handles stay readable after Close; files they keep alive are removed at the
// next Open. A second Close returns ErrClosed.
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
	close(c.stopFlush)
	c.bg.Wait()
	ferr := c.flushAccess()
	c.idxMu.Lock()
	c.idxClosed = true
	ierr := c.idx.close()
	c.idxMu.Unlock()
	return errors.Join(ferr, ierr, c.lock.release())
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
	dctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	c.mu.Lock()
	id := c.nextCancel
	c.nextCancel++
	c.cancels[id] = cancel
	if c.closed {
		cancel(ErrClosed)
	}
	c.mu.Unlock()
	return dctx, func() {
		c.mu.Lock()
		delete(c.cancels, id)
		c.mu.Unlock()
		cancel(nil)
	}
}

// flushLoop writes last-access times periodically until Close.
func (c *Cache) flushLoop() {
	t := time.NewTicker(accessFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := c.flushAccess(); err != nil {
				c.cfg.log.Warn("tier: flush access times", "err", err)
			}
		case <-c.stopFlush:
			return
		}
	}
}

// flushAccess writes the records of entries whose access or check time
// changed since the last flush.
func (c *Cache) flushAccess() error {
	c.idxMu.Lock()
	defer c.idxMu.Unlock()
	if c.idxClosed {
		return nil
	}
	c.mu.Lock()
	var keys []string
	var recs []record
	var dirty []*entry
	for _, e := range c.entries {
		if e.dirty {
			keys, recs, dirty = append(keys, e.key), append(recs, e.rec), append(dirty, e)
			e.dirty = false
		}
	}
	c.mu.Unlock()
	// Holding idxMu, no entry can be replaced or dropped until the write ends.
	if err := c.idx.putBatch(keys, recs); err != nil {
		c.mu.Lock()
		for _, e := range dirty {
			e.dirty = true
		}
		c.mu.Unlock()
		return err
	}
	return nil
}

// Stats is a snapshot of the cache's usage and counters.
type Stats struct {
	// Entries is the number of cached objects.
	Entries int
	// UsedBytes is the space cached files occupy (including replaced files
	// kept alive by open handles), in filesystem blocks.
	UsedBytes int64
	// MaxBytes is the byte budget.
	MaxBytes int64
	// ReservedBytes is the space set aside by fills in progress.
	ReservedBytes int64
	// PinnedBytes is the space of pinned entries.
	PinnedBytes int64
	// InUseBytes is the space of unpinned entries with open handles,
	// including replaced generations that handles keep alive.
	InUseBytes int64
	// Hits counts Opens served from the cache; Misses those that fetched.
	Hits, Misses int64
	// Revalidations counts Stats sent to the source for cached objects.
	Revalidations int64
	// Fills counts objects downloaded; BytesFetched their bytes.
	Fills, BytesFetched int64
	// Evictions counts entries removed to make room or by Evict.
	Evictions int64
}

// Stats returns a snapshot of usage and counters. It walks the entries
// (O(n)) to count the space in use.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, inUse := c.fixedBytesLocked()
	return Stats{
		Entries: len(c.entries), UsedBytes: c.used, MaxBytes: c.maxBytes, ReservedBytes: c.reserved,
		PinnedBytes: c.pinnedBytes, InUseBytes: inUse,
		Hits: c.stats.hits, Misses: c.stats.misses, Revalidations: c.stats.revalidations,
		Fills: c.stats.fills, BytesFetched: c.stats.bytesFetched, Evictions: c.stats.evictions,
	}
}

// SetMaxBytes changes the byte budget (n > 0; 0 means 90% of the
// filesystem's size now) and evicts least recently used entries down to it.
// If pinned and in-use entries alone exceed it, the new budget still holds
// and the error wraps ErrNoSpace; fills then evict as entries are released.
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
		fsi, err := statFS(c.lay.data)
		if err != nil {
			return err
		}
		n = int64(float64(fsi.size)*defaultBudgetShare) / fsi.blockSize * fsi.blockSize
	}
	c.mu.Lock()
	c.maxBytes = n
	c.mu.Unlock()
	over := c.trim()
	if over > 0 {
		return fmt.Errorf("%w: budget set to %s but %s is pinned, in use or reserved",
			ErrNoSpace, humanize.IBytes(uint64(n)), humanize.IBytes(uint64(over+n)))
	}
	return nil
}

// trim evicts least recently used unpinned, unused entries until usage and
// reservations fit the budget, as far as they can, and returns how many
// bytes are still over it.
func (c *Cache) trim() int64 {
	c.idxMu.Lock()
	if c.idxClosed {
		c.idxMu.Unlock()
		return 0
	}
	c.mu.Lock()
	victims, _ := c.lruVictimsLocked(c.used+c.reserved-c.maxBytes, nil)
	c.evictLocked(victims)
	over := c.used + c.reserved - c.maxBytes
	c.mu.Unlock()
	c.deleteRecords(victims)
	c.idxMu.Unlock()
	c.removeFiles(victims)
	return over
}
