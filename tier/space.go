package tier

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"github.com/dustin/go-humanize"
)

// reserve sets aside n bytes of the budget for a fill of a, evicting least
// recently used entries that are neither pinned nor in use. If only other
// fills' reservations stand in the way it waits for one of them to end;
// if pinned and in-use entries leave no room it fails with ErrNoSpace.
// A fill of a copy this node does not own for its fleet (SetOwnership)
// first waits, up to ownershipWait, rather than evict owned copies while
// other fills or released readers' copies may make room.
func (c *Cache) reserve(ctx context.Context, n int64, a object.Attrs) error {
	o := a.Object
	keepUntil := time.Now().Add(ownershipWait)
	reclaimed := false
	for {
		keep := time.Now().Before(keepUntil)
		wait, err := c.tryReserve(n, a, keep)
		if errors.Is(err, ErrNoSpace) && !reclaimed {
			// Copies in use fill the budget: those held open only for
			// speed are released, once per reservation, then try again.
			reclaimed = true
			if c.reclaimers.run() {
				continue
			}
		}
		if err != nil || wait == nil {
			return err
		}
		if ctx.Value(noSpaceWaitKey{}) != nil {
			return fmt.Errorf("%w: %s %w", ErrNoSpace, o, errWouldWait)
		}
		var patience <-chan time.Time
		var t *time.Timer
		if keep {
			t = time.NewTimer(time.Until(keepUntil))
			patience = t.C
		}
		select {
		case <-wait:
		case <-patience:
		case <-ctx.Done():
			err = fmt.Errorf("tier: wait for space for %s: %w", o, context.Cause(ctx))
		}
		if t != nil {
			t.Stop()
		}
		if err != nil {
			return err
		}
	}
}

// ownershipWait (a variable for tests) bounds how long a fill of a copy this node does not own
// waits for room before it evicts owned copies: a reader holding copies
// open while it waits for this one must not wait for ever.
var ownershipWait = 2 * time.Second

// tryReserve reserves n bytes (evicting as needed), or returns a channel to
// wait on before trying again, or an error. keep: a copy this node does
// not own waits rather than evict owned ones (see reserve).
func (c *Cache) tryReserve(n int64, a object.Attrs, keep bool) (<-chan struct{}, error) {
	c.idxMu.Lock()
	if c.idxClosed {
		c.idxMu.Unlock()
		return nil, ErrClosed
	}
	c.mu.Lock()
	victims, wait, err := c.planReserveLocked(n, a, keep)
	var dead []*entry
	if err == nil && wait == nil {
		dead = c.evictLocked(victims, nil)
		c.base.reserved += n
	}
	c.mu.Unlock()
	c.deleteRecords(victims)
	c.idxMu.Unlock()
	c.removeFiles(dead)
	return wait, err
}

// planReserveLocked decides how to fit n more bytes: the victims to evict
// (possibly none), or a channel to wait on, or ErrNoSpace.
func (c *Cache) planReserveLocked(n int64, a object.Attrs, keep bool) ([]*entry, <-chan struct{}, error) {
	b, o := c.base, a.Object
	if n > b.maxBytes {
		return nil, nil, fmt.Errorf("%w: %s needs %s, more than the whole budget of %s",
			ErrNoSpace, o, humanize.IBytes(uint64(n)), humanize.IBytes(uint64(b.maxBytes)))
	}
	short := b.committedLocked() + n - b.maxBytes
	if short <= 0 {
		return nil, nil, nil
	}
	victims, freed := b.lruVictimsLocked(short, nil)
	if freed >= short {
		// A copy for this node's own readers does not displace one the
		// fleet keeps here while other fills may still free room: the
		// copies they commit for readers go first, once released.
		if keep && b.own.owns != nil && slices.ContainsFunc(victims, b.own.keepLocked) && !b.own.owns(a) &&
			(b.reserved > 0 || b.unownedInUseLocked()) {
			b.wakeOnRelease = true
			return nil, b.spaceFreed, nil
		}
		return victims, nil, nil
	}
	// Fills in progress end by committing (adding an evictable entry) or by
	// failing (releasing their reservation): wait for one if that can help.
	pinned, inUse := b.fixedBytesLocked()
	if b.reserved > 0 && pinned+inUse+b.held+n <= b.maxBytes {
		return nil, b.spaceFreed, nil
	}
	return nil, nil, fmt.Errorf("%w: %s needs %s; the budget of %s holds %s pinned, %s in use, %s dirty (checkpoints not uploaded yet) and %s reserved by other fills",
		ErrNoSpace, o, humanize.IBytes(uint64(n)), humanize.IBytes(uint64(b.maxBytes)),
		humanize.IBytes(uint64(pinned)), humanize.IBytes(uint64(inUse)), humanize.IBytes(uint64(b.held)),
		humanize.IBytes(uint64(b.reserved)))
}

