package mount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/tier"
)

// handle is one open of a file by the kernel: the cache handle, which keeps
// the cached copy from being evicted, and our own descriptor on that copy.
// The kernel sends no read after the release, so fd stays valid for every
// read it answers.
type handle struct {
	f      *FS
	th     *tier.Handle
	file   *os.File
	fd     uintptr
	closed atomic.Bool
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
)

// open opens generation a through the cache and returns the file handle for
// the kernel. b is a's bucket.
func (f *FS) open(ctx context.Context, b *bucketView, a fetch.Attrs) (fs.FileHandle, syscall.Errno) {
	f.stats.opens.Add(1)
	th, err := f.cfg.cache.Open(ctx, a.Object)
	if err != nil {
		f.stats.openErrors.Add(1)
		return nil, f.openErrno(ctx, b, a.Object, err)
	}
	file, err := os.Open(th.Path())
	if err != nil {
		f.stats.openErrors.Add(1)
		f.cfg.log.Warn("mount: open failed", "object", a.Object.String(),
			"err", errors.Join(fmt.Errorf("open cached file: %w", err), th.Close()))
		return nil, syscall.EIO
	}
	h := &handle{f: f, th: th, file: file, fd: file.Fd()}
	f.mu.Lock()
	closed := f.closed
	if !closed {
		f.handles[h] = struct{}{}
	}
	f.mu.Unlock()
	if closed {
		f.stats.openErrors.Add(1)
		h.close()
		return nil, syscall.EIO
	}
	if f.passthrough {
		return &passthroughHandle{h}, 0
	}
	return h, 0
}

// openErrno maps a failed cache open of o to the kernel's errno. A vanished
// generation gives ESTALE and marks the listing stale, so that the kernel's
// retry looks the name up again and finds the current generation.
func (f *FS) openErrno(ctx context.Context, b *bucketView, o fetch.Object, err error) syscall.Errno {
	en := errno(ctx, err)
	switch en {
	case syscall.EINTR:
	case syscall.ENOENT:
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
	return fuse.ReadResultFd(h.fd, off, len(dest)), 0
}

// Release closes the handle when the kernel is done with the file.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	if err := h.close(); err != nil {
		h.f.cfg.log.Warn("mount: release", "object", h.th.Attrs().Object.String(), "err", err)
	}
	return 0
}

// close closes the descriptor and the cache handle, once.
func (h *handle) close() error {
	if !h.closed.CompareAndSwap(false, true) {
		return nil
	}
	h.f.mu.Lock()
	delete(h.f.handles, h)
	h.f.mu.Unlock()
	return errors.Join(h.file.Close(), h.th.Close())
}

// PassthroughFd returns the descriptor of the cached file. go-fuse calls it
// during the open; the kernel takes its own reference to the file.
func (h *passthroughHandle) PassthroughFd() (int, bool) { return int(h.fd), true }
