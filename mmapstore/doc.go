// Package mmapstore lends zero-copy, read-only views of cached objects: a
// Store maps each object's local file once (PROT_READ, MAP_SHARED) and hands
// out leases on that mapping. Parsed arrays (.npy) and tensors
// (.safetensors) alias the mapping, so a training loop reads rows straight
// from the page cache without copying.
//
// # Usage
//
//	s := mmapstore.New(cache.Opener(), mmapstore.Config{})
//	defer s.Close()
//	l, err := s.Acquire(ctx, object.Object{Bucket: "b", Name: "train/x-0001.npy"})
//	…
//	defer l.Release()
//	a, err := l.Array()   // parsed once per mapping, then shared
//	row, err := a.Row(i)  // aliases the mapping: no copy, no allocation
//
// or, scoped: s.View(ctx, o, func(b []byte) error { … }).
//
// # Lifetimes
//
// Memory is lent, not given. The bytes of a Lease, and every Array, row or
// typed view derived from them, are valid until that lease is released;
// copy what must outlive it. They must never be written to: the mapping is
// read-only, and a write is a fatal fault (SIGSEGV), not a recoverable
// panic.
//
// A mapping lives while leases use it and, once idle, while it is still the
// Opener's current copy, so a warm Acquire is a map lookup and a reference
// count: no system call, no allocation. A mapping is unmapped, and its File
// closed, when its last lease is released and the mapping is no longer
// wanted: its File went stale (the cache replaced, evicted or promoted the
// copy), a newer copy was mapped, the idle list overflowed
// (Config.MaxIdleMappings, Config.MaxIdleBytes), Trim was called, or the
// Store was closed. Idle mappings are kept in least-recently-released order.
//
// # Pinning
//
// A mapping holds its File open for its whole life. With a tier.Cache's Opener that is
// a tier.Handle, so a leased object is never evicted from under a reader.
// The cost is that idle mappings also block eviction: bound them with
// Config.MaxIdleBytes, or call Trim when the cache needs room. If a file is
// removed behind the cache's back (rm), a mapping keeps the pages it maps
// (the inode lives until unmapped) and readers are unaffected; once the
// cache notices, the next Acquire maps the copy it fetches again. Truncating
// a mapped file, which the cache never does, would make reads past the new
// end fault (SIGBUS).
//
// # Freshness
//
// Acquire asks the Opener again when the mapping's File reports Stale (one
// atomic load, checked on every Acquire) and at most once per
// Config.Revalidate interval otherwise. With a tier.Cache's Opener that Open is when
// the cache may check the source for a newer generation (its own interval
// decides), and it is also how the cache learns the object is still in use
// (its LRU order, promotion to the shm tier). Only one Acquire per mapping
// asks at a time; the others keep using the mapping meanwhile. Readers move
// to a new copy on their next Acquire; existing leases keep the copy they
// have.
//
// # Concurrency
//
// A Store is safe for concurrent use. Store.mu guards the index of
// mappings, their reference counts and the idle list; it is the only lock
// in the package and is never held during I/O (Open, mmap, munmap, Close).
// Release may close a File, which for a daemon-backed Opener is a round
// trip to the daemon. A Lease may be used from any goroutine; releasing it
// concurrently with reads of its bytes is the caller's bug.
//
// # Errors
//
// Conditions callers test: ErrClosed, ErrReleased and ErrFormat, plus
// whatever the Opener returns (object.ErrNotFound, tier.ErrNoSpace, …) and
// the parsers' sentinels (npy.ErrHeader, safetensors.ErrOffsets, …), all
// wrapped with the operation and object. Test them with errors.Is.
package mmapstore

import "errors"

// Sentinel errors, wrapped with details. Test them with errors.Is.
var (
	// ErrClosed means the Store has been closed.
	ErrClosed = errors.New("mmapstore: store closed")
	// ErrReleased means a Lease was used after its release, or released
	// twice, or is the zero Lease.
	ErrReleased = errors.New("mmapstore: lease released")
	// ErrFormat means an object is not in the format asked for (Array on a
	// file that is neither named .npy nor starts with the npy magic).
	ErrFormat = errors.New("mmapstore: unrecognised file format")
)