// unreserve releases a reservation that did not become an entry.
func (c *Cache) unreserve(n int64) {
	c.mu.Lock()
	c.base.reserved -= n
	c.base.signalLocked()
	c.mu.Unlock()
}

// freeDisk makes room on a full filesystem: it evicts least recently used
// entries until n bytes plus the headroom are available. It reports false if
// evicting everything evictable would not be enough (then it evicts nothing).
func (c *Cache) freeDisk(n int64) (bool, error) {
	c.flushPunches() // evictions whose space is not freed yet
	fsi, err := statFS(c.base.lay.data)
	if err != nil {
		return false, err
	}
	short := n + c.base.headroom - fsi.avail
	if short <= 0 {
		return true, nil
	}
	c.idxMu.Lock()
	if c.idxClosed {
		c.idxMu.Unlock()
		return false, ErrClosed
	}
	c.mu.Lock()
	victims, freed := c.base.lruVictimsLocked(short, nil)
	if freed < short {
		victims = nil
	}
	dead := c.evictLocked(victims, nil)
	c.mu.Unlock()
	c.deleteRecords(victims)
	c.idxMu.Unlock()
	c.removeFiles(dead)
	c.flushPunches()
	return victims != nil, nil
}

// deleteRecords removes the index records of dropped entries. The caller
// holds idxMu. A failure is logged: the files are removed anyway and the
// next Open drops records whose file is missing. A packed copy's bytes are
// then kept instead (keepBytes): its record may survive, naming them.
func (c *Cache) deleteRecords(es []*entry) {
	if len(es) == 0 {
		return
	}
	keys := make([]string, len(es))
	for i, e := range es {
		keys[i] = e.key
	}
	if err := c.idx.deleteBatch(keys); err != nil {
		c.cfg.log.Warn("tier: delete index records; the next start-up drops them", "n", len(keys), "err", err)
		c.mu.Lock()
		for _, e := range es {
			e.keepBytes = e.seg != nil
		}
		c.mu.Unlock()
	}
}

// removeFiles deletes the files of gone copies (see buryLocked) and
// unregisters their deletion. Packed copies' regions are queued to be
// punched once their records' deletion is durable (see punch.go).
func (c *Cache) removeFiles(es []*entry) {
	if len(es) == 0 {
		return
	}
	var packed []*entry
	objects := make(map[*segment]int)
	for _, e := range es {
		if e.seg != nil {
			packed = append(packed, e)
			objects[e.seg]++
			continue
		}
		p := e.st.path(e.id)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.cfg.log.Warn("tier: remove cached file", "path", p, "err", err)
		}
	}
	c.queuePunches(packed)
	for seg, n := range objects {
		c.releaseSegment(seg, n)
	}
	c.mu.Lock()
	for _, e := range es {
		if e.seg != nil {
			e.st.signalLocked()
			continue
		}
		if ch, ok := e.st.deleting[e.id]; ok {
			close(ch)
			delete(e.st.deleting, e.id)
		}
		e.st.signalLocked()
	}
	c.mu.Unlock()
}

// claim makes id's path in st free for a new file, just before it is
// renamed into place: it waits until no deletion of the path is in
// progress, and detaches a zombie still holding it (a copy dropped while in
// use, whose last Close must then delete nothing). Afterwards nothing the
// cache does deletes the path until the new copy is dropped in turn: only
// one fill (or promotion) of an id runs at a time, and no live copy holds
// it.
func (c *Cache) claim(ctx context.Context, st *store, id fileID) error {
	for {
		c.mu.Lock()
		ch := st.deleting[id]
		if ch == nil {
			if z := st.zombies[id]; z != nil {
				delete(st.zombies, id)
				z.detached = true
				st.detached[z] = struct{}{}
			}
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// reclaimers are the callbacks of OnNoSpace.
type reclaimers struct {
	mu   sync.Mutex
	fns  map[int]func()
	next int
}

// OnNoSpace registers fn, which the cache calls when a fill finds no room
// because copies in use fill the budget (at most once per fill, never
// under the cache's locks, possibly from several fills at once): fn should
// release the handles its caller keeps open only for speed (a mount's idle
// files), so that their copies may be evicted; the fill then tries again.
// remove unregisters fn.
func (c *Cache) OnNoSpace(fn func()) (remove func()) {
	r := &c.reclaimers
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fns == nil {
		r.fns = make(map[int]func())
	}
	id := r.next
	r.next++
	r.fns[id] = fn
	return func() {
		r.mu.Lock()
		delete(r.fns, id)
		r.mu.Unlock()
	}
}

// run calls the callbacks and reports whether there were any.
func (r *reclaimers) run() bool {
	r.mu.Lock()
	fns := make([]func(), 0, len(r.fns))
	for _, fn := range r.fns {
		fns = append(fns, fn)
	}
	r.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
	return len(fns) > 0
}
