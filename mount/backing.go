package mount

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/tier"
)

// Bounds of the backing cache: how many files, and how many bytes, stay
// open and registered with the kernel while no one has them open. An idle
// backing holds a cache handle, so the cache's LRU eviction skips its copy
// (an explicit Evict or a newer generation still removes it, and the sweep
// then closes the backing): the byte bound is what the mount may keep from
// being evicted beyond the files actually open.
const (
	maxIdleBackings     = 4096
	maxIdleBackingBytes = 256 << 20
	// idleBudgetShare bounds idle backings further, to this share of the
	// cache's budget where the cache reports one (a small cache must not
	// be held whole by files no one has open: plans could not evict, nor
	// the planner prefetch, into it).
	idleBudgetShare = 8
	// maxIdleBackingSize is the largest file kept once closed: reusing the
	// open matters for small files, and a large one would pin much of the
	// cache.
	maxIdleBackingSize = 16 << 20
	// sweepInterval is how often idle backings whose copy left the cache
	// (evicted, replaced or demoted) are closed, giving back its space.
	sweepInterval = 5 * time.Second
)

// kernelBacking registers open files with the kernel for FUSE passthrough.
// *fuse.Server implements it.
type kernelBacking interface {
	RegisterBackingFd(*fuse.BackingMap) (int32, syscall.Errno)
	UnregisterBackingFd(id int32) syscall.Errno
}

// backing is a file's cached copy held open for passthrough: the cache
// handle (the lease that keeps the copy from being deleted), our descriptor
// on it and the id under which the kernel knows that descriptor. Every open
// of the file while the kernel keeps its inode reuses it, so that an open
// costs no cache lookup, no open(2) and no registration.
type backing struct {
	node *fileNode
	th   *tier.Handle
	fd   int
	id   int32 // 0: not registered (reads are served by this process)
	off  int64 // where the object's bytes start in the file (packed objects)
	size int64
	// Guarded by backings.mu.
	opens int           // open files using it
	idle  *list.Element // in backings.idle while opens == 0 and cached
	gone  bool          // no longer node's backing: closed at the last release
}

// backings is the per-inode cache of backing files: a file's backing stays
// while the file is open, and afterwards among the most recently used idle
// ones (bounded in count and bytes), until the kernel forgets the inode.
type backings struct {
	kernel kernelBacking
	// registered and unregistered count the kernel registrations.
	registered, unregistered atomic.Int64
	stop                     chan struct{} // closed by close: ends sweeps
	sweeping                 sync.WaitGroup

	// budget, if set, returns the cache's byte budget (see idleBudgetShare).
	budget func() int64

	mu        sync.Mutex
	idle      list.List // *backing, most recently released first
	idleBytes int64
	maxIdle   int
	maxBytes  int64
	// pending hands a backing id from Open to passthroughFS.Open, by the
	// request's cancel channel (unique among requests in flight).
	pending map[<-chan struct{}]int32
	closed  bool
}

// newBackings returns an empty backing cache registering with kernel and
// keeping at most maxIdle files idle.
func newBackings(kernel kernelBacking, maxIdle int) *backings {
	return &backings{kernel: kernel, maxIdle: maxIdle, maxBytes: maxIdleBackingBytes,
		pending: make(map[<-chan struct{}]int32), stop: make(chan struct{})}
}

// startSweeps closes, every interval until close, the idle backings whose
// copy left the cache; log gets what fails.
func (c *backings) startSweeps(interval time.Duration, log *slog.Logger) {
	c.sweeping.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
				if err := c.sweep(); err != nil {
					log.Warn("mount: closing files whose cached copy left the cache", "err", err)
				}
			}
		}
	})
}

// sweep closes the idle backings whose copy left the cache.
func (c *backings) sweep() error {
	return c.closeIdle(func(bk *backing) bool { return bk.th.Stale() })
}

// reclaim closes every idle backing: the cache is short of room, and each
// holds a cache handle that keeps its copy from being evicted.
func (c *backings) reclaim() error {
	return c.closeIdle(func(*backing) bool { return true })
}

