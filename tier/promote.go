package tier

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sync/errgroup"
)

// promoteParallelism is how many copies Promote and PinHot run at once.
// Copies are bound by memory bandwidth; a few hide per-file latency.
const promoteParallelism = 4

// Promote copies every cached object of bucket whose name starts with
// prefix into the shm tier, synchronously, demoting least recently used shm
// copies that are neither pinned hot nor in use to make room. Objects that
// are not cached are not fetched (Prefetch them first). It returns how many
// objects it copied; those already in shm do not count.
//
// Promote keeps going past objects that do not fit (errors matching
// ErrNoSpace, and syscall.ENOSPC if the tmpfs itself is full) and returns
// the failures joined; those objects are still served from disk. In
// shm-only mode every cached object is in shm already and Promote returns
// 0. Without a shm tier it returns ErrNoShm.
func (c *Cache) Promote(ctx context.Context, bucket, prefix string) (int, error) {
	end, err := c.begin()
	if err != nil {
		return 0, err
	}
	defer end()
	if c.hot == nil {
		return 0, c.noShm()
	}
	c.mu.Lock()
	var es []*entry
	for _, e := range c.matchLocked(bucket, prefix) {
		if e.hot == nil {
			es = append(es, e)
		}
	}
	c.mu.Unlock()
	return c.promoteAll(ctx, es)
}

// noShm is what Promote, PinHot and Demote return without a hot tier: nil
// in shm-only mode, ErrNoShm when there is no shm tier at all.
func (c *Cache) noShm() error {
	if c.base.name == Shm {
		return nil
	}
	return ErrNoShm
}

// promoteAll promotes es, a few at a time, and returns how many it
// promoted and the failures joined. It stops early when ctx ends.
func (c *Cache) promoteAll(ctx context.Context, es []*entry) (int, error) {
	var (
		mu   sync.Mutex // protects n and errs
		n    int
		errs []error
	)
	var g errgroup.Group
	g.SetLimit(promoteParallelism)
	for _, e := range es {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			ok, err := c.promoteShared(ctx, e)
			mu.Lock()
			defer mu.Unlock()
			if ok {
				n++
			}
			if err != nil && ctx.Err() == nil {
				errs = append(errs, err)
			}
			return nil
		})
	}
	g.Wait()
	if err := ctx.Err(); err != nil {
		errs = append(errs, fmt.Errorf("tier: promote: %w", context.Cause(ctx)))
	}
	return n, errors.Join(errs...)
}

// promoteShared promotes base entry e, or joins the promotion already
// running for it, and waits until it ends or ctx is done. The copy runs on
// a context detached from ctx (cancelled by Close), so one caller giving up
// does not fail the others. ok reports that e got a hot copy by this
// promotion.
func (c *Cache) promoteShared(ctx context.Context, e *entry) (ok bool, err error) {
	ch := c.promos.DoChan(string(e.id[:]), func() (any, error) {
		end, err := c.begin()
		if err != nil {
			return false, err
		}
		defer end()
		pctx, cancel := c.detach(ctx)
		defer cancel()
		return c.promoteOne(pctx, e)
	})
	select {
	case r := <-ch:
		ok, _ = r.Val.(bool)
		return ok, r.Err
	case <-ctx.Done():
		return false, fmt.Errorf("tier: promote %s: %w", e.attrs().Object, context.Cause(ctx))
	}
}

// promoteOne copies e's base file into the shm tier and makes the copy
// live. A promotion that does not fit is skipped with an error matching
// ErrNoSpace; nothing is left behind.
func (c *Cache) promoteOne(ctx context.Context, e *entry) (bool, error) {
	c.mu.Lock()
	if e = c.currentLocked(e); e != nil {
		e.keep++ // not frozen while promoted
	}
	ok := e != nil && e.state == live && e.hot == nil
	c.mu.Unlock()
	if e == nil {
		return false, nil
	}
	defer func() {
		c.mu.Lock()
		e.keep--
		c.mu.Unlock()
	}()
	if !ok {
		return false, nil
	}
	a := e.attrs()
	need := roundUp(a.Size, c.hot.bsize)
	if err := c.reserveHot(need, e); err != nil {
		c.countSkip()
		return false, err
	}
	h, err := c.copyToHot(ctx, e)
	if err != nil {
		c.unreserveHot(need)
		if errors.Is(err, errLeft) {
			return false, nil
		}
		if errors.Is(err, syscall.ENOSPC) {
			c.countSkip()
			err = fmt.Errorf("%w: shm filesystem full: %w", ErrNoSpace, err)
		}
		return false, err
	}
	ok, dead := c.commitHot(e, h, need)
	c.removeFiles(dead)
	if !ok { // e left the cache during the copy
		if err := os.Remove(c.hot.path(e.id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.cfg.log.Warn("tier: remove unused shm copy", "object", a.Object.String(), "err", err)
		}
		return false, nil
	}
	return true, nil
}

// errLeft is copyToHot's answer when its entry left the cache before the
// copy could open the base file: not a failure, nothing to promote.
var errLeft = errors.New("tier: entry left the cache")

// countSkip counts a promotion skipped for want of space.
func (c *Cache) countSkip() {
	c.mu.Lock()
	c.stats.promoteSkips++
	c.mu.Unlock()
}

// copyToHot copies e's base file to a temp file in the shm tier and
// publishes it under e's id; it returns the (not yet live) hot copy. On
// error no file is left behind.
func (c *Cache) copyToHot(ctx context.Context, e *entry) (*entry, error) {
	a := e.attrs()
	src, err := os.Open(e.path())
	if err == nil {
		if err = e.checkFile(src); err != nil {
			src.Close()
		}
	}
	if err != nil {
		if (errors.Is(err, fs.ErrNotExist) || errors.Is(err, errChanged)) && !c.dropDamaged(e) {
			return nil, errLeft // evicted or replaced since promoteOne looked
		}
		return nil, fmt.Errorf("tier: promote %s: %w", a.Object, err)
	}
	defer src.Close()
	f, err := createTemp(c.hot.lay.tmp)
	if err != nil {
		return nil, fmt.Errorf("tier: promote %s: %w", a.Object, err)
	}
	err = c.hooks.Load().onCopy(ctx, e.key)
	var fi fs.FileInfo
	if err == nil {
		fi, err = c.writeHotTemp(ctx, f, src, e.rec.off, a.Size)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil {
		err = c.claim(ctx, c.hot, e.id)
	}
	if err == nil {
		err = os.Rename(f.Name(), c.hot.path(e.id))
	}
	if err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("tier: promote %s: %w", a.Object, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.newHotCopyLocked(e, blocksOf(fi), identOfInfo(fi)), nil
}

// writeHotTemp allocates f in the shm tier, copies the size bytes of src at
// off into it, syncs it and returns its final stat.
func (c *Cache) writeHotTemp(ctx context.Context, f, src *os.File, off, size int64) (fs.FileInfo, error) {
	if err := c.allocate(f, size, c.hot); err != nil {
		return nil, err
	}
	if off == 0 {
		if err := copyFile(ctx, f, src, size); err != nil {
			return nil, err
		}
	} else if err := copySection(f, src, off, size); err != nil { // a packed object: small
		return nil, err
	}
	if err := f.Sync(); err != nil { // free on tmpfs; durable elsewhere
		return nil, fmt.Errorf("fsync: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() != size {
		return nil, fmt.Errorf("copied %d bytes, want %d: %w", fi.Size(), size, errChanged)
	}
	return fi, nil
}
