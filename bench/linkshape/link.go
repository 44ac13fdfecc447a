package linkshape

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/internal/wait"
)

// Fault describes how to misbehave on one media GET. The zero Fault serves
// the object normally. Body offsets count response body bytes (for a range
// read, from the start of the range). When several body faults are set, the
// first one reached wins; faults compose with the Shape in force.
type Fault struct {
	// Status, if non-zero, is sent instead of the object, with no body.
	// It must be in [200, 599]; other values get a 500 explaining why.
	Status int
	// RetryAfter is sent as the Retry-After header with Status.
	RetryAfter string
	// HeaderWait delays the response headers (a time-to-first-byte stall),
	// on top of Shape.FirstByte. It ends early if the request is cancelled.
	HeaderWait time.Duration
	// ResetAfter > 0 aborts the connection with a TCP RST after this many
	// body bytes have been delivered.
	ResetAfter int64
	// CloseAfter > 0 closes the connection cleanly (FIN) after this many
	// body bytes, leaving the Content-Length unmet.
	CloseAfter int64
	// TruncateTo > 0 lowers the Content-Length of a 2xx response to this
	// many bytes and sends only those: a short body the client cannot detect
	// from the framing.
	TruncateTo int64
	// CorruptAt is the body offset of the one byte that Corrupt flips.
	CorruptAt int64
	// Corrupt flips (XOR 0xFF) the body byte at CorruptAt.
	Corrupt bool
	// CorruptMiddle, with Corrupt, flips the byte in the middle of the
	// body (its Content-Length halved) instead of CorruptAt's: the same
	// byte of the response whatever is asked, as a faulty proxy does.
	CorruptMiddle bool
	// StallAt is the body offset at which a Stall begins.
	StallAt int64
	// Stall > 0 stops the body for this long after StallAt bytes (already
	// flushed to the client). It ends early if the request is cancelled.
	Stall time.Duration
}

// FaultPlan decides the fault for the n-th (1-based, counted across the
// Link's lifetime) media GET r. It may be called concurrently.
type FaultPlan func(r *http.Request, n int) Fault

// Shape models a network link per response: FirstByte delays the headers,
// then the body is paced at BytesPerSec (0 or less: unlimited). It applies
// to media GETs only. An HTTP/1.1 connection carries one response at a
// time, so this is also a per-connection model.
type Shape struct {
	FirstByte   time.Duration `json:"first_byte_ns"`
	BytesPerSec int64         `json:"bytes_per_sec"`
	// UploadBytesPerSec > 0 paces the request bodies of uploads (the
	// uploads themselves wait FirstByte too): the link's other direction.
	// 0 leaves uploads unshaped.
	UploadBytesPerSec int64 `json:"upload_bytes_per_sec,omitempty"`
}

// Stats counts what a Link has done since New.
type Stats struct {
	// MediaGETs counts the media GETs received, faulted ones included.
	MediaGETs int64 `json:"media_gets"`
	// Faulted counts the media GETs given a non-zero Fault.
	Faulted int64 `json:"faulted"`
	// BytesServed counts the media GET body bytes written to clients
	// (bytes swallowed by a truncation fault are not counted).
	BytesServed int64 `json:"bytes_served"`
	// Uploads counts the upload requests received (IsUpload), faulted
	// ones included; UploadBytes their body bytes read.
	Uploads     int64 `json:"uploads"`
	UploadBytes int64 `json:"upload_bytes"`
}

// Status is a Link's shape and counters, as a proxy reports them (JSON).
type Status struct {
	Shape Shape `json:"shape"`
	Stats Stats `json:"stats"`
}

// Link is an http.Handler that counts, faults and shapes the media GETs it
// passes to the next handler, and passes every other request through
// untouched. Its methods are safe for concurrent use; SetFaults and SetShape
// take effect for media GETs that start after the call.
//
// Waits (time to first byte, pacing, stalls) end when the request's context
// is done, so a server that cancels its base context on shutdown ends them
// at once.
type Link struct {
	next http.Handler // immutable after New

	faults       atomic.Pointer[FaultPlan]
	uploadFaults atomic.Pointer[FaultPlan]
	shape        atomic.Pointer[Shape]

	mediaGETs   atomic.Int64
	faulted     atomic.Int64
	bytesServed atomic.Int64
	uploads     atomic.Int64
	uploadBytes atomic.Int64
}

// New returns a Link in front of next with the given shape and fault plan
// (nil: none). It panics if next is nil (a programming error).
func New(next http.Handler, shape Shape, faults FaultPlan) *Link {
	if next == nil {
		panic("linkshape: nil next handler")
	}
	l := &Link{next: next}
	l.faults.Store(&faults)
	var none FaultPlan
	l.uploadFaults.Store(&none)
	l.shape.Store(&shape)
	return l
}

