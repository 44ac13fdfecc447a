package tier

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"golang.org/x/sys/unix"
)

// sharedUrgency is the urgency of one file's fill, shared by the callers
// waiting on it (n of them) so a joining Demand raises a running Warm fill.
type sharedUrgency struct {
	u *object.Urgency
	n int
}

// fillResult is what a shared fill yields to each of its waiters.
type fillResult struct {
	e       *entry // live or zombie; the waiter takes its own ref
	fetched int64  // bytes downloaded (0 if the file was already there)
}

// share fills a (one exact generation) or joins the fill already running
// for it, and waits until it ends or ctx is done. joined reports that the
// result came from another caller's fill. The fill runs on a context
// detached from ctx, so a waiter giving up does not fail the others.
func (c *Cache) share(ctx context.Context, a object.Attrs, p object.Priority) (r fillResult, joined bool, err error) {
	return c.shareRetry(ctx, a, p, false)
}

// fillHere returns the context of the small fills a worker goroutine runs
// (shareHere): ctx's values, cancelled with errAbandoned when ctx ends.
// One per worker, not one per fill: 128 workers adding and removing a
// child of ctx per object contend for its lock. Call release when the
// worker ends.
func fillHere(ctx context.Context) (here context.Context, release func()) {
	here, abandon := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { abandon(errAbandoned) })
	return here, func() {
		stop()
		abandon(nil)
	}
}

// shareHere is share for a prefetch worker filling a small object. When it
// leads the fill, the fill runs on the worker's goroutine: no goroutine per
// object, whose fresh stack grew to the storage client's depth each time
// (12 µs of CPU per object at 64 + 64 connections, docs/benchmarks.md). It
// then waits for the fill's end, so the fill runs on ctx itself, not
// detached from it: ctx must end with errAbandoned as its cause when the
// worker gives up (see Cache.prefetch), and whoever joined the fill and
// still waits fills again.
func (c *Cache) shareHere(ctx context.Context, a object.Attrs, p object.Priority) (r fillResult, joined bool, err error) {
	return c.shareRetry(ctx, a, p, true)
}

// shareRetry shares a fill (here: run on this goroutine when it leads),
// and starts another when the one it joined was abandoned by its leader.
func (c *Cache) shareRetry(ctx context.Context, a object.Attrs, p object.Priority, here bool) (r fillResult, joined bool, err error) {
	for {
		r, joined, err = c.shareOnce(ctx, a, p, here)
		if !joined || err == nil || ctx.Err() != nil || !errors.Is(err, errAbandoned) {
			return r, joined, err
		}
	}
}

// shareOnce is one try of shareRetry.
func (c *Cache) shareOnce(ctx context.Context, a object.Attrs, p object.Priority, here bool) (r fillResult, joined bool, err error) {
	id := idOf(a.Bucket, a.Name, a.Generation)
	u, leave := c.joinUrgency(id, p)
	defer leave()
	led := false // set by the fill, if it is this caller's; read after it ends
	fill := func() (any, error) {
		led = true
		return c.runFill(ctx, a, u, here)
	}
	if here {
		v, err, _ := c.flights.Do(string(id[:]), fill)
		if err != nil {
			return fillResult{}, !led, err
		}
		return v.(fillResult), !led, nil
	}
	ch := c.flights.DoChan(string(id[:]), fill)
	select {
	case res := <-ch:
		if res.Err != nil {
			return fillResult{}, !led, res.Err
		}
		return res.Val.(fillResult), !led, nil
	case <-ctx.Done():
		return fillResult{}, false, fmt.Errorf("tier: fill %s: %w", a.Object, context.Cause(ctx))
	}
}

// joinUrgency returns the urgency shared by everyone waiting on id's fill,
// raised to p; leave drops the caller from it.
func (c *Cache) joinUrgency(id fileID, p object.Priority) (u *object.Urgency, leave func()) {
	c.mu.Lock()
	s := c.urgencies[id]
	if s == nil {
		s = &sharedUrgency{u: object.NewUrgency(p)}
		c.urgencies[id] = s
	} else {
		s.u.Raise(p)
	}
	s.n++
	n := s.n
	c.mu.Unlock()
	if c.onJoin != nil {
		c.onJoin(n)
	}
	return s.u, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if s.n--; s.n == 0 && c.urgencies[id] == s {
			delete(c.urgencies, id)
		}
	}
}

