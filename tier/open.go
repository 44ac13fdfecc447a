package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// maxAttempts bounds how often Open and Prefetch start over when the object
// changes under them (a new generation mid-download) or a freshly filled
// file is evicted before it could be opened.
const maxAttempts = 3

// retryError marks an attempt that should start over; it wraps the cause.
type retryError struct{ err error }

func (e retryError) Error() string { return e.err.Error() }
func (e retryError) Unwrap() error { return e.err }

// Open returns a handle on o's cached file, filling the cache first on a
// miss. With o.Generation == 0 it serves the live generation: a cached one
// last confirmed longer ago than the revalidation interval (Config.Revalidate
// or WithRevalidate) is checked with Source.Stat; a newer generation is
// fetched and replaces it, a deleted object is dropped (object.ErrNotFound),
// and if the check itself fails the cached copy is served and a warning
// logged. With o.Generation != 0 exactly that generation is served. A miss
// on a planned object whose directory was listed for the plans within the
// revalidation interval is filled at its listed generation, not stat'ed.
//
// Concurrent Opens and Prefetches of one generation share one download.
// The handle keeps the file from being evicted until it is closed.
func (c *Cache) Open(ctx context.Context, o object.Object, opts ...OpenOption) (*Handle, error) {
	if err := checkObject(o); err != nil {
		return nil, fmt.Errorf("tier: open: %w", err)
	}
	oc := openConfig{revalidate: c.cfg.revalidate}
	for _, opt := range opts {
		opt(&oc)
	}
	end, err := c.begin()
	if err != nil {
		return nil, err
	}
	defer end()
	for range maxAttempts {
		var h *Handle
		h, err = c.openOnce(ctx, o, oc)
		var re retryError
		if !errors.As(err, &re) {
			return h, err
		}
		err = re.err
		oc.statMiss = true // whatever changed, the source says what is live now
	}
	return nil, fmt.Errorf("tier: open %s: gave up after %d attempts: %w", o, maxAttempts, err)
}

// lookupState is what lookup found.
type lookupState int

const (
	miss  lookupState = iota
	hit               // a copy is acquired
	stale             // cached, but the generation must be confirmed first
)

// grant is a copy acquired for a new handle and the stale flag the handle
// reports.
type grant struct {
	cp    *entry
	stale *atomic.Bool
}

// openOnce is one attempt of Open.
func (c *Cache) openOnce(ctx context.Context, o object.Object, oc openConfig) (*Handle, error) {
	if oc.noSpaceWait {
		ctx = context.WithValue(ctx, noSpaceWaitKey{}, true)
	}
	g, gen, state := c.lookup(o, oc.revalidate)
	switch {
	case state == hit:
		return c.newHandle(g)
	case oc.cachedOnly:
		return nil, fmt.Errorf("tier: open %s: %w", o, ErrNotCached)
	case state == stale:
		return c.revalidate(ctx, o, gen)
	}
	a, listed, err := c.missAttrs(ctx, o, oc)
	if err != nil {
		return nil, fmt.Errorf("tier: open %s: %w", o, err)
	}
	h, err := c.fetchAndOpen(ctx, o, a)
	if _, retry := err.(retryError); !retry && listed &&
		(errors.Is(err, object.ErrGenerationChanged) || errors.Is(err, object.ErrNotFound)) {
		return nil, retryError{err} // the listed generation is gone: the next attempt stats o
	}
	return h, err
}

// missAttrs returns the attributes to fill o by on a miss, and whether
// they are listed ones. A planned object's are those its directory's
// listing gave the planner, if that listing started within the
// revalidation interval: as fresh as a Stat then, and a reader that
// overtakes the planner joins its fill without a round trip of its own (in
// a cold epoch about one Open in five reaches an object before its fill
// ends). Any other object is stat'ed, as is every one once an attempt
// found its listed generation gone.
func (c *Cache) missAttrs(ctx context.Context, o object.Object, oc openConfig) (object.Attrs, bool, error) {
	if !oc.statMiss && oc.revalidate != 0 {
		maxAge := planListTTL
		if oc.revalidate > 0 {
			maxAge = min(maxAge, oc.revalidate)
		}
		if a, ok := c.listedAttrs(ctx, o, maxAge); ok {
			return a, true, nil
		}
	}
	a, err := c.cfg.src.Stat(ctx, o)
	return a, false, err
}

