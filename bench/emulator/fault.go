package emulator

import (
	"net/http"

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

// handle runs the link model (package linkshape) in front of the fake for
// as long as the server is open; Close waits for every handle to return.
func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		http.Error(w, "emulator: closed", http.StatusServiceUnavailable)
		return
	}
	defer s.handlers.Done()
	s.link.ServeHTTP(w, r)
}