// runFill is the body of one shared fill. It runs on singleflight's
// goroutine (or, here, its leader's: see shareHere) and is counted in
// c.running, so Close waits for it.
func (c *Cache) runFill(ctx context.Context, a object.Attrs, u *object.Urgency, here bool) (fr fillResult, err error) {
	end, err := c.begin()
	if err != nil {
		return fillResult{}, err
	}
	defer end()
	var cancel func()
	if here {
		ctx, cancel = c.closable(ctx)
		defer func() {
			if err != nil && errors.Is(context.Cause(ctx), errAbandoned) && !errors.Is(err, errAbandoned) {
				err = fmt.Errorf("%w: %w", errAbandoned, err)
			}
		}()
	} else {
		ctx, cancel = c.detach(ctx)
	}
	defer cancel()
	// singleflight only merges overlapping calls: the file may have been
	// published by a fill that ended just before this one started.
	if e := c.findFile(a.Object); e != nil {
		return fillResult{e: e}, nil
	}
	e, err := c.fill(ctx, a, u)
	if err != nil {
		return fillResult{}, err
	}
	return fillResult{e: e, fetched: a.Size}, nil
}

// findFile returns the live entry, or the zombie that may still be served,
// holding o's generation, if any. Doomed zombies are never served: a fill
// replaces their file (see claim).
func (c *Cache) findFile(o object.Object) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entryLocked(indexKey(o.Bucket, o.Name)); e != nil && e.rec.gen == o.Generation {
		return e
	}
	if z := c.base.zombies[idOf(o.Bucket, o.Name, o.Generation)]; z != nil && !z.doomed {
		return z
	}
	return nil
}

// fill reserves space, downloads a into a new file, publishes and indexes
// it. If the filesystem is full it evicts to make room and tries once more.
func (c *Cache) fill(ctx context.Context, a object.Attrs, u *object.Urgency) (*entry, error) {
	if c.packs(a) {
		need := roundUp(a.Size, c.segs.align)
		if err := c.reserve(ctx, need, a); err != nil {
			return nil, err
		}
		e, err := c.fillPacked(ctx, a, u, need)
		if err != nil {
			c.unreserve(need)
			if errors.Is(err, syscall.ENOSPC) {
				err = fmt.Errorf("%w: filesystem full: %w", ErrNoSpace, err)
			}
		}
		return e, err
	}
	need := roundUp(a.Size, c.base.bsize)
	if err := c.reserve(ctx, need, a); err != nil {
		return nil, err
	}
	var fi fs.FileInfo
	err := c.roomOnFull(need, func() (err error) {
		fi, err = c.download(ctx, a, u)
		return err
	})
	if err == nil { // published: indexed below, or removed
		p := c.base.path(idOf(a.Bucket, a.Name, a.Generation))
		if !a.HasCRC32C && a.Size > 0 {
			// The source gave no CRC32C (a Dir, a fleet's chunk copy):
			// record the one of the bytes as filled, so Verify can tell
			// later damage.
			a.CRC32C, err = fileCRC(p)
			a.HasCRC32C = err == nil
		}
		var e *entry
		if err == nil {
			if e, err = c.commit(a, fi, need); err == nil {
				return e, nil
			}
		}
		if rerr := os.Remove(p); rerr != nil {
			c.cfg.log.Warn("tier: remove unindexed file", "object", a.Object.String(), "err", rerr)
		}
	}
	c.unreserve(need)
	if errors.Is(err, syscall.ENOSPC) {
		err = fmt.Errorf("%w: filesystem full: %w", ErrNoSpace, err)
	}
	return nil, err
}