// SetUploadFaults replaces the fault plan of uploads (IsUpload); nil
// disables it. Of a Fault, uploads take Status (answered instead, the body
// unread), HeaderWait (a wait before the request goes on) and ResetAfter
// (the connection reset after that many body bytes are read).
func (l *Link) SetUploadFaults(plan FaultPlan) { l.uploadFaults.Store(&plan) }

// SetFaults replaces the fault plan; nil disables fault injection.
func (l *Link) SetFaults(plan FaultPlan) { l.faults.Store(&plan) }

// SetShape replaces the link model; the zero Shape disables shaping.
func (l *Link) SetShape(sh Shape) { l.shape.Store(&sh) }

// Shape returns the link model in force.
func (l *Link) Shape() Shape { return *l.shape.Load() }

// Stats returns the counters. Handlers still running may add to them.
func (l *Link) Stats() Stats {
	return Stats{
		MediaGETs:   l.mediaGETs.Load(),
		Faulted:     l.faulted.Load(),
		BytesServed: l.bytesServed.Load(),
		Uploads:     l.uploads.Load(),
		UploadBytes: l.uploadBytes.Load(),
	}
}

// Status returns the shape in force and the counters.
func (l *Link) Status() Status { return Status{Shape: l.Shape(), Stats: l.Stats()} }

// ServeHTTP implements http.Handler. A media GET whose body is cut short
// (a fault, the client leaving) aborts the connection with
// http.ErrAbortHandler, which net/http recovers.
func (l *Link) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if IsUpload(r) {
		l.serveUpload(w, r)
		return
	}
	if !IsMediaGET(r) {
		l.next.ServeHTTP(w, r)
		return
	}
	n := l.mediaGETs.Add(1)
	var f Fault
	if plan := *l.faults.Load(); plan != nil {
		f = plan(r, int(n))
	}
	if f != (Fault{}) {
		l.faulted.Add(1)
	}
	sh := *l.shape.Load()
	ctx := r.Context()
	if err := wait.Sleep(ctx, max(sh.FirstByte, 0)+max(f.HeaderWait, 0)); err != nil {
		// The client left or the server is closing: drop the connection
		// rather than let net/http complete an empty 200.
		panic(http.ErrAbortHandler)
	}
	if f.Status != 0 {
		writeStatus(w, f)
		return
	}
	fw := newFaultWriter(ctx, w, f, sh.BytesPerSec, &l.bytesServed)
	l.next.ServeHTTP(fw, r)
	if fw.finish() != nil {
		panic(http.ErrAbortHandler) // the body was cut short: drop the connection
	}
}

// writeStatus answers with the fault's status and no body.
func writeStatus(w http.ResponseWriter, f Fault) {
	if f.Status < 200 || f.Status > 599 {
		msg := fmt.Sprintf("linkshape: invalid fault status %d", f.Status)
		http.Error(w, msg, http.StatusInternalServerError)
		return
	}
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(f.Status)
}

// serveUpload shapes and faults one upload request, then passes it on.
func (l *Link) serveUpload(w http.ResponseWriter, r *http.Request) {
	n := l.uploads.Add(1)
	var f Fault
	if plan := *l.uploadFaults.Load(); plan != nil {
		f = plan(r, int(n))
	}
	if f != (Fault{}) {
		l.faulted.Add(1)
	}
	sh := *l.shape.Load()
	first := time.Duration(0)
	if sh.UploadBytesPerSec > 0 {
		first = sh.FirstByte
	}
	if err := wait.Sleep(r.Context(), max(first, 0)+max(f.HeaderWait, 0)); err != nil {
		panic(http.ErrAbortHandler)
	}
	if f.Status != 0 {
		writeStatus(w, f)
		return
	}
	r.Body = &uploadBody{ctx: r.Context(), r: r.Body, rate: sh.UploadBytesPerSec, resetAfter: f.ResetAfter,
		read: &l.uploadBytes, start: time.Now()}
	l.next.ServeHTTP(w, r)
}

// IsUpload reports whether r uploads object data: a JSON API upload
// (POST or PUT under /upload/: media, multipart, or a resumable session's
// chunk).
func IsUpload(r *http.Request) bool {
	return (r.Method == http.MethodPost || r.Method == http.MethodPut) && strings.HasPrefix(r.URL.Path, "/upload/")
}

// IsMediaGET reports whether r downloads object data: an XML read
// (GET /bucket/object), a JSON media read (GET /storage/v1/b/B/o/O?alt=media)
// or a media-link download (GET /download/storage/v1/b/B/o/O).
func IsMediaGET(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/storage/v1/"):
		return strings.Contains(p, "/o/") && r.URL.Query().Get("alt") == "media"
	case strings.HasPrefix(p, "/download/storage/v1/"):
		return true
	case strings.HasPrefix(p, "/upload/"), strings.HasPrefix(p, "/_internal/"),
		strings.HasPrefix(p, "/batch/"):
		return false
	}
	bucket, object, ok := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	return ok && bucket != "" && object != ""
}
