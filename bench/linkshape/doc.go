// Package linkshape makes a loopback HTTP path to a GCS-compatible server
// behave like a link to Google Cloud Storage: each object download (a
// "media GET") waits a time to first byte and is then paced at a rate per
// connection, and faults can be injected into chosen downloads (error
// statuses, header stalls, resets, clean closes, short or corrupted
// bodies, mid-body stalls). Metadata, list and upload requests pass
// through untouched.
//
// Link is the middleware. In front of an in-process fake-gcs-server it is
// the heart of package emulator; in front of Proxy it shapes any
// GCS-compatible endpoint, such as a standalone fake-gcs-server
// (bench/cmd/gcsproxy):
//
//	p, err := linkshape.Proxy("http://127.0.0.1:4443", linkshape.NewTransport(), nil)
//	…
//	l := linkshape.New(p, linkshape.Shape{FirstByte: 20 * time.Millisecond, BytesPerSec: 100e6}, nil)
//	http.Serve(ln, l)
//
// Random builds a fault plan that fails a share of downloads, reproducibly
// from a seed.
//
// # Concurrency
//
// A Link is safe for concurrent use; SetFaults and SetShape take effect for
// media GETs that start after the call. A FaultPlan may be called
// concurrently.
//
// # Lifetimes
//
// Every wait of a request ends when its context does. A server that should
// stop at once cancels its requests' base context (http.Server.BaseContext)
// before closing.
package linkshape