// lookup finds o in memory. On a hit it acquires the best copy.
func (c *Cache) lookup(o object.Object, reval time.Duration) (grant, int64, lookupState) {
	now := time.Now().UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entryLocked(indexKey(o.Bucket, o.Name))
	if o.Generation != 0 {
		// A generation's bytes never change: no revalidation. A zombie
		// still holding it is served unless doomed.
		if e == nil || e.rec.gen != o.Generation {
			e = c.base.zombies[idOf(o.Bucket, o.Name, o.Generation)]
		}
		if e == nil || e.doomed {
			return grant{}, 0, miss
		}
	} else if e == nil {
		return grant{}, 0, miss
	} else if reval >= 0 && now-e.rec.checked >= int64(reval) {
		return grant{}, e.rec.gen, stale
	}
	c.stats.hits++
	g := c.acquireLocked(e, now)
	c.trimWarmLocked() // e is in use now: it stays warm
	return g, e.rec.gen, hit
}

// acquireLocked takes a handle's reference on the best copy of base entry
// e (its live hot copy if it has one) and records the use, which may queue
// a promotion.
func (c *Cache) acquireLocked(e *entry, now int64) grant {
	cp := e
	c.dls.noteOpen(now)
	c.plans.openedLocked(e.key)
	if e.state == live {
		c.touchLocked(e, now)
		if e.hot != nil {
			cp = e.hot
			c.stats.shmHits++
		} else {
			c.notePromoteLocked(e, now)
		}
	}
	cp.refs++
	syncObjectLocked(e)
	return grant{cp: cp, stale: cp.staleFlagLocked()}
}

// revalidate checks a cached generation against the source.
func (c *Cache) revalidate(ctx context.Context, o object.Object, gen int64) (*Handle, error) {
	c.mu.Lock()
	c.stats.revalidations++
	c.mu.Unlock()
	a, err := c.cfg.src.Stat(ctx, o)
	switch {
	case errors.Is(err, object.ErrNotFound):
		c.dropGen(o.Bucket, o.Name, gen)
		return nil, fmt.Errorf("tier: open %s: %w", o, err)
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("tier: open %s: %w", o, err)
	case err != nil:
		c.cfg.log.Warn("tier: revalidation failed; serving the cached generation",
			"object", o.String(), "generation", gen, "err", err)
		return c.openGen(o, gen, false)
	case a.Generation == gen:
		return c.openGen(o, gen, true)
	}
	return c.fetchAndOpen(ctx, o, a)
}

// openGen opens the cached entry of o if it still holds generation gen;
// confirmed records that the source just confirmed gen.
func (c *Cache) openGen(o object.Object, gen int64, confirmed bool) (*Handle, error) {
	now := time.Now().UnixNano()
	c.mu.Lock()
	e := c.entryLocked(indexKey(o.Bucket, o.Name))
	ok := e != nil && e.rec.gen == gen
	var g grant
	if ok {
		g = c.acquireLocked(e, now)
		c.stats.hits++
		if confirmed {
			e.rec.checked = now
		}
	}
	c.mu.Unlock()
	if !ok {
		return nil, retryError{fmt.Errorf("tier: open %s: entry changed during revalidation", o)}
	}
	return c.newHandle(g)
}

// fetchAndOpen fills the cache with a (a demand fetch) and opens it.
func (c *Cache) fetchAndOpen(ctx context.Context, o object.Object, a object.Attrs) (*Handle, error) {
	c.mu.Lock()
	c.stats.misses++
	c.mu.Unlock()
	r, joined, err := c.share(ctx, a, object.Demand)
	if errors.Is(err, object.ErrGenerationChanged) && o.Generation == 0 {
		return nil, retryError{err}
	}
	if joined && errors.Is(err, errWouldWait) && ctx.Value(noSpaceWaitKey{}) == nil {
		return nil, retryError{err} // a peer's fill would not wait for space; this Open's own will
	}
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	e := c.currentLocked(r.e) // frozen since the fill ended: thawed again
	ok := e != nil && e.state != gone && !e.doomed
	var g grant
	if ok {
		g = c.acquireLocked(e, time.Now().UnixNano())
	}
	c.trimWarmLocked()
	c.mu.Unlock()
	c.takeFillHold(r.e) // a transient copy: this Open holds it now
	if !ok {
		return nil, retryError{fmt.Errorf("tier: open %s: evicted before it could be opened: %w", o, ErrNoSpace)}
	}
	return c.newHandle(g)
}

