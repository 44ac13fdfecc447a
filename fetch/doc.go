// Package fetch pulls objects from an object.Source (Google Cloud Storage or a local
// directory) into local files.
//
// # Sources
//
// An object.Source answers three questions: what is this object now (Stat), what
// objects lie under a prefix (List), and give me these bytes of this exact
// generation (NewRangeReader). GCS implements it over
// cloud.google.com/go/storage (HTTP/1.1 connections tuned for many parallel
// range reads; Application Default Credentials, an explicit endpoint, or
// STORAGE_EMULATOR_HOST). Dir implements it over a local directory laid out
// as <root>/<bucket>/<name>, with a file's modification time as its
// generation.
//
// Object names are opaque strings. Cloud Storage accepts names such as
// "../../x" or "a/./b", and so does the GCS source; it rejects with
// object.ErrInvalidName only names no request can carry (empty, over 1024 bytes,
// invalid UTF-8, "." or "..", malformed bucket names) and leaves the rest,
// newlines included, to the server.
// Only Dir maps names to paths, through an os.Root, and it refuses names
// that are not canonical local paths. Nothing else in the agent may turn an
// object name into a path.
//
// # Downloads
//
// A Downloader fetches one object as slices of Config.SliceSize read in
// parallel, under one connection budget shared by every download on it
// (create one per process). A freed connection goes to the waiting download
// with the highest current object.Urgency (object.Demand > object.Plan > object.Warm); among equals, to
// the download that started first, so objects complete in the order they
// were asked for. Raising an object.Urgency takes effect at the next grant. A
// connection freed while no slice waits does not idle: it splits the
// in-flight range with the most time left and fetches its second half, if
// that half outlasts twice the average time to first byte, so the last
// downloads finish on every connection. Likewise, once a range has been
// receiving long enough for its rate to be known, connections free at that
// moment split the ranges in flight, so one object alone on the Downloader
// does not stream on one connection.
//
// Objects of at most Config.SmallObjectSize bytes are read on a lane of
// Config.SmallConnections slots of their own: their time to first byte is
// as long as their body or longer, and a connection held for it would carry
// nearly nothing. The lane never splits ranges. A small object that finds
// its lane full takes a main-lane slot that no one waits for, so a job of
// many small objects is not held to the lane while the main lane idles.
//
// Every range's length is checked (a body that ends early is object.ErrShortRead,
// one that runs long is an error). A failed range is retried with
// exponential backoff and full jitter on 429, 408, 5xx, transport errors,
// short reads and stalls (no bytes for Config.StallTimeout, and no call of
// Alive by the object.Source, which says its server is working on the range),
// resuming from the last byte written; other failures (4xx, invalid names, write errors
// from the destination) end the download at once. The CRC32C of each slice
// is computed as its bytes stream in and the slice CRCs are combined
// arithmetically into the object's, which must match the source's. GCS
// gives no checksum per range, so a mismatch cannot be located from it: the
// object is read whole a second time, and the CRCs of its check units (1
// MiB, or SliceSize if smaller, kept as bytes stream in) are compared
// between reads; later rounds re-read only the units whose bytes in the
// destination no earlier read agrees with, up to Config.ChecksumAttempts
// rounds (default 8, with backoff between them, each counted as a
// "checksum" retry). The range reads of those later rounds run on a context
// for which Reread reports true, so an object.Source reading through a less trusted
// copy (a peer agent's cache) can go to the origin for them. A link that corrupts one response in ten thus costs a
// second read and a few units, not a failure. When every unit reads the
// same twice and the object is still wrong, the corruption may be tied to
// a position in the response (a proxy flipping a body's middle byte): the
// next round reads everything through ranges cut elsewhere, which moves
// it. It fails with object.ErrChecksum, naming the object, only when the
// rounds run out. Every
// read is pinned to the generation the caller stat'ed, so an object
// replaced mid-download fails with object.ErrGenerationChanged instead of mixing
// versions.
//
// # Concurrency
//
// GCS, Dir and Downloader are safe for concurrent use. Fetch blocks until
// the download ends and waits for every goroutine it started (one per slice
// in flight; a range read's stall watchdog is a timer, stopped before the
// read returns) before it returns; it returns promptly with the context's
// error when its context ends.
//
// # Errors
//
// Conditions callers test are sentinels: object.ErrNotFound, object.ErrGenerationChanged,
// object.ErrChecksum, object.ErrShortRead, object.ErrInvalidName. A pinned generation that
// vanished during a read is both object.ErrGenerationChanged and ErrNotFound: Stat
// again and restart. HTTP errors from GCS stay reachable as
// *googleapi.Error with errors.As; errors from the destination keep their
// cause (errors.Is(err, syscall.ENOSPC)). Everything is wrapped with the
// object and the operation.
//
// # Metrics
//
// Downloader.Stats returns a stats.Fetch: counters (objects, bytes, range
// reads, retries by RetryCause name, CRC failures, stalls, splits) and
// connection gauges, without depending on a metrics library.
package fetch
