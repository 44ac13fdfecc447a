package tier

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cacheagent/cacheagent/object"
)

// Hold is space of the base tier's budget set aside for bytes the cache
// does not hold yet: a checkpoint's files between their save and their
// upload (dirty bytes). Held space counts in the budget, so fills evict to
// stay within it, and nothing evicts it (stats.Tier.DirtyBytes). Adopt
// turns a hold into a cached copy; Release gives the space back. A Hold is
// safe for concurrent use.
type Hold struct {
	c  *Cache
	mu sync.Mutex
	n  int64 // bytes still held
}

// Hold sets aside n bytes of the base tier's budget, evicting least
// recently used copies that are neither pinned nor in use, as a fill does
// (of what: the objects the bytes will be, such as a checkpoint's prefix,
// named in errors). If pinned, in-use and held copies leave no room it
// fails with ErrNoSpace, saying what holds the space; nothing is evicted
// then.
func (c *Cache) Hold(ctx context.Context, n int64, what object.Object) (*Hold, error) {
	if n < 0 {
		return nil, fmt.Errorf("tier: hold %d bytes for %s", n, what)
	}
	n = roundUp(n, c.base.bsize)
	if n > 0 {
		if err := c.reserve(ctx, n, object.Attrs{Object: what}); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	c.base.reserved -= n
	c.base.held += n
	c.mu.Unlock()
	return &Hold{c: c, n: n}, nil
}

// Bytes returns the bytes still held.
func (h *Hold) Bytes() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// Release gives what is still held back to the budget. Releasing twice
// does nothing.
func (h *Hold) Release() {
	h.mu.Lock()
	n := h.n
	h.n = 0
	h.mu.Unlock()
	if n == 0 {
		return
	}
	c := h.c
	c.mu.Lock()
	c.base.held -= n
	c.base.signalLocked()
	c.mu.Unlock()
}

// take moves up to n bytes of the hold into the base tier's reservations,
// for a copy being adopted; it returns how many it moved.
func (h *Hold) take(n int64) int64 {
	h.mu.Lock()
	n = min(n, h.n)
	h.n -= n
	h.mu.Unlock()
	c := h.c
	c.mu.Lock()
	c.base.held -= n
	c.base.reserved += n
	c.mu.Unlock()
	return n
}

// Adopt makes the file at path the cached copy of a, the exact bytes of
// that generation (the caller checked their CRC32C, which a carries): it
// is renamed into the disk tier, not copied, so path must be on the tier's
// filesystem, and it must not be written again. Its space comes from h
// (as much of it as the file needs; the rest stays held), or from the
// budget when h is nil. The copy then lives as any fill's would, newest
// generation of its name, evictable unless pinned. If a's generation is
// cached already (or a fill of it ends first), the file is removed instead.
// On error the file is left at path, or removed if it was moved already.
func (c *Cache) Adopt(ctx context.Context, a object.Attrs, path string, h *Hold) error {
	end, err := c.begin()
	if err != nil {
		return err
	}
	defer end()
	if c.cfg.dir == "" {
		return fmt.Errorf("tier: adopt %s: a shm-only cache adopts no files", a.Object)
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("tier: adopt %s: %w", a.Object, err)
	case !fi.Mode().IsRegular() || fi.Size() != a.Size:
		return fmt.Errorf("tier: adopt %s: %s is not a regular file of %d bytes", a.Object, path, a.Size)
	}
	need := roundUp(a.Size, c.base.bsize)
	var got int64
	if h != nil {
		got = h.take(need)
	}
	if got < need {
		if err := c.reserve(ctx, need-got, a); err != nil {
			c.unreserve(got)
			return fmt.Errorf("tier: adopt %s: %w", a.Object, err)
		}
	}
	// One fill or adoption of a generation at a time: a fill of the same
	// generation that ends first makes this copy redundant.
	id := idOf(a.Bucket, a.Name, a.Generation)
	for {
		adopted := false
		v, err, _ := c.flights.Do(string(id[:]), func() (any, error) {
			adopted = true
			return c.adoptFile(ctx, a, path, need)
		})
		switch {
		case adopted && err != nil:
			return err
		case adopted:
			c.takeFillHold(v.(fillResult).e) // an older generation than the one cached: not kept
			return nil
		case err == nil: // a fill of this generation ended meanwhile
			c.unreserve(need)
			if err := os.Remove(path); err != nil {
				c.cfg.log.Warn("tier: remove a file to adopt that a fill made redundant", "path", path, "err", err)
			}
			return nil
		}
		// The fill this joined failed: adopt the file after all.
	}
}

// adoptFile is Adopt's part in c.flights: it renames the file at path into
// place and indexes it, unless a's generation is cached already (then the
// file is removed), releasing need bytes of reservation on error.
func (c *Cache) adoptFile(ctx context.Context, a object.Attrs, path string, need int64) (fillResult, error) {
	if e := c.findFile(a.Object); e != nil {
		c.unreserve(need)
		if err := os.Remove(path); err != nil {
			c.cfg.log.Warn("tier: remove a file to adopt whose generation is cached", "path", path, "err", err)
		}
		return fillResult{e: e}, nil
	}
	id := idOf(a.Bucket, a.Name, a.Generation)
	final := c.base.path(id)
	if err := c.claim(ctx, c.base, id); err != nil {
		c.unreserve(need)
		return fillResult{}, fmt.Errorf("tier: adopt %s: %w", a.Object, err)
	}
	if err := os.Rename(path, final); err != nil {
		c.unreserve(need)
		return fillResult{}, fmt.Errorf("tier: adopt %s: %w", a.Object, err)
	}
	fi, err := os.Stat(final)
	if err == nil {
		err = syncDir(filepath.Dir(final))
	}
	var e *entry
	if err == nil {
		e, err = c.commit(a, fi, need)
	}
	if err != nil {
		c.unreserve(need)
		if rerr := os.Remove(final); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			c.cfg.log.Warn("tier: remove unindexed file", "object", a.Object.String(), "err", rerr)
		}
		return fillResult{}, fmt.Errorf("tier: adopt %s: %w", a.Object, err)
	}
	return fillResult{e: e}, nil
}
