package emulator

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
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
	// StallAt is the body offset at which a Stall begins.
	StallAt int64
	// Stall > 0 stops the body for this long after StallAt bytes (already
	// flushed to the client). It ends early if the request is cancelled.
	Stall time.Duration
}

// FaultPlan decides the fault for the n-th (1-based, counted across the
// server's lifetime) object media GET r. It may be called concurrently.
type FaultPlan func(r *http.Request, n int) Fault

// Shape models a network link per response: FirstByte delays the headers,
// then the body is paced at BytesPerSec (0 or less: unlimited). It applies
// to object media GETs only.
type Shape struct {
	FirstByte   time.Duration
	BytesPerSec int64
}

// handle is the middleware in front of the fake: it counts, faults and
// shapes media GETs and passes everything else through.
func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		http.Error(w, "emulator: closed", http.StatusServiceUnavailable)
		return
	}
	defer s.handlers.Done()
	if !isMediaGET(r) {
		s.inner.ServeHTTP(w, r)
		return
	}
	n := s.mediaGETs.Add(1)
	var f Fault
	if plan := *s.faults.Load(); plan != nil {
		f = plan(r, int(n))
	}
	sh := *s.shape.Load()
	ctx := r.Context() // also cancelled by Close
	if err := sleep(ctx, max(sh.FirstByte, 0)+max(f.HeaderWait, 0)); err != nil {
		// The client left or the server is closing: drop the connection
		// rather than let net/http complete an empty 200.
		panic(http.ErrAbortHandler)
	}
	if f.Status != 0 {
		writeStatus(w, f)
		return
	}
	fw := newFaultWriter(ctx, w, f, sh.BytesPerSec, &s.bytesServed)
	s.inner.ServeHTTP(fw, r)
	if fw.finish() != nil {
		panic(http.ErrAbortHandler) // the body was cut short: drop the connection
	}
}

// writeStatus answers with the fault's status and no body.
func writeStatus(w http.ResponseWriter, f Fault) {
	if f.Status < 200 || f.Status > 599 {
		msg := fmt.Sprintf("emulator: invalid fault status %d", f.Status)
		http.Error(w, msg, http.StatusInternalServerError)
		return
	}
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(f.Status)
}

// isMediaGET reports whether r downloads object data: an XML read
// (GET /bucket/object), a JSON media read (GET /storage/v1/b/B/o/O?alt=media)
// or a media-link download (GET /download/storage/v1/b/B/o/O).
func isMediaGET(r *http.Request) bool {
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

// sleep waits for d or until ctx is done, whichever comes first; it returns
// ctx.Err() if ctx ended the wait.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