// closeIdle closes the idle backings for which drop returns true.
func (c *backings) closeIdle(drop func(*backing) bool) error {
	var dropped []*backing
	c.mu.Lock()
	for e := c.idle.Front(); e != nil; e = e.Next() {
		if bk := e.Value.(*backing); drop(bk) {
			dropped = append(dropped, bk)
		}
	}
	for _, bk := range dropped {
		c.removeLocked(bk)
	}
	c.mu.Unlock()
	var errs []error
	for _, bk := range dropped {
		errs = append(errs, c.closeBacking(bk))
	}
	return errors.Join(errs...)
}

// acquire returns n's backing with one more open, opening the cached copy
// and registering it if n has none (or only a stale one no one uses).
func (c *backings) acquire(ctx context.Context, f *FS, n *fileNode) (*backing, syscall.Errno) {
	c.mu.Lock()
	bk, drop := c.reuseLocked(n)
	c.mu.Unlock()
	if drop != nil {
		c.closeBacking(drop)
	}
	if bk != nil {
		bk.th.Reused() // the cache's recency and plans count this open
		return bk, 0
	}
	th, err := f.cfg.cache.Open(ctx, n.attrs.Object)
	if err != nil {
		return nil, f.openErrno(ctx, n.b, n.attrs.Object, err)
	}
	fd, err := unix.Open(th.Path(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		f.cfg.log.Warn("mount: open failed", "object", n.attrs.Object.String(),
			"err", errors.Join(fmt.Errorf("open cached file: %w", err), th.Close()))
		return nil, syscall.EIO
	}
	nb := &backing{node: n, th: th, fd: fd, off: th.Offset(), size: n.attrs.Size, opens: 1}
	if th.Packed() {
		// A segment holds other objects too: the kernel would read
		// past this one's end. Reads are served at its offset instead.
	} else if id, en := c.kernel.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)}); en == 0 {
		nb.id = id
		c.registered.Add(1)
	} else {
		f.cfg.log.Warn("mount: registering a file for passthrough failed; serving its reads",
			"object", n.attrs.Object.String(), "err", en)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.closeBacking(nb)
		return nil, syscall.EIO
	}
	// A concurrent open may have set n's backing meanwhile: the kernel
	// needs every open of an inode on the same backing file.
	bk, drop = c.reuseLocked(n)
	if bk == nil {
		n.bk = nb
	}
	c.mu.Unlock()
	if drop != nil {
		c.closeBacking(drop)
	}
	if bk != nil {
		c.closeBacking(nb)
		return bk, 0
	}
	return nb, 0
}

// reuseLocked returns n's backing with one more open, or nil if it has none
// to reuse; drop is a stale idle backing that was n's, for the caller to
// close.
func (c *backings) reuseLocked(n *fileNode) (bk, drop *backing) {
	bk = n.bk
	if bk == nil {
		return nil, nil
	}
	if bk.opens == 0 && bk.th.Stale() {
		c.removeLocked(bk)
		return nil, bk
	}
	if bk.idle != nil {
		c.idleBytes -= bk.size
		c.idle.Remove(bk.idle)
		bk.idle = nil
	}
	bk.opens++
	return bk, nil
}

