// Package checkpoint is the write half of a training VM's storage: a
// checkpoint saved through the agent costs a local write, is uploaded to
// GCS behind training and committed atomically, and is restored through
// the cache.
//
// # Saving
//
// A checkpoint is a directory of files written by any framework with plain
// file I/O (torch.save, DCP's FileSystemWriter, safetensors, temp-then-
// rename writers): a real local directory, so fsync and rename just work.
// Store.Save hands it to the agent: it checks the prefix (a committed
// checkpoint there is ErrCommitted) and claims it in the bucket (an empty
// object PREFIX/.cacheagent/claim written with ifGenerationMatch=0: a
// second save of the prefix, here or on another agent, is ErrBusy; an
// unknown bucket or a missing permission fails now, not minutes later),
// holds the files' size in the cache's budget (tier.Cache.Hold: these
// dirty bytes are never evicted; a save that does not fit fails before
// anything moves), then moves each regular file into the store, renamed
// (nothing copied) when the directory is on the cache's filesystem,
// computes its CRC32C once and fsyncs it. Symlinks and special files are
// refused (ErrUnsafeFile) and a file that changes meanwhile is ErrChanged;
// on any error the directory is as it was. The save is then durable on
// this agent (state "local") and Save returns. A directory from
// Store.Staging is written back while the job writes into it (inotify,
// sync_file_range), so that the save's fsyncs find little left to write.
//
// # Uploading and committing
//
// Each save's files are uploaded on the store's own connections
// (Config.Connections), so readers never wait for an upload's; a compose
// or a delete moves no data and takes none of them. A file up
// to Config.PartSize is one object (one request, or a resumable upload in
// 16 MiB chunks above 16 MiB); a larger one is uploaded as parts of at
// most Config.PartSize (up to 32: larger for files above 32 parts) in
// parallel under PREFIX/.cacheagent/parts/ (each in one request up to 64
// MiB), composed, and the parts deleted (a parallel composite upload:
// one file's upload uses many connections, which a resumable upload
// cannot). Every object is written with ifGenerationMatch=0 and its CRC32C (the one computed at the save), so
// nothing existing is replaced and every copy is checked. Transient errors
// (5xx, 429, resets) are retried with backoff for as long as the store
// runs. The manifest, PREFIX/cacheagent-checkpoint.json (the files, their
// sizes, CRC32Cs and generations, the node, the time), is written last,
// also with ifGenerationMatch=0: a prefix is a committed checkpoint exactly
// when it has one, and List, Latest and Restore trust a manifest only if
// the objects match it. Every object carries the save's id in its
// metadata, so a save resumed after a crash takes the objects it wrote
// before as its own and commits exactly once. Once committed, the files
// become the cache's copies of their generations (renamed into the disk
// tier: a restore on this agent reads nothing from GCS), the newest
// Config.KeepLocal checkpoints of each run stay pinned, and the claim and
// any parts are deleted.
//
// # Replicas
//
// With a Fleet, each save is pushed to Config.Replicas other members
// (Fleet.Do: the daemon sends it over the peer port), which check every
// file against its CRC32C, fsync it and hold it in their cache's budget;
// then the save is durable at "peers". The upload starts after the
// replication's first try: the replicas are the quick guard, and both
// share this node's uplink. A member holding a replica sweeps it every 30
// s and when the membership changes: committed, or failed (its claim is
// gone: a save that fails removes its claim first, then drops its
// replicas), it is dropped; if its saver has been out of the fleet for 10
// s, the first live holder takes the save over, uploads and commits it
// while the claim is still the save's. The objects' save id keeps that to
// one manifest whoever writes it, and a saver that comes back finds the
// save committed and adopts its files. A save fails only once no manifest
// of it is found: one written by a holder, or by a commit whose answer
// was lost, is adopted instead, and its objects kept.
//
// # State on disk
//
// Config.Dir/saves/<id>/ holds a save: journal.json (the manifest to be,
// the generations written so far, committed, failed; rewritten atomically
// at each step) and data/<i>, its files' bytes until they are adopted.
// Open resumes every unfinished save, and undoes a save cut short before
// Save returned: the files it moved go back where they were (never over
// a file there; a copy it made is dropped), and one that cannot stays in
// data/ until a later Open puts it back. Config.Dir/staging/ holds
// directories handed out for saving into (the daemon's), emptied at Open
// but for one such a save was taking, whose files are back in it.
//
// # Restoring
//
// Store.Restore reads the manifest, checks the objects, reads each file
// through the cache (in fleet mode from the members holding it, the saver
// first, so a cluster restoring at once reads the checkpoint from GCS
// about once, or not at all while the saver is up) and
// hard-links the cache's copy into the directory where only the agent may
// write it (a file adopted from another user's save is theirs), or copies
// it, checking its CRC32C.
package checkpoint
