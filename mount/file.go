package mount

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// handle is one open of a file by the kernel (or, in a mount that skips opens, one
// read): the cache handle, which keeps the cached copy from being evicted,
// and our own descriptor on that copy. The kernel sends no read after the
// release, so fd stays valid for every read it answers.
type handle struct {
	f  *FS
	th *tier.Handle // nil when bk holds it
	bk *backing     // the file's shared backing, in passthrough mounts
	fd uintptr
	// off and size place the object's bytes in fd's file: off is not 0
	// for a packed object (its file, a segment, holds others after it).
	off, size int64
	closed    atomic.Bool
}

// passthroughHandle is a handle that offers its descriptor to the kernel,
// which then reads the cached file itself (FUSE passthrough).
type passthroughHandle struct{ *handle }

var (
	_ fs.FileReader          = (*handle)(nil)
	_ fs.FileReleaser        = (*handle)(nil)
	_ fs.FilePassthroughFder = (*passthroughHandle)(nil)
	_ fs.FileReader          = (*passthroughHandle)(nil)
	_ fs.FileReleaser        = (*passthroughHandle)(nil)
	_ fuse.ReadResult        = (*unopenedRead)(nil)
)

// open opens n's generation through the cache and returns the file handle
// for the kernel. In a passthrough mount the handle shares n's backing,
// whose id it offers for the reply.
func (f *FS) open(ctx context.Context, n *fileNode) (fs.FileHandle, syscall.Errno) {
	f.stats.opens.Add(1)
	if f.backings != nil {
		return f.openBacking(ctx, n)
	}
	h, en := f.openHandle(ctx, n.b, n.attrs)
	if en != 0 {
		f.stats.openErrors.Add(1)
		return nil, en
	}
	if f.passthrough && !h.th.Packed() { // a segment holds others: never the kernel's to read
		return &passthroughHandle{h}, 0
	}
	return h, 0
}

// openHandle opens generation a through the cache and the cached file.
func (f *FS) openHandle(ctx context.Context, b *bucketView, a object.Attrs) (*handle, syscall.Errno) {
	th, err := f.cfg.cache.Open(ctx, a.Object)
	if err != nil {
		return nil, f.openErrno(ctx, b, a.Object, err)
	}
	fd, err := unix.Open(th.Path(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		f.cfg.log.Warn("mount: open failed", "object", a.Object.String(),
			"err", errors.Join(fmt.Errorf("open cached file: %w", err), th.Close()))
		return nil, syscall.EIO
	}
	return f.addHandle(&handle{f: f, th: th, fd: uintptr(fd), off: th.Offset(), size: th.Size()})
}

// openBacking opens n on its shared backing and offers the backing's id
// for the reply.
func (f *FS) openBacking(ctx context.Context, n *fileNode) (fs.FileHandle, syscall.Errno) {
	bk, en := f.backings.acquire(ctx, f, n)
	if en != 0 {
		f.stats.openErrors.Add(1)
		return nil, en
	}
	h, en := f.addHandle(&handle{f: f, bk: bk, fd: uintptr(bk.fd), off: bk.off, size: bk.size})
	if en != 0 {
		f.stats.openErrors.Add(1)
		return nil, en
	}
	f.backings.offer(ctx, bk)
	return h, 0
}

// addHandle counts h among the open files, or closes it if f is closed.
func (f *FS) addHandle(h *handle) (*handle, syscall.Errno) {
	f.mu.Lock()
	closed := f.closed
	if !closed {
		f.handles[h] = struct{}{}
	}
	f.mu.Unlock()
	if closed {
		h.close()
		return nil, syscall.EIO
	}
	return h, 0
}

// object names the handle's object, for logs.
func (h *handle) object() string {
	if h.bk != nil {
		return h.bk.node.attrs.Object.String()
	}
	return h.th.Attrs().Object.String()
}

// openErrno maps a failed cache open of o to the kernel's errno. A vanished
// generation (not found, or replaced between the cache's stat and its
// download) gives ESTALE and marks the listing stale, so that the kernel's
// retry looks the name up again and finds the current generation.
func (f *FS) openErrno(ctx context.Context, b *bucketView, o object.Object, err error) syscall.Errno {
	en := errno(ctx, err)
	switch en {
	case syscall.EINTR:
	case syscall.ENOENT, syscall.ESTALE:
		b.invalidate()
		en = syscall.ESTALE
		f.cfg.log.Info("mount: listed generation is gone; listing again", "object", o.String(), "err", err)
	default:
		f.cfg.log.Warn("mount: open failed", "object", o.String(), "err", err)
	}
	return en
}

// Read answers a read from the cached file: the kernel splices the bytes
// from our descriptor.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.f.stats.reads.Add(1)
	h.f.stats.readBytes.Add(int64(len(dest)))
	return fuse.ReadResultFd(h.fd, h.off+off, h.span(off, len(dest))), 0
}

