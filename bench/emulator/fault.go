package emulator

import (
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/cacheagent/cacheagent/bench/linkshape"
)

// Fault describes how to misbehave on one media GET; see linkshape.Fault.
// The zero Fault serves the object normally.
type Fault = linkshape.Fault

// FaultPlan decides the fault for the n-th (1-based, counted across the
// server's lifetime) object media GET r. It may be called concurrently.
type FaultPlan = linkshape.FaultPlan

// Shape models a network link per response: FirstByte delays the headers,
// then the body is paced at BytesPerSec (0 or less: unlimited). It applies
// to object media GETs only.
type Shape = linkshape.Shape

// SetUploadFaults replaces the fault plan of uploads (see
// linkshape.Link.SetUploadFaults); nil disables it.
func (s *Server) SetUploadFaults(plan FaultPlan) { s.link.SetUploadFaults(plan) }

// Uploads returns the upload requests received and their body bytes read.
func (s *Server) Uploads() (requests, bytes int64) {
	st := s.link.Stats()
	return st.Uploads, st.UploadBytes
}

// handle runs the link model (package linkshape) in front of the fake for
// as long as the server is open; Close waits for every handle to return.
func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		http.Error(w, "emulator: closed", http.StatusServiceUnavailable)
		return
	}
	defer s.handlers.Done()
	if bucket, dst, ok := composeTarget(r); ok {
		// fake-gcs-server ignores a compose's preconditions; GCS does not.
		s.composeMu.Lock()
		defer s.composeMu.Unlock()
		if r.URL.Query().Get("ifGenerationMatch") == "0" {
			if _, err := s.fake.GetObject(bucket, dst); err == nil {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusPreconditionFailed)
				io.WriteString(w, `{"error":{"code":412,"message":"At least one of the pre-conditions you specified did not hold."}}`)
				return
			}
		}
	}
	s.link.ServeHTTP(w, r)
}

// composeTarget returns the bucket and destination of a JSON API compose
// request (POST /storage/v1/b/BUCKET/o/DEST/compose).
func composeTarget(r *http.Request) (bucket, dst string, ok bool) {
	if r.Method != http.MethodPost {
		return "", "", false
	}
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/storage/v1/b/")
	if !ok {
		return "", "", false
	}
	rest, ok = strings.CutSuffix(rest, "/compose")
	if !ok {
		return "", "", false
	}
	b, d, ok := strings.Cut(rest, "/o/")
	if !ok {
		return "", "", false
	}
	bucket, err1 := url.PathUnescape(b)
	dst, err2 := url.PathUnescape(d)
	return bucket, dst, err1 == nil && err2 == nil && bucket != "" && dst != ""
}