// release drops one open of bk. Once unused, it stays among the idle
// backings unless it is gone, stale or large; idle ones beyond the bounds
// are closed, least recently used first.
func (c *backings) release(bk *backing) error {
	var drop []*backing
	maxBytes := c.maxBytes
	if c.budget != nil {
		maxBytes = min(maxBytes, c.budget()/idleBudgetShare)
	}
	c.mu.Lock()
	bk.opens--
	if bk.opens == 0 {
		if bk.gone || c.closed || bk.size > maxIdleBackingSize || bk.th.Stale() {
			c.removeLocked(bk)
			drop = append(drop, bk)
		} else {
			bk.idle = c.idle.PushFront(bk)
			c.idleBytes += bk.size
		}
		for c.idle.Len() > c.maxIdle || c.idleBytes > maxBytes {
			old := c.idle.Back().Value.(*backing)
			c.removeLocked(old)
			drop = append(drop, old)
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, d := range drop {
		errs = append(errs, c.closeBacking(d))
	}
	return errors.Join(errs...)
}

// forget drops n's backing: the kernel forgot the inode, so no open can
// come for it. (Should files still be open, it is closed at the last
// release.)
func (c *backings) forget(n *fileNode) error {
	c.mu.Lock()
	bk := n.bk
	if bk == nil || bk.opens > 0 {
		if bk != nil {
			c.removeLocked(bk)
		}
		c.mu.Unlock()
		return nil
	}
	c.removeLocked(bk)
	c.mu.Unlock()
	return c.closeBacking(bk)
}

// removeLocked detaches bk from its node and from the idle list.
func (c *backings) removeLocked(bk *backing) {
	if bk.node.bk == bk {
		bk.node.bk = nil
	}
	bk.gone = true
	if bk.idle != nil {
		c.idleBytes -= bk.size
		c.idle.Remove(bk.idle)
		bk.idle = nil
	}
}

// closeBacking unregisters bk from the kernel and closes its descriptor and
// its cache handle. After Close, the server is gone and so are its ids.
func (c *backings) closeBacking(bk *backing) error {
	var errs []error
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if bk.id != 0 && !closed {
		if en := c.kernel.UnregisterBackingFd(bk.id); en != 0 {
			errs = append(errs, fmt.Errorf("unregister backing file: %w", en))
		}
		c.unregistered.Add(1)
	}
	errs = append(errs, unix.Close(bk.fd), bk.th.Close())
	return errors.Join(errs...)
}

// close stops the sweeps and closes every idle backing; those in use are
// closed at their last release.
func (c *backings) close() error {
	c.mu.Lock()
	if !c.closed {
		close(c.stop)
	}
	c.closed = true
	var drop []*backing
	for e := c.idle.Front(); e != nil; e = e.Next() {
		drop = append(drop, e.Value.(*backing))
	}
	for _, bk := range drop {
		c.removeLocked(bk)
	}
	c.mu.Unlock()
	c.sweeping.Wait()
	var errs []error
	for _, bk := range drop {
		errs = append(errs, c.closeBacking(bk))
	}
	return errors.Join(errs...)
}

// offer notes bk's id as the passthrough answer to the open request of ctx,
// for passthroughFS.Open to send (nothing if bk has no id).
func (c *backings) offer(ctx context.Context, bk *backing) {
	fc, ok := ctx.(*fuse.Context)
	if !ok || bk.id == 0 || fc.Cancel == nil {
		return
	}
	c.mu.Lock()
	c.pending[fc.Cancel] = bk.id
	c.mu.Unlock()
}

// take returns the backing id offered for the open request of cancel.
func (c *backings) take(cancel <-chan struct{}) (int32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.pending[cancel]
	if ok {
		delete(c.pending, cancel)
	}
	return id, ok
}

// passthroughFS is the node filesystem with the opens of cached backings
// answered for passthrough: it adds the backing id that the file's Open
// offered to the reply.
type passthroughFS struct {
	fuse.RawFileSystem
	c *backings
}

// Open opens the file and, if its Open offered a backing id, has the kernel
// read that file itself.
func (p *passthroughFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := p.RawFileSystem.Open(cancel, in, out)
	id, ok := p.c.take(cancel)
	if st == fuse.OK && ok {
		out.BackingID = id
		out.OpenFlags |= fuse.FOPEN_PASSTHROUGH
		out.OpenFlags &^= fuse.FOPEN_KEEP_CACHE
	}
	return st
}

// OnForget drops the file's backing: the kernel no longer knows the inode.
func (n *fileNode) OnForget() {
	if c := n.f.backings; c != nil {
		if err := c.forget(n); err != nil {
			n.f.cfg.log.Warn("mount: closing a forgotten file", "object", n.attrs.Object.String(), "err", err)
		}
	}
}

var _ fs.NodeOnForgetter = (*fileNode)(nil)