// roomOnFull runs try and, if the filesystem was full (ENOSPC), evicts
// least recently used copies until need bytes and the headroom are free and
// runs it once more.
func (c *Cache) roomOnFull(need int64, try func() error) error {
	err := try()
	if !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	freed, ferr := c.freeDisk(need)
	switch {
	case ferr != nil:
		return errors.Join(err, ferr)
	case freed:
		return try()
	}
	return fmt.Errorf("%w (evicting everything unused would not free enough)", err)
}

// download writes a into a temp file, fsyncs it, renames it into place and
// fsyncs the directory: the data file either is complete or does not exist.
// It returns the file's stat.
func (c *Cache) download(ctx context.Context, a object.Attrs, u *object.Urgency) (fs.FileInfo, error) {
	f, err := createTemp(c.base.lay.tmp)
	if err != nil {
		return nil, fmt.Errorf("tier: fill %s: %w", a.Object, err)
	}
	tmp := f.Name()
	fi, err := c.writeTemp(ctx, f, a, u)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("tier: fill %s: close: %w", a.Object, cerr)
	}
	id := idOf(a.Bucket, a.Name, a.Generation)
	final := c.base.path(id)
	if err == nil {
		if err = c.claim(ctx, c.base, id); err != nil {
			err = fmt.Errorf("tier: fill %s: %w", a.Object, err)
		}
	}
	if err == nil {
		if err = os.Rename(tmp, final); err != nil {
			err = fmt.Errorf("tier: fill %s: publish: %w", a.Object, err)
		}
	}
	if err != nil {
		os.Remove(tmp)
		return nil, err
	}
	if err := syncDir(filepath.Dir(final)); err != nil {
		os.Remove(final)
		return nil, fmt.Errorf("tier: fill %s: %w", a.Object, err)
	}
	return fi, nil
}

// writeTemp allocates, downloads and fsyncs one temp file and returns its
// final stat.
func (c *Cache) writeTemp(ctx context.Context, f *os.File, a object.Attrs, u *object.Urgency) (os.FileInfo, error) {
	if err := c.allocate(f, a.Size, c.base); err != nil {
		return nil, fmt.Errorf("tier: fill %s: %w", a.Object, err)
	}
	if a.Size > 0 {
		end := c.downloadStarted()
		err := c.cfg.dl.Fetch(ctx, a, f, u)
		if err != nil {
			end(0)
			return nil, fmt.Errorf("tier: fill %s: %w", a.Object, err)
		}
		end(a.Size)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("tier: fill %s: fsync: %w", a.Object, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("tier: fill %s: %w", a.Object, err)
	}
	if fi.Size() != a.Size {
		return nil, fmt.Errorf("tier: fill %s: wrote %d bytes, want %d: %w", a.Object, fi.Size(), a.Size, object.ErrShortRead)
	}
	return fi, nil
}

// allocate checks that st's filesystem keeps its headroom after size more
// bytes and allocates them up front (without changing the file's size), so
// a full disk shows up here as ENOSPC rather than mid-download, and the
// index's mmapped files never meet a full filesystem.
func (c *Cache) allocate(f *os.File, size int64, s *store) error {
	return c.allocateAt(f, 0, size, s, unix.FALLOC_FL_KEEP_SIZE)
}

// allocateAt is allocate for the size bytes at off, with fallocate mode
// mode (a segment grows to hold what is allocated: mode 0).
func (c *Cache) allocateAt(f *os.File, off, size int64, s *store, mode uint32) error {
	if size == 0 {
		return nil
	}
	c.allocMu.Lock()
	defer c.allocMu.Unlock()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("statfs: %w", err)
	}
	need := roundUp(size, s.bsize)
	if avail := fsInfoOf(&st).avail; avail-need < s.headroom {
		return fmt.Errorf("allocate %d bytes: %d available and %d kept free: %w",
			need, avail, s.headroom, syscall.ENOSPC)
	}
	err := unix.Fallocate(int(f.Fd()), mode, off, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return nil // best effort: the download reports ENOSPC instead
	}
	if err != nil {
		return fmt.Errorf("fallocate %d bytes: %w", size, err)
	}
	return nil
}

