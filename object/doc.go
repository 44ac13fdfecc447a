// Package object is cacheagent's storage vocabulary: what an object is
// (Object, Attrs), how users name objects and prefixes (URI and its one
// parser), what a storage backend answers (Source), how urgent a download is
// (Priority, Urgency), and the sentinel errors callers test with errors.Is.
//
// It imports only the standard library, so every package may use it: a Go
// client of the daemon's control socket, the mmapstore formats and the
// loader's sampler name objects without linking a cloud storage client. The
// backends themselves (GCS, a local directory) and the downloader live in
// package fetch.
package object