// dropGen removes the entry of bucket/name if it still holds generation gen.
func (c *Cache) dropGen(bucket, name string, gen int64) {
	c.idxMu.Lock()
	if c.idxClosed {
		c.idxMu.Unlock()
		return
	}
	c.mu.Lock()
	e := c.entryLocked(indexKey(bucket, name))
	var dropped, dead []*entry
	if e != nil && e.rec.gen == gen {
		dropped = []*entry{e}
		dead = c.dropLocked(e, false, nil)
	}
	c.mu.Unlock()
	c.deleteRecords(dropped)
	c.idxMu.Unlock()
	c.removeFiles(dead)
}

// dropDamaged drops live copy cp, whose file was found deleted or changed
// behind the cache's back: a hot copy is demoted (the entry serves from its
// base copy again), a base entry leaves the cache. Either is doomed: its
// file is deleted once no handle uses it, and the next use fetches (or
// promotes) it again. It reports whether cp was still live.
func (c *Cache) dropDamaged(cp *entry) bool {
	return c.dropCopy(cp, func() { c.stats.damaged++ })
}

// dropCopy drops live copy cp as dropDamaged does, calls count (with c.mu
// held) if it did, and reports whether it did.
func (c *Cache) dropCopy(cp *entry, count func()) bool {
	c.idxMu.Lock()
	if c.idxClosed {
		c.idxMu.Unlock()
		return false
	}
	c.mu.Lock()
	var dropped, dead []*entry
	if cp.state == frozen { // a frozen entry's stand-in (Verify's), or one frozen since
		if cp = c.currentLocked(cp); cp == nil {
			c.mu.Unlock()
			c.idxMu.Unlock()
			return false
		}
	}
	ok := cp.state == live
	var base *entry // a shm copy's, whose record says so until written
	var rec record
	switch {
	case !ok:
	case cp.owner != nil:
		dead = c.unhotLocked(cp.owner, nil)
		if b := cp.owner; b.state == live && !b.unsynced {
			base, rec = b, b.rec
		}
	default:
		dropped = []*entry{cp}
		dead = c.dropLocked(cp, true, nil)
	}
	if ok {
		count()
	}
	c.mu.Unlock()
	c.deleteRecords(dropped)
	if base != nil {
		// Now, not at the next flush: a crash meanwhile would have the
		// next start adopt the damaged shm file again (a reader may keep
		// it in place).
		if err := c.idx.put(base.key, rec); err != nil {
			c.cfg.log.Warn("tier: record a dropped shm copy; the flusher retries", "key", base.key, "err", err)
		}
	}
	c.idxMu.Unlock()
	c.removeFiles(dead)
	return ok
}

// newHandle opens the file of acquired copy g.cp and checks with one fstat
// that it is the file the cache published: a copy deleted, truncated or
// replaced behind the cache's back is dropped, never served, and the Open
// tries again (from disk, or with a fresh download).
func (c *Cache) newHandle(g grant) (*Handle, error) {
	e := g.cp
	a := e.attrs()
	p := e.path()
	f, err := os.Open(p)
	if err == nil {
		if err = e.checkFile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		c.release(e)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errChanged) {
			c.cfg.log.Warn("tier: cached file vanished or changed; dropping it", "object", a.Object.String(),
				"path", p, "err", err)
			if e.seg != nil {
				c.segs.lost(e.seg)
			}
			c.dropDamaged(e)
			return nil, retryError{fmt.Errorf("tier: open %s: %w", a.Object, err)}
		}
		return nil, fmt.Errorf("tier: open %s: %w", a.Object, err)
	}
	return &Handle{c: c, e: e, f: f, r: io.NewSectionReader(f, e.rec.off, e.rec.size), attrs: a, path: p,
		stale: g.stale}, nil
}

