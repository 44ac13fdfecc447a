// Package fetch pulls objects from a Source (Google Cloud Storage or a local
// directory) into local files.
//
// # Sources
//
// A Source answers three questions: what is this object now (Stat), what
// objects lie under a prefix (List), and give me these bytes of this exact
// generation (NewRangeReader). GCS implements it over
// cloud.google.com/go/storage; Dir implements it over a local directory laid
// out as <root>/<bucket>/<name>.
//
// # Downloads
//
// A Downloader fetches one object as slices of Config.SliceSize read in
// parallel, under one process-wide connection budget shared by every
// download, granted by priority (Demand > Plan > Warm). Every range's length
// is checked; a failed or stalled range is retried with exponential backoff
// and jitter, resuming from the last byte written; the assembled object is
// verified against the source's CRC32C before Fetch returns nil. Every read
// is pinned to the generation the caller stat'ed, so an object overwritten
// mid-download fails with ErrGenerationChanged instead of mixing versions.
//
// # Errors
//
// Conditions callers test are sentinels: ErrNotFound, ErrGenerationChanged,
// ErrChecksum, ErrShortRead. Everything else is wrapped with the object and
// the operation.
package fetch
