package mount

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sync/singleflight"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
	"github.com/cacheagent/cacheagent/tier"
)

// ErrClosed is returned for work asked of an FS after Close.
var ErrClosed = errors.New("mount: filesystem closed")

// FS is the filesystem behind a mount: its root node, the buckets' listings
// and the open files. Mount creates one; New is for callers that run the
// go-fuse server themselves. Its methods are safe for concurrent use.
type FS struct {
	// Immutable after New (passthrough: before the server starts).
	cfg         settings
	root        *rootNode
	uid, gid    uint32
	started     time.Time // directories' times
	passthrough bool      // open files offer their descriptor for passthrough
	opening     opening   // how opens are answered (settled at the first in OpenAuto)
	// backings holds the files' registered backings where the server
	// answers opens for passthrough itself (Mount); nil otherwise.
	backings *backings
	// stopReclaim unregisters backings' reclaim from the cache (nil if
	// not registered).
	stopReclaim func()
	// now, openStart, openDone and maxIdleBackings (the bound of
	// backings' idle files) are seams for tests, set before use.
	now             func() time.Time
	maxIdleBackings int
	openStart       func(o object.Object)
	openDone        func(o object.Object, errno syscall.Errno)

	stats counters
	// probes shares the existence checks of dynamic buckets, by name.
	probes singleflight.Group

	// bg counts background listings; Add only under mu while !closed.
	bg sync.WaitGroup

	// mu protects the fields below. No I/O is done while holding it.
	mu      sync.Mutex
	closed  bool
	handles map[*handle]struct{}          // open files
	cancels map[uint64]context.CancelFunc // background listings
	nextID  uint64
	warned  map[string]struct{} // bucket+"\x00"+name of objects logged as left out
	// buckets are the configured buckets or, in a dynamic mount, those
	// found so far (never removed).
	buckets map[string]*bucketView
	// missing holds the names a dynamic mount found missing at the
	// source, with when to ask again (at most maxMissing of them).
	missing map[string]time.Time
}

// counters are cumulative event counts.
type counters struct {
	opens, openErrors, reads, readBytes, listings, listErrors, skipped, probes atomic.Int64
}

// New returns the filesystem described by cfg, ready to be served from
// Root. Close it when the server has stopped.
func New(cfg Config) (*FS, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	f := &FS{
		cfg: s, buckets: make(map[string]*bucketView, len(s.buckets)),
		uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), started: time.Now(),
		passthrough: s.passthrough, now: time.Now, maxIdleBackings: maxIdleBackings,
		handles: make(map[*handle]struct{}), cancels: make(map[uint64]context.CancelFunc),
		warned: make(map[string]struct{}), missing: make(map[string]time.Time),
	}
	for b, ps := range s.buckets {
		f.buckets[b] = &bucketView{name: b, prefixes: ps}
	}
	f.opening.decide(s.open) // OpenAuto leaves it undecided
	f.root = &rootNode{f: f}
	return f, nil
}

// Root returns the root directory node, for fs.NewNodeFS.
func (f *FS) Root() fs.InodeEmbedder { return f.root }

// Stats returns the filesystem's figures (all but Path).
func (f *FS) Stats() stats.Mount {
	f.mu.Lock()
	open, buckets := int64(len(f.handles)), int64(len(f.buckets))
	f.mu.Unlock()
	m := f.opening.get()
	return stats.Mount{
		Open: m.String(), Passthrough: f.passthroughNow(m),
		Opens: f.stats.opens.Load(), OpenErrors: f.stats.openErrors.Load(), OpenFiles: open,
		Reads: f.stats.reads.Load(), ReadBytes: f.stats.readBytes.Load(),
		Listings: f.stats.listings.Load(), ListErrors: f.stats.listErrors.Load(),
		Skipped: f.stats.skipped.Load(), Probes: f.stats.probes.Load(), Buckets: buckets,
	}
}

// passthroughNow reports whether the kernel reads opened files itself
// while opens are answered as m says: where it offers passthrough, unless
// the mount skips opens (then nothing is opened to pass through).
func (f *FS) passthroughNow(m OpenMode) bool { return f.passthrough && m != OpenSkip }

// Close cancels listings in progress, waits for them and closes the cache
// handles of files the kernel never released (a server that stopped with
// files open) and of the files' idle backings. Call it once the server has
// stopped; a second Close does nothing.
func (f *FS) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	for _, cancel := range f.cancels {
		cancel()
	}
	hs := make([]*handle, 0, len(f.handles))
	for h := range f.handles {
		hs = append(hs, h)
	}
	f.mu.Unlock()
	f.bg.Wait()
	var errs []error
	if f.stopReclaim != nil {
		f.stopReclaim()
	}
	if f.backings != nil {
		// First: the server is gone, and with it the backing ids, which
		// the backings released below then do not unregister.
		errs = append(errs, f.backings.close())
	}
	for _, h := range hs {
		errs = append(errs, h.close())
	}
	return errors.Join(errs...)
}

// detach returns a context with ctx's values that ignores ctx's
// cancellation (one caller giving up must not fail a shared listing) and is
// cancelled by Close instead. Call done when finished.
func (f *FS) detach(ctx context.Context) (dctx context.Context, done func(), err error) {
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		cancel()
		return nil, nil, ErrClosed
	}
	id := f.nextID
	f.nextID++
	f.cancels[id] = cancel
	f.bg.Add(1)
	return dctx, func() {
		f.mu.Lock()
		delete(f.cancels, id)
		f.mu.Unlock()
		cancel()
		f.bg.Done()
	}, nil
}

// reject logs, once per mount, that an object of bucket is left out.
func (f *FS) reject(bucket, name, why string) {
	key := bucket + "\x00" + name
	f.mu.Lock()
	_, seen := f.warned[key]
	if !seen {
		f.warned[key] = struct{}{}
	}
	f.mu.Unlock()
	if seen {
		return
	}
	f.stats.skipped.Add(1)
	f.cfg.log.Warn("mount: object left out: its name is not a valid path",
		"object", object.Object{Bucket: bucket, Name: name}.String(), "reason", why)
}

// errno maps an error from the cache or the source to what the kernel gets.
// ctx is the request's: if it is done, the kernel interrupted the request.
func errno(ctx context.Context, err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case ctx.Err() != nil:
		return syscall.EINTR
	case errors.Is(err, object.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, object.ErrGenerationChanged):
		return syscall.ESTALE
	case errors.Is(err, tier.ErrNoSpace), errors.Is(err, syscall.ENOSPC):
		return syscall.ENOSPC
	}
	return syscall.EIO
}