// release drops a handle's reference; the last one on a zombie deletes its
// file (unless a newer copy took over its path, or the cache is closed: the
// next Open removes it as an orphan).
func (c *Cache) release(e *entry) {
	c.mu.Lock()
	e.refs--
	if base := e.owner; base != nil {
		syncObjectLocked(base) // e counts in base's use while it is base's hot copy
	}
	e.syncInUseLocked()
	var dead bool
	if e.refs == 0 && e.state == zombie && !c.closed {
		e.st.pending -= e.rec.blocks
		if e.detached && e.seg == nil { // its path is a newer copy's
			delete(e.st.detached, e)
			e.state = gone
			e.st.used -= e.rec.blocks
			e.st.signalLocked()
		} else if e.detached { // a packed copy's region is its own to free
			delete(e.st.detached, e)
			c.buryLocked(e)
			c.running.Add(1)
			dead = true
		} else {
			delete(e.st.zombies, e.id)
			c.buryLocked(e)
			c.running.Add(1)
			dead = true
		}
	}
	c.mu.Unlock()
	if dead {
		c.removeFiles([]*entry{e})
		c.running.Done()
	}
}

// Handle is an open cached object: one generation's bytes in a file of the
// shm tier (when the object has a copy there) or of the disk tier. While
// any handle on it is open, the file is neither evicted nor deleted (even
// if a newer generation replaces it, or it is evicted or demoted: it is
// then deleted at the last Close). ReadAt is safe for concurrent use; Close
// must be called once.
type Handle struct {
	c      *Cache
	e      *entry // the copy: a base entry or a hot copy
	f      *os.File
	r      *io.SectionReader // the object's bytes in f
	attrs  object.Attrs
	path   string
	stale  *atomic.Bool
	closed atomic.Bool
}

var _ io.ReaderAt = (*Handle)(nil)

// Attrs returns the attributes of the generation the handle holds.
func (h *Handle) Attrs() object.Attrs { return h.attrs }

// Path returns the path of the file holding the object's bytes, valid
// until Close: a file of the object's own, or for a packed object (Packed) a
// segment file shared with other objects, in which the bytes start at
// Offset. The file must not be modified. If the copy leaves the cache and
// the same generation is cached again, the path may name the new copy: the
// same bytes.
func (h *Handle) Path() string { return h.path }

// Offset returns where the object's bytes start in the file at Path: 0 for
// a file of its own; for a packed object a multiple of the page size, so
// the object's Size bytes can be mapped from there by themselves.
func (h *Handle) Offset() int64 { return h.e.rec.off }

// Packed reports whether the file at Path holds other objects too (small
// objects are packed into segment files): it must then be read at Offset,
// never as a whole (linked, passed through, sent entire).
func (h *Handle) Packed() bool { return h.e.seg != nil }

// Tier returns the tier of the handle's file: Shm or Disk.
func (h *Handle) Tier() Kind { return h.e.st.name }

// Size returns the object's size in bytes.
func (h *Handle) Size() int64 { return h.attrs.Size }

// Stale reports whether the cache would now give a different copy to a new
// Open: a better one (the object was promoted to the shm tier), a newer
// generation, or none (the copy was evicted, demoted or dropped). The
// handle stays readable until Close; a holder that caches handles should
// open again to get the current copy. Stale costs one atomic load.
func (h *Handle) Stale() bool { return h.stale.Load() }

// ReadAt implements io.ReaderAt over the object's bytes (off 0 is the
// object's first byte, wherever its file holds it; reads end at its Size).
func (h *Handle) ReadAt(p []byte, off int64) (int, error) { return h.r.ReadAt(p, off) }

// Reused records a use of the handle's copy as an Open of it would: the
// cache's recency of use and hit count, and its access plans (the object
// counts as opened). For callers that keep a handle open across their own
// users' opens (a mount's idle files), so that eviction and plans see those
// opens too.
func (h *Handle) Reused() {
	if h.closed.Load() {
		return
	}
	c, e := h.c, h.e
	if e.owner != nil {
		e = e.owner
	}
	now := time.Now().UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.hits++
	c.dls.noteOpen(now)
	c.plans.openedLocked(e.key)
	if e.state == live {
		c.touchLocked(e, now)
	}
}

// Close closes the file and releases the copy. A second Close returns an
// error matching ErrClosed.
func (h *Handle) Close() error {
	if !h.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("tier: close %s: %w", h.attrs.Object, ErrClosed)
	}
	err := h.f.Close()
	h.c.release(h.e)
	if err != nil {
		return fmt.Errorf("tier: close %s: %w", h.attrs.Object, err)
	}
	return nil
}