// commit indexes a freshly published file and makes it live, replacing the
// name's previous generation (kept as a zombie while handles use it) and
// turning the reservation into used space.
func (c *Cache) commit(a object.Attrs, fi fs.FileInfo, reservation int64) (*entry, error) {
	now := time.Now().UnixNano()
	e := newEntry(c.base, a, blocksOf(fi), identOfInfo(fi), now)
	c.idxMu.Lock()
	if c.idxClosed {
		c.idxMu.Unlock()
		return nil, ErrClosed
	}
	c.mu.Lock()
	if _, kept := c.replacingLocked(e, reservation); !kept {
		c.mu.Unlock()
		c.idxMu.Unlock()
		return e, nil
	}
	c.mu.Unlock()
	if err := c.idx.put(e.key, e.rec); err != nil {
		c.idxMu.Unlock()
		return nil, fmt.Errorf("tier: fill %s: %w", a.Object, err)
	}
	c.mu.Lock()
	var dead []*entry
	if old := c.entryLocked(e.key); old != nil {
		dead = c.dropLocked(old, false, dead)
	}
	c.installLocked(e)
	c.base.reserved -= reservation
	c.stats.fills++
	c.stats.bytesFetched += a.Size
	// The file may occupy more blocks than reserved (metadata blocks).
	over, _ := c.base.lruVictimsLocked(c.base.committedLocked()-c.base.maxBytes, e)
	dead = c.evictLocked(over, dead)
	c.base.signalLocked()
	if e.rec.hotPin { // the pin carried over from the old generation
		c.queuePromoteLocked(e)
	}
	c.mu.Unlock()
	c.deleteRecords(over)
	c.idxMu.Unlock()
	c.removeFiles(dead)
	return e, nil
}

// replacingLocked returns the entry new copy e replaces (nil if none),
// with its pins carried over to e (pins outlive generations), and kept
// true; or, if the cached generation is newer than e's, makes e a copy
// outside the cache (transientLocked, taking reservation) and returns
// kept false.
func (c *Cache) replacingLocked(e *entry, reservation int64) (old *entry, kept bool) {
	old = c.entryLocked(e.key)
	if old != nil && old.rec.gen > e.rec.gen {
		c.transientLocked(e, reservation)
		return nil, false
	}
	if old != nil {
		e.rec.pinned, e.rec.hotPin = old.rec.pinned, old.rec.hotPin
	}
	return old, true
}

// transientLocked makes e, a fill of an older generation than the one
// cached (an Open of that exact generation, or a fill that a newer one
// overtook), a copy outside the cache: it never replaces the newer one
// and is never indexed. It is a zombie, held by its fill (fillHold) until
// the fill's Opens have their own handles (takeFillHold), served to them
// and to Opens of its exact generation while held, and deleted at its
// last release.
func (c *Cache) transientLocked(e *entry, reservation int64) {
	e.refs, e.transient, e.fillHold = 1, true, true
	e.st.used += e.rec.blocks
	e.st.reserved -= reservation
	c.stats.fills++
	c.stats.bytesFetched += e.rec.size
	c.retireLocked(e, nil) // held: a zombie, never dead
	e.st.signalLocked()
}

// takeFillHold hands over the reference a transient copy's fill holds
// (see transientLocked), if it was not handed over yet: the caller took
// its own, or wants none.
func (c *Cache) takeFillHold(e *entry) {
	if e == nil || !e.transient { // read without mu: set before the fill returned e
		return
	}
	c.mu.Lock()
	held := e.fillHold
	e.fillHold = false
	c.mu.Unlock()
	if held {
		c.release(e)
	}
}

// fileCRC returns the CRC32C of the file at path.
func fileCRC(path string) (uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("tier: checksum %s: %w", filepath.Base(path), err)
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	if _, err := io.Copy(h, f); err != nil {
		return 0, fmt.Errorf("tier: checksum %s: %w", filepath.Base(path), err)
	}
	return h.Sum32(), nil
}