// span returns how many of the n bytes asked for at off (of the object)
// the object has: a segment goes on past a packed object's end.
func (h *handle) span(off int64, n int) int {
	return int(max(0, min(int64(n), h.size-off)))
}

// Release closes the handle when the kernel is done with the file.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	if err := h.close(); err != nil {
		h.f.cfg.log.Warn("mount: release", "object", h.object(), "err", err)
	}
	return 0
}

// close closes the descriptor and the cache handle (or drops the open of
// the shared backing), once.
func (h *handle) close() error {
	if !h.closed.CompareAndSwap(false, true) {
		return nil
	}
	h.f.mu.Lock()
	delete(h.f.handles, h)
	h.f.mu.Unlock()
	if h.bk != nil {
		return h.f.backings.release(h.bk)
	}
	return errors.Join(unix.Close(int(h.fd)), h.th.Close())
}

// readUnopened answers a read of generation a (of bucket b) that comes
// without an open file, in a mount that skips opens: it opens the cached copy for
// this read alone (fetching it first on a miss) and closes it once the
// kernel has the bytes. A generation that is gone gives ESTALE, and the
// bucket is listed again at the next lookup.
func (f *FS) readUnopened(ctx context.Context, b *bucketView, a object.Attrs, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, en := f.openHandle(ctx, b, a)
	if en != 0 {
		f.stats.openErrors.Add(1)
		return nil, en
	}
	f.stats.reads.Add(1)
	f.stats.readBytes.Add(int64(len(dest)))
	r := &unopenedRead{h: h, off: h.off + off, n: h.span(off, len(dest))}
	if r.n == 0 { // at or past the end: go-fuse calls Done only on answers with bytes
		r.Done()
		return fuse.ReadResultData(nil), 0
	}
	return r, 0
}

// unopenedRead is the answer to a read without an open file: go-fuse
// splices n bytes at off (of the file, not the object) from the handle's descriptor (or reads them, where
// it cannot splice) and then calls Done, which closes the handle.
type unopenedRead struct {
	h   *handle
	off int64
	n   int
}

// Seekable lets go-fuse splice the bytes from the cached file.
func (r *unopenedRead) Seekable() (fd uintptr, off int64, sz int) { return r.h.fd, r.off, r.n }

// Bytes reads the bytes into buf, where go-fuse cannot splice.
func (r *unopenedRead) Bytes(buf []byte) ([]byte, fuse.Status) {
	return fuse.ReadResultFd(r.h.fd, r.off, r.n).Bytes(buf)
}

// Size is the most bytes the read returns.
func (r *unopenedRead) Size() int { return r.n }

// Done closes the handle once the reply is sent.
func (r *unopenedRead) Done() {
	if err := r.h.close(); err != nil {
		r.h.f.cfg.log.Warn("mount: closing after a read", "object", r.h.object(), "err", err)
	}
}

// PassthroughFd returns the descriptor of the cached file. go-fuse calls it
// during the open; the kernel takes its own reference to the file.
func (h *passthroughHandle) PassthroughFd() (int, bool) { return int(h.fd), true }
