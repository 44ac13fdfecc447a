// Package tier is the cache's storage: whole objects stored as files in up to
// two tiers, indexed in badger, each kept within a byte budget by LRU
// eviction. The disk tier (local NVMe) holds every cached object; the
// optional shm tier (a tmpfs, normally /dev/shm/cacheagent) holds copies of
// the objects opened most, so that readers map them from memory.
//
// # Usage
//
//	c, err := tier.Open(ctx, tier.Config{Dir: dir, ShmDir: "/dev/shm/cacheagent",
//		Source: src, Downloader: dl})
//	…
//	defer c.Close()
//	h, err := c.Open(ctx, object.Object{Bucket: "b", Name: "train/shard-0001.npy"})
//	…
//	defer h.Close()
//	// h is an io.ReaderAt; h.Path() is the file (in the shm tier when
//	// h.Tier() == tier.Shm), for mmap or FUSE passthrough.
//
// # Tiers
//
// The base tier holds every cached object: Config.Dir (disk), or
// Config.ShmDir when Dir is "" (shm-only mode, for machines without local
// disks: the index then lives in the tmpfs too, and a shm-only cache does
// not survive a reboot). With both set, ShmDir is the shm (hot) tier above
// the disk tier: it holds copies of a subset of the disk tier's objects
// (inclusive: an object leaves the shm tier when it leaves the disk tier),
// within its own budget (Config.ShmMaxBytes, by default a quarter of the
// tmpfs, which is memory shared with the training processes).
//
// An object is promoted (copied from disk to shm) when it has been opened
// Config.PromoteHits times (default 2) within Config.PromoteWindow (default
// 10 minutes, counted from the first Open after the previous window
// ended), or when asked: Promote, and PinHot, which also keeps it there. An
// Open never waits for a promotion: it queues it for the promoter, one
// goroutine owned by the Cache that copies one object at a time (a bounded
// queue; when full, later Opens queue again). Promote copies synchronously.
// A copy goes to ShmDir/data/tmp, in the kernel (copy_file_range, else
// sendfile), after a free-space check and fallocate; then it is renamed
// into ShmDir/data/xx/<hash>. A promotion that does not fit (budget held by
// pinned or in-use copies, or the tmpfs itself full: ENOSPC) is skipped,
// leaves no temp file, and the object is served from disk.
//
// Open serves the shm copy when there is one (Handle.Tier and Entry.Tier
// say Shm). Publishing a shm copy makes the handles on the disk copy stale
// (Handle.Stale), so holders that cache handles, such as mmapstore, re-open
// and re-map onto shm. The shm tier has its own LRU: to make room a
// promotion demotes (drops) the least recently used shm copies that are
// neither pinned hot nor in use; the disk copies stay. Demote drops shm
// copies explicitly.
//
// # Layout
//
// The disk tier's directory (or the shm directory of a shm-only cache)
// holds:
//
//	LOCK            flock(LOCK_EX) of the owning process, which writes its pid here
//	index/          badger database (see Index format)
//	data/tmp/       files being filled (<random>.tmp); removed at start-up
//	data/xx/<hash>  one file per cached object generation
//
// The shm tier's directory holds LOCK and data/ alike, without an index:
// data/xx/<hash> is the shm copy of the disk file of the same name.
//
// <hash> is the first 128 bits of SHA-256 over bucket, NUL, name and the
// generation as 8 big-endian bytes, in lower-case hex; xx is its first two
// digits. Object names never reach the filesystem, so hostile names ("..",
// newlines, 1024-byte names) are harmless and nothing is written outside the
// directories. The two directories must not overlap.
//
// A fill creates data/tmp/<random>.tmp, allocates it (fallocate), downloads
// into it, fsyncs it, renames it to data/xx/<hash>, fsyncs data/xx and only
// then writes the index record. Nothing half-written is ever served or
// indexed. At Open the index and the files are reconciled: temp files and
// files without a record (orphans) are removed; records whose file is
// missing or has the wrong size are dropped; the rest is adopted without
// downloading anything again. Then the shm tier: its files are adopted if
// their record has the in-shm flag and their size matches; every other
// file there is removed, and records whose shm copy is missing lose the
// flag (after a reboot, all of them). Hot-pinned objects are promoted again
// in the background.
//
// # Index format
//
// Format version 2. The key "\x00format" holds the version as a uvarint;
// Open stamps a new index, migrates a version 1 index (whose records are
// valid version 2 records: it only restamps the version) and refuses any
// other version with ErrFormat. Every other key is bucket + "\x00" + name
// (buckets are non-empty and contain no NUL, so entry keys never start
// with NUL); one generation per name is cached. The value is, in order:
//
//	flags      1 byte: bit 0 = has CRC32C, bit 1 = pinned,
//	           bit 2 = has a shm copy, bit 3 = pinned hot (requires bit 1);
//	           bits 2 and 3 are new in version 2; other bits are invalid
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
// Open removes. Last-access times and the shm flag are kept in memory and
// written every 15 seconds and at Close, never on each hit: a flag that lags
// is harmless, as reconcile checks it against the shm files.
//
// # Space
//
// Each tier's budget counts st_blocks*512 of its files. A fill first
// reserves the object's size rounded up to the filesystem block size,
// evicting least recently used entries that are neither pinned nor in use
// (open handles on either copy); reservations of concurrent fills count, so
// usage never exceeds the budget. If only other fills' reservations stand in
// the way, a fill waits for one of them to end; if pinned and in-use entries
// leave no room it fails with ErrNoSpace, saying what holds the space.
// Independently of the budget, a fill leaves 1% of the filesystem (1 to 256
// MiB) free for the index; if the filesystem is full (ENOSPC from the space
// check, fallocate, a write or fsync) it evicts least recently used entries
// and tries once more, then fails with an error matching both ErrNoSpace
// and syscall.ENOSPC. The temp file is always removed. Promotions reserve
// shm space the same way, demoting instead of evicting, but never wait.
//
// # Doomed copies
//
// A copy that leaves the cache while handles use it (Evict, Demote, a newer
// generation, a damaged file) stays on disk until its last handle closes,
// then is deleted; each tier's PendingBytes (see Stats) counts that space.
// Its handles become stale. Evicted, demoted and damaged copies are doomed:
// no new handle is given on them, even for their exact generation; the next
// Open fetches (or promotes) the object again, and the fresh copy is renamed
// over the doomed one's path, which its last Close then leaves alone. Evict
// and Demote skip pinned (pinned hot) objects: Unpin them first.
//
// # Watching
//
// While the cache is open, fsnotify watches the data subdirectories of both
// tiers. An event is only a cue: the path is compared with the live copy it
// should hold (inode, size and mtime as published), so the cache's own
// renames and deletions, and events that arrive after the path was
// republished, drop nothing. A copy whose file was deleted, replaced,
// truncated or written to behind the cache's back (someone clears
// /dev/shm, or rm's a data file) is dropped at once and doomed: a shm copy
// is demoted (the object is served from disk, and promoted again by later
// Opens), a disk copy takes its entry with it (fetched again on next use).
// A removed watched directory is recreated; a watch error or a queue
// overflow triggers a rescan of every live copy. Open also checks the file
// it opens with one fstat (same inode, size and mtime) before serving it,
// so a race with the watcher never serves a short or foreign file. If the
// kernel refuses the watches, the cache runs unwatched, with a warning.
//
// # Verification
//
// The watcher and Open compare only inode, size and mtime, so a byte that
// changes under them (bit rot, a write through a hard link) would be served.
// Verify reads every copy of the objects it selects, shm and disk, with no
// lock held and at a bounded rate, and compares its CRC32C with the one the
// index recorded from the source; a copy that differs or cannot be read is
// dropped as a damaged one is (doomed, demoted or refetched) and counted in
// its tier's Corrupt figure, one whose file changed is dropped as damaged.
// A fill whose source gave no CRC32C (HasCRC32C false: a Dir source, a
// fleet's chunk copy) records the CRC32C of the bytes as filled, read back
// once after the fsync, so Verify catches later damage there too; copies
// indexed without one (by older versions) are checked by size only and
// counted Unverifiable. Disk pages read only for the check
// are dropped from the page cache after it.
//
// # Plans
//
// Loaders may announce access plans: Plan(ctx, id, objects) says a reader
// will open those objects in that order, AdvancePlan reports its progress
// and DropPlan forgets it. While any plan is announced, eviction in both
// tiers is clairvoyant (package plan): among the copies that are neither
// pinned nor in use, first those no plan will use again, least recently
// used first (so a shard's shm copy goes first once its last use in an
// epoch is past), then the planned ones whose next use is farthest. A
// planner goroutine prefetches, at object.Plan priority, the objects the
// plans need next, as many bytes ahead of the readers as the measured fetch
// and consumption rates call for (at most half the budget), never evicting
// an object needed sooner than the one it brings in; it queues the next
// few cached objects of each plan for promotion to the shm tier, so they
// are copied just before use. The planner learns the attributes of the
// objects it fetches from listings of their directories (one per
// directory of at least a few planned objects, redone after a minute)
// rather than from a metadata request per object; objects the listing
// missed are stat'ed. PromoteObjects promotes exact objects synchronously.
// PlanStats reports the planner's figures.
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
// download's priority. Concurrent promotions of one object share one copy
// likewise.
//
// # Concurrency
//
// A Cache and its Handles are safe for concurrent use. Cache.mu guards the
// in-memory state (entries, LRUs, accounting of both tiers) and is never held
// during I/O. Cache.idxMu serialises index writes with the memory changes
// they mirror (lock order: idxMu before mu). Files are deleted outside both.
// Every goroutine the cache starts (the access flusher, the promoter, the
// watcher, the planner, shared fills and promotions) is waited for by
// Close, which cancels fills and promotions in progress first.
//
// # Errors
//
// Conditions callers test: ErrLocked (with *LockedError naming the owner's
// pid), ErrNoSpace, ErrClosed, ErrFormat, ErrNoShm, ErrNoPlan, and
// object.ErrNotFound from Open.
package tier
