package mount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/stats"
)

// Mount parameters.
const (
	fsName = "cacheagent" // "Filesystem" column of df; type is fuse.cacheagent
	// maxRead is the largest read the kernel sends (when it does not read
	// the cached file itself): 1 MiB, the kernel's limit.
	maxRead = 1 << 20
	// forever stands for a negative ListTTL in the kernel's timeouts.
	forever = time.Duration(math.MaxInt64)
)

// Server is a mounted FS being served. Create it with Mount; end it with
// Unmount and Wait. Its methods are safe for concurrent use.
type Server struct {
	// Immutable after Mount.
	fs         *FS
	srv        *fuse.Server
	mountpoint string

	serving   sync.WaitGroup // the serve loop
	done      chan struct{}  // closed when the server has ended
	unmounted atomic.Bool    // set once Unmount has unmounted or detached it
}

// Mount mounts the filesystem described by cfg at mountpoint and serves it
// until Unmount (or until someone else unmounts it). ctx bounds only the
// mounting itself. A stale mount at mountpoint (its server died) is cleared
// first; a missing mountpoint is created.
func Mount(ctx context.Context, mountpoint string, cfg Config) (*Server, error) {
	f, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return mountFS(ctx, mountpoint, f)
}

// mountFS mounts f (already configured, seams included) at mountpoint.
func mountFS(ctx context.Context, mountpoint string, f *FS) (*Server, error) {
	mp, err := prepareMountpoint(ctx, mountpoint, f.cfg.log)
	if err != nil {
		return nil, err
	}
	opts := f.options()
	bks := newBackings(nil, f.maxIdleBackings)
	raw := &passthroughFS{RawFileSystem: fs.NewNodeFS(f.root, opts), c: bks}
	srv, err := fuse.NewServer(raw, mp, &opts.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("mount: mount %s: %w", mp, err)
	}
	// Decided before the first open: the serve loop starts below.
	f.passthrough = f.cfg.passthrough && canPassthrough(srv)
	if f.passthrough {
		bks.kernel = srv
		bks.startSweeps(sweepInterval, f.cfg.log)
		f.backings = bks
		if r, ok := f.cfg.cache.(reclaimingCache); ok {
			// Idle files hold at most a share of the cache's budget,
			// and give their copies back when the cache is full.
			bks.budget = r.MaxBytes
			f.stopReclaim = r.OnNoSpace(func() {
				if err := bks.reclaim(); err != nil {
					f.cfg.log.Warn("mount: closing idle files for room in the cache", "err", err)
				}
			})
		}
	}
	s := &Server{fs: f, srv: srv, mountpoint: mp, done: make(chan struct{})}
	s.serving.Go(func() {
		srv.Serve()
		if err := f.Close(); err != nil {
			f.cfg.log.Warn("mount: closing files left open", "mountpoint", mp, "err", err)
		}
		close(s.done)
	})
	if err := srv.WaitMount(); err != nil {
		err = errors.Join(err, s.Unmount())
		s.Wait()
		return nil, fmt.Errorf("mount: mount %s: %w", mp, err)
	}
	f.cfg.log.Info("mount: mounted", "mountpoint", mp, "passthrough", f.passthrough, "open", f.cfg.open.String())
	return s, nil
}

// options returns the go-fuse options for f.
func (f *FS) options() *fs.Options {
	ttl := f.cfg.ttl
	if ttl < 0 {
		ttl = forever
	}
	// In a dynamic mount the kernel must ask again for a missing bucket's
	// name once it is no longer believed missing. go-fuse has one negative
	// timeout for every name, so names missing from a bucket's listing are
	// asked for again as often (and answered from memory).
	negTTL := ttl
	if f.cfg.dynamic {
		negTTL = min(negTTL, f.cfg.missingTTL())
	}
	// Attributes never change: a file is one generation (a new one is a new
	// inode, found by a new lookup once the entry expires), and directories
	// have fixed ones. Only names (entries) expire, after the listing TTL.
	attrTTL := forever
	logger := slog.NewLogLogger(f.cfg.log.Handler(), slog.LevelWarn)
	return &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:     fsName,
			Name:       fsName,
			AllowOther: f.cfg.allowOther,
			// default_permissions: the kernel checks the modes itself.
			Options:          []string{"ro", "default_permissions"},
			DirectMount:      true, // root mounts without fusermount3
			DirectMountFlags: unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV,
			MaxWrite:         maxRead,
			// Files never change within a generation: the kernel must not
			// drop their pages when it refreshes attributes.
			ExplicitDataCacheControl: true,
			Logger:                   logger,
		},
		EntryTimeout:    &ttl,
		AttrTimeout:     &attrTTL,
		NegativeTimeout: &negTTL,
		RootStableAttr:  &fs.StableAttr{Ino: rootIno},
		UID:             f.uid,
		GID:             f.gid,
		Logger:          logger,
	}
}

// canPassthrough reports whether the kernel lets srv hand open files to it
// (FUSE passthrough): the kernel offered it at INIT and registering a
// backing file works, which needs CAP_SYS_ADMIN.
func canPassthrough(srv *fuse.Server) bool {
	if srv.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH == 0 {
		return false
	}
	fd, err := unix.MemfdCreate("cacheagent-passthrough-probe", unix.MFD_CLOEXEC)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	id, errno := srv.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)})
	if errno != 0 {
		return false
	}
	srv.UnregisterBackingFd(id)
	return true
}

// Mountpoint returns the absolute path the server is mounted at.
func (s *Server) Mountpoint() string { return s.mountpoint }

// Passthrough reports whether the kernel reads opened files' cached copies
// itself (FUSE passthrough) rather than asking this process: where the
// kernel offers it, unless the mount skips opens (OpenSkip, or OpenAuto
// once its first open chose to), which leaves nothing to pass through.
func (s *Server) Passthrough() bool { return s.fs.passthroughNow(s.fs.opening.get()) }

// Stats returns the mount's figures.
func (s *Server) Stats() stats.Mount {
	st := s.fs.Stats()
	st.Path = s.mountpoint
	return st
}

// Done returns a channel that is closed when the server has ended.
func (s *Server) Done() <-chan struct{} { return s.done }

// Wait blocks until the server has ended: unmounted, and (after a lazy
// unmount) every file closed.
func (s *Server) Wait() { s.serving.Wait() }

// Unmount unmounts the filesystem. If it is busy (files are open), it is
// detached instead: the mountpoint is free at once, nothing new can be
// opened, and files already open are served until they are closed, when
// Wait returns. Unmounting an unmounted server does nothing (and never
// touches a later mount at the same place).
func (s *Server) Unmount() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	if s.unmounted.Load() {
		return nil
	}
	err := unmount(context.Background(), s.mountpoint, false)
	switch {
	case err == nil, errors.Is(err, syscall.EINVAL): // EINVAL: not mounted (any more)
		s.unmounted.Store(true)
		return nil
	case !errors.Is(err, syscall.EBUSY) && !errors.Is(err, errHelper):
		return fmt.Errorf("mount: unmount %s: %w", s.mountpoint, err)
	}
	if err := unmount(context.Background(), s.mountpoint, true); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("mount: unmount %s lazily: %w", s.mountpoint, err)
	}
	s.unmounted.Store(true)
	s.fs.cfg.log.Warn("mount: files still open; mount detached, serving them until they are closed",
		"mountpoint", s.mountpoint, "open_files", s.fs.Stats().OpenFiles)
	return nil
}
