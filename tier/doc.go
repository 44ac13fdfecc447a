// Package tier is the disk tier of the cache: whole objects stored as files
// on local storage (NVMe), indexed in badger, kept within a byte budget by
// LRU eviction.
//
// # Usage
//
//	c, err := tier.Open(ctx, tier.Config{Dir: dir, Source: src, Downloader: dl})
//	…
//	defer c.Close()
//	h, err := c.Open(ctx, fetch.Object{Bucket: "b", Name: "train/shard-0001.npy"})
//	…
//	defer h.Close()
//	// h is an io.ReaderAt; h.Path() is the file, for mmap or FUSE passthrough.
//
// # Layout
//
// The cache directory holds:
//
//	LOCK            flock(LOCK_EX) of the owning process, which writes its pid here
//	index/          badger database (see Index format)
//	data/tmp/       files being filled (<random>.tmp); removed at start-up
//	data/xx/<hash>  one file per cached object generation
//
// <hash> is the first 128 bits of SHA-256 over bucket, NUL, name and the
// generation as 8 big-endian bytes, in lower-case hex; xx is its first two
// digits. Object names never reach the filesystem, so hostile names ("..",
// newlines, 1024-byte names) are harmless and nothing is written outside the
// directory.
//
// A fill creates data/tmp/<random>.tmp, allocates it (fallocate), downloads
// into it, fsyncs it, renames it to data/xx/<hash>, fsyncs data/xx and only
// then writes the index record. Nothing half-written is ever served or
// indexed. At Open the index and the files are reconciled: temp files and
// files without a record (orphans) are removed; records whose file is
// missing or has the wrong size are dropped; the rest is adopted without
// downloading anything again.
//
// # Index format
//
// Format version 1. The key "\x00format" holds the version as a uvarint;
// Open stamps a new index and refuses any other version with ErrFormat.
// Every other key is bucket + "\x00" + name (buckets are non-empty and
// contain no NUL, so entry keys never start with NUL); one generation per
// name is cached. The value is, in order:
//
//	flags      1 byte: bit 0 = has CRC32C, bit 1 = pinned
//	generation varint
//	size       uvarint, bytes
//	blocks     uvarint, bytes occupied on disk (st_blocks*512)
//	crc32c     4 bytes little-endian, present only if bit 0 is set
//	updated    varint, unix ns when the generation was written (0 = unknown)
//	checked    varint, unix ns when the source last confirmed the generation
//	access     varint, unix ns of the last use
//
// Index writes are not synced: data files are durable before their record is
// written, and a record lost in a crash only leaves an orphan that the next
// Open removes. Last-access times are kept in memory and written every 15
// seconds and at Close, never on each hit.
//
// # Space
//
// The budget (Config.MaxBytes) counts st_blocks*512 of cached files. A fill
// first reserves the object's size rounded up to the filesystem block size,
// evicting least recently used entries that are neither pinned nor in use
// (open handles); reservations of concurrent fills count, so usage never
// exceeds the budget. If only other fills' reservations stand in the way, a
// fill waits for one of them to end; if pinned and in-use entries leave no
// room it fails with ErrNoSpace, saying what holds the space. Independently
// of the budget, a fill leaves 1% of the filesystem (1 to 256 MiB) free for
// the index; if the filesystem is full (ENOSPC from the space check,
// fallocate, a write or fsync) it evicts least recently used entries and
// tries once more, then fails with an error matching both ErrNoSpace and
// syscall.ENOSPC. The temp file is always removed.
//
// # Freshness
//
// A cached generation is served without asking the source until it was last
// confirmed longer ago than Config.Revalidate; then Open stats the object. A
// newer generation is downloaded and replaces the old one, whose file is
// deleted once no handle uses it; a deleted object is dropped. Concurrent
// fills of one generation share a single download (singleflight keyed by the
// file hash); each runs on a context detached from its callers, so one caller
// giving up does not fail the others, and a joining Demand raises the
// download's priority.
//
// # Concurrency
//
// A Cache and its Handles are safe for concurrent use. Cache.mu guards the
// in-memory state (entries, LRU, accounting) and is never held during I/O.
// Cache.idxMu serialises index writes with the memory changes they mirror
// (lock order: idxMu before mu). Files are deleted outside both. Every
// goroutine the cache starts (the access flusher, shared fills) is waited
// for by Close.
//
// # Errors
//
// Conditions callers test: ErrLocked (with *LockedError naming the owner's
// pid), ErrNoSpace, ErrClosed, ErrFormat, and fetch.ErrNotFound from Open.
package tier
