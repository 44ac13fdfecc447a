// Package mount serves the cache as a read-only FUSE filesystem, so that
// programs that only know files (PyTorch datasets, numpy.load with
// mmap_mode='r', shell tools) read cached GCS objects at local speed.
//
// # Usage
//
//	srv, err := mount.Mount(ctx, "/mnt/gcs", mount.Config{
//		Cache:  cache, // *tier.Cache
//		Source: src,   // *fetch.GCS (for listings)
//		Roots:  []mount.Root{{Bucket: "b", Prefix: "train/"}},
//	})
//	…
//	<-ctx.Done()
//	err = srv.Unmount()
//	srv.Wait()
//
// # Layout
//
// The mount shows <mountpoint>/<bucket>/<object name> for every object
// under the configured roots (a bucket and a name prefix each; a bucket may
// have several). Directories are synthesized from '/'-delimited names. An
// object whose name ends in '/' (a "folder" placeholder, as the Cloud
// console creates) only makes its directory appear. Names that cannot be
// paths are left out, each logged once per mount: an empty segment ("a//b",
// a leading '/'), a "." or ".." segment, a NUL byte, or a segment longer
// than 255 bytes. If an object's name is also a directory (objects "a" and
// "a/b"), the directory wins and the object "a" is left out the same way.
//
// # Dynamic buckets
//
// A mount configured with no roots is dynamic, as gcsfuse's is: it shows
// any bucket, in full, from the first lookup of its name. That lookup first
// checks the name against GCS's bucket naming rules (3 to 222 bytes of
// lower-case letters, digits, '-', '_' and '.', starting and ending with a
// letter or digit), so that "..", names with NUL or '/', over-long names and
// the names tools probe for (".Trash-0", "HEAD") are ENOENT without a
// request; then it asks the source for the bucket's first object (one List
// request; concurrent lookups of a name share it). A bucket that does not
// exist is ENOENT, and is believed missing for the ListTTL (DefaultListTTL
// if that is forever; at most 1024 names are remembered); other failures
// give EIO and are not remembered. A bucket found is then served exactly
// like a configured root with an empty prefix, and stays for the life of
// the mount. Listing the mount's root shows the buckets found so far: a
// dynamic mount cannot list all buckets. A mount with roots is never
// dynamic: other names at its root are ENOENT.
//
// # Listings
//
// Each bucket is listed (flat, by prefix, through Config.Source) on first
// use and again when its listing is older than Config.ListTTL at the next
// lookup or readdir; the kernel caches names for the same TTL, so a change
// in the bucket shows within about twice the TTL (an overwritten object
// that was looked up already: within the TTL, as its listing is older than
// the kernel's entry). A
// negative TTL lists once and never again. Concurrent users of an expired
// listing share one listing run, which continues if the caller that started
// it is interrupted. If listing fails, the previous listing is served (and
// listing is retried after a few seconds); with no previous listing, the
// lookup fails with EIO. A listing is held in memory: about 110 bytes per
// object plus its name.
//
// # Files
//
// A file is one generation of an object: size and mtime are the object's
// size and update time, mode 0444 (directories 0555), owned by the
// mounting process's uid and gid. Its inode number is a hash of (bucket,
// name, generation), stable across mounts; a new generation is a new inode.
//
// Open fetches exactly that generation through the cache (Config.Cache): a
// demand fetch on a miss, shared with any other open or prefetch of the same
// object. If the kernel interrupts the open (the caller got a signal), the
// open returns EINTR at once and the download goes on for the others. If
// the generation is gone from GCS (or is replaced while the cache fetches
// it), Open returns ESTALE and marks the bucket's listing stale; the kernel
// then looks the name up again, in a listing begun after the open failed
// (not one already under way), and opens the current generation.
//
// The open file holds a cache handle, which keeps the cached copy readable
// whatever the cache does meanwhile, until the kernel releases it. Reads are served by the kernel straight from
// the cached file with FUSE passthrough when the kernel offers it and the
// process may use it (Linux 6.9+, CAP_SYS_ADMIN; Server.Passthrough reports
// it); otherwise this process answers each read by splicing from the cached
// file's descriptor (reads of up to 1 MiB), and the kernel keeps the pages
// cached across opens (FOPEN_KEEP_CACHE; objects never change within a
// generation). Closing a file costs no round trip (FOPEN_NOFLUSH).
//
// With passthrough, a file's cached copy is opened and registered with the
// kernel (a backing file) at its first open, and every later open of the
// same inode reuses it: the reply only names the registered backing, with no
// cache lookup, no open(2) and no registration (the cache is told of the
// open, for its recency of use and its plans). The backing stays while the
// file is open and, once closed, among the most recently used idle ones (at
// most 4096 files and the lesser of 256 MiB and an eighth of the cache's
// budget, none over 16 MiB); it is closed when the kernel forgets the
// inode, when it falls out of that bound, and (within 5 seconds, or at the
// next open) when its copy leaves the cache. An idle backing holds a cache
// handle: the cache's eviction passes its copy over, so the bound is what
// the mount may keep from eviction beyond the files open; and when a fill
// finds no room because copies in use fill the cache's budget, the mount
// closes all its idle backings (tier.Cache.OnNoSpace) and the fill tries
// again. A dataset with many more files than the bound, read once per
// epoch, reopens every file (no gain, and no loss). An open of an inode
// whose backing is live serves the backing's generation even if GCS has
// moved on since (the inode names that generation; a new generation is a
// new inode, which the kernel reaches once the name's entry expires); only
// an open that needs the cache again checks for ESTALE.
//
// # Kernel caching
//
// The kernel caches names (entries) for the ListTTL, and failed lookups
// for as long (in a dynamic mount, no longer than a missing bucket is
// believed missing: with a ListTTL of forever, names missing from a
// listing are then asked for again every DefaultListTTL, and answered from
// memory). Attributes it caches for ever: a file's never change (a new
// generation is a new inode, reached by a new lookup once the name's entry
// expires) and directories' are fixed. File pages stay cached across opens
// (FOPEN_KEEP_CACHE). What is left per open of a file whose name is cached
// is the open itself: a round trip to this process (and the release after
// close, which the caller does not wait for). On a busy machine that round
// trip costs more than opening and reading a 100 KiB file from the page
// cache; see docs/benchmarks.md.
//
// # Opening files
//
// Config.Open says whether the kernel asks this process to open each file.
// With OpenAsk it does, as described under Files: the open holds the cached
// copy, and passthrough serves the reads. With OpenSkip the first open of a
// file is answered ENOSYS, which the kernel (3.14+) remembers for the whole
// mount: it then opens and closes files without asking (and, as Flush is
// answered ENOSYS too, without a flush), keeps their pages cached, and asks
// this process only for the pages it lacks, with READ requests that carry
// no file handle. Each such read opens the cached copy through the cache (a
// demand fetch on a miss, as an open would), is spliced from it, and closes
// it once the reply is sent. A warm file then costs no request at all. The
// price: no passthrough (it needs an open), a cache handle only while a
// read is being answered (the cache may evict a file between two reads; the
// next read fetches it again), the data of files read through the mount
// held twice in the page cache (the mount's pages and the cached file's),
// and no ESTALE retry: if a generation is replaced after its name was
// looked up, reads that miss the page cache fail with ESTALE until the
// name's entry expires (at most the ListTTL), when the kernel looks it up
// again.
//
// The two cannot be mixed: the kernel asks for every open of a mount or
// for none. OpenAuto, the default, lets the first open of a file decide,
// once, from the listing of that file's bucket (under the mount's roots):
// OpenSkip if files of at most SmallFileSize (1 MiB, one read request) hold
// at least SmallFileShare (90 %) of the listed bytes, a dataset of many
// small files (images, clips, records) where the request per open would
// cost more than reading the file; otherwise OpenAsk, which keeps
// passthrough for large files. The decision is logged and reported by
// Server.Opening. In a dynamic mount it is taken from the first bucket a
// file is opened in; a mount serving both kinds of dataset should set the
// mode it wants.
//
// # Read-only
//
// The filesystem is mounted read-only ("ro"), and every operation that
// would change it (write, create, mkdir, mknod, link, symlink, unlink,
// rmdir, rename, setattr, setxattr, removexattr, fallocate) also returns
// EROFS from this package, should the kernel ask. statfs reports no space
// and a 255-byte name limit.
//
// # Lifecycle
//
// Mount clears a stale mount left at the mountpoint by a crashed server
// (statfs fails with ENOTCONN) with a lazy unmount, creates the mountpoint if
// it is missing and refuses a mountpoint that is already a live FUSE mount.
// Server.Unmount unmounts; if files are still open it detaches the mount
// lazily instead: the mountpoint is free at once, and the open files keep
// being served until they are closed, when Wait returns. The server also
// ends when someone else unmounts it. When it ends, listings in progress
// are cancelled and cache handles left open are closed.
//
// # Concurrency
//
// Every method of FS and Server is safe for concurrent use. FS.mu guards the
// open handles, background listings and (dynamic mounts) the buckets found
// and found missing, bucketView.mu a bucket's current listing, backings.mu
// the files' backings; none is held during I/O, and no two are held
// together.
//
// # Deadlocks
//
// The process that serves the mount must not mmap files on it, nor read it
// from a thread the server needs (go-fuse's documentation explains why);
// the daemon never touches its own mount. Tests read through the mount from
// goroutines, and mmap it only from subprocesses.
//
// # Errors
//
// Errors returned to the kernel are mapped here with errors.Is: an
// interrupted request gives EINTR, a vanished generation ESTALE, a missing
// bucket ENOENT (a bucket name that cannot exist too, without a request), a full cache ENOSPC, anything else EIO (and is logged).
package mount
