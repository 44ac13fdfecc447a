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

	"github.com/cacheagent/cacheagent/fetch"
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
// fetched and replaces it, a deleted object is dropped (fetch.ErrNotFound),
// and if the check itself fails the cached copy is served and a warning
// logged. With o.Generation != 0 exactly that generation is served.
//
// Concurrent Opens and Prefetches of one generation share one download.
// The handle keeps the file from being evicted until it is closed.
func (c *Cache) Open(ctx context.Context, o fetch.Object, opts ...OpenOption) (*Handle, error) {
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
		h, err = c.openOnce(ctx, o, oc.revalidate)
		var re retryError
		if !errors.As(err, &re) {
			return h, err
		}
		err = re.err
	}
	return nil, fmt.Errorf("tier: open %s: gave up after %d attempts: %w", o, maxAttempts, err)
}

// lookupState is what lookup found.
type lookupState int

const (
	miss  lookupState = iota
	hit               // the entry is acquired
	stale             // cached, but the generation must be confirmed first
)

// openOnce is one attempt of Open.
func (c *Cache) openOnce(ctx context.Context, o fetch.Object, reval time.Duration) (*Handle, error) {
	e, gen, state := c.lookup(o, reval)
	switch state {
	case hit:
		return c.newHandle(e)
	case stale:
		return c.revalidate(ctx, o, gen)
	}
	a, err := c.cfg.src.Stat(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("tier: open %s: %w", o, err)
	}
	return c.fetchAndOpen(ctx, o, a)
}

// lookup finds o in memory. On a hit it acquires the entry.
func (c *Cache) lookup(o fetch.Object, reval time.Duration) (*entry, int64, lookupState) {
	now := time.Now().UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[indexKey(o.Bucket, o.Name)]
	if o.Generation != 0 {
		// A generation's bytes never change: no revalidation.
		if e == nil || e.rec.gen != o.Generation {
			e = c.zombies[idOf(o.Bucket, o.Name, o.Generation)]
		}
		if e == nil {
			return nil, 0, miss
		}
	} else if e == nil {
		return nil, 0, miss
	} else if reval >= 0 && now-e.rec.checked >= int64(reval) {
		return nil, e.rec.gen, stale
	}
	c.acquireLocked(e, now)
	c.stats.hits++
	return e, e.rec.gen, hit
}

// acquireLocked takes a handle's reference on e and records the use.
func (c *Cache) acquireLocked(e *entry, now int64) {
	e.refs++
	if e.state == live {
		c.touchLocked(e, now)
	}
}

// revalidate checks a cached generation against the source.
func (c *Cache) revalidate(ctx context.Context, o fetch.Object, gen int64) (*Handle, error) {
	c.mu.Lock()
	c.stats.revalidations++
	c.mu.Unlock()
	a, err := c.cfg.src.Stat(ctx, o)
	switch {
	case errors.Is(err, fetch.ErrNotFound):
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
func (c *Cache) openGen(o fetch.Object, gen int64, confirmed bool) (*Handle, error) {
	now := time.Now().UnixNano()
	c.mu.Lock()
	e := c.entries[indexKey(o.Bucket, o.Name)]
	ok := e != nil && e.rec.gen == gen
	if ok {
		c.acquireLocked(e, now)
		c.stats.hits++
		if confirmed {
			e.rec.checked = now
		}
	}
	c.mu.Unlock()
	if !ok {
		return nil, retryError{fmt.Errorf("tier: open %s: entry changed during revalidation", o)}
	}
	return c.newHandle(e)
}

// fetchAndOpen fills the cache with a (a demand fetch) and opens it.
func (c *Cache) fetchAndOpen(ctx context.Context, o fetch.Object, a fetch.Attrs) (*Handle, error) {
	c.mu.Lock()
	c.stats.misses++
	c.mu.Unlock()
	r, _, err := c.share(ctx, a, fetch.Demand)
	if errors.Is(err, fetch.ErrGenerationChanged) && o.Generation == 0 {
		return nil, retryError{err}
	}
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	ok := r.e.state != gone
	if ok {
		c.acquireLocked(r.e, time.Now().UnixNano())
	}
	c.mu.Unlock()
	if !ok {
		return nil, retryError{fmt.Errorf("tier: open %s: evicted before it could be opened: %w", o, ErrNoSpace)}
	}
	return c.newHandle(r.e)
}

// dropGen removes the entry of bucket/name if it still holds generation gen.
func (c *Cache) dropGen(bucket, name string, gen int64) {
	c.idxMu.Lock()
	if c.idxClosed {
		c.idxMu.Unlock()
		return
	}
	c.mu.Lock()
	e := c.entries[indexKey(bucket, name)]
	var dropped, dead []*entry
	if e != nil && e.rec.gen == gen {
		dropped = []*entry{e}
		if c.dropLocked(e) {
			dead = dropped
		}
	}
	c.mu.Unlock()
	c.deleteRecords(dropped)
	c.idxMu.Unlock()
	c.removeFiles(dead)
}

// newHandle opens the file of acquired entry e.
func (c *Cache) newHandle(e *entry) (*Handle, error) {
	a := e.attrs() // immutable fields only
	p := c.lay.path(e.id)
	f, err := os.Open(p)
	if err != nil {
		c.release(e)
		if errors.Is(err, fs.ErrNotExist) { // removed behind our back: fetch again
			c.cfg.log.Warn("tier: cached file vanished", "object", a.Object.String(), "path", p)
			c.dropGen(a.Bucket, a.Name, a.Generation)
			return nil, retryError{fmt.Errorf("tier: open %s: %w", a.Object, err)}
		}
		return nil, fmt.Errorf("tier: open %s: %w", a.Object, err)
	}
	return &Handle{c: c, e: e, f: f, attrs: a, path: p}, nil
}

// release drops a handle's reference; the last one on a zombie deletes its
// file (unless the cache is closed: the next Open removes it as an orphan).
func (c *Cache) release(e *entry) {
	c.mu.Lock()
	e.refs--
	dead := e.refs == 0 && e.state == zombie && !c.closed
	if dead {
		delete(c.zombies, e.id)
		c.buryLocked(e)
		c.running.Add(1)
	}
	c.mu.Unlock()
	if dead {
		c.removeFiles([]*entry{e})
		c.running.Done()
	}
}

// Handle is an open cached object: one generation's bytes in a file of the
// disk tier. While any handle on it is open, the file is neither evicted nor
// deleted (even if a newer generation replaces it). ReadAt is safe for
// concurrent use; Close must be called once.
type Handle struct {
	c      *Cache
	e      *entry
	f      *os.File
	attrs  fetch.Attrs
	path   string
	closed atomic.Bool
}

var _ io.ReaderAt = (*Handle)(nil)

// Attrs returns the attributes of the generation the handle holds.
func (h *Handle) Attrs() fetch.Attrs { return h.attrs }

// Path returns the cached file's path, valid until Close. The file must not
// be modified.
func (h *Handle) Path() string { return h.path }

// Size returns the object's size in bytes.
func (h *Handle) Size() int64 { return h.attrs.Size }

// Stale reports whether the cache has stopped serving this copy (it was
// replaced by a newer generation, evicted or dropped). The handle stays
// readable until Close; a holder that caches handles should open again to
// get the current copy. Stale costs one atomic load.
func (h *Handle) Stale() bool { return h.e.stale.Load() }

// ReadAt implements io.ReaderAt over the cached file.
func (h *Handle) ReadAt(p []byte, off int64) (int, error) { return h.f.ReadAt(p, off) }

// Close closes the file and releases the entry. A second Close returns an
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
