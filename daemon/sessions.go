package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/tier"
)

// staleScanEvery is how often a session checks its leases for copies the
// cache stopped serving, and reports them to its client.
const staleScanEvery = 250 * time.Millisecond

// sessionManager tracks lease sessions. A session lives exactly as long as
// its streaming request (POST /v1/sessions): when the client closes the
// connection or dies, the request's context ends and every handle of the
// session is closed. Lock order: sessionManager.mu before session.mu.
type sessionManager struct {
	log *slog.Logger // immutable
	// onEnd, if set (by tests, before use), is called after a session ended
	// with the number of leases it released.
	onEnd func(id string, released int)

	mu       sync.Mutex // protects the fields below
	sessions map[string]*session
	leases   int // leases held by all sessions
	closed   bool
}

func newSessionManager(log *slog.Logger) *sessionManager {
	return &sessionManager{log: log, sessions: make(map[string]*session)}
}

// session is one client's set of leases.
type session struct {
	id string // immutable

	mu     sync.Mutex // protects the fields below
	leases map[uint64]*heldLease
	next   uint64
	ended  bool
}

// heldLease is a handle the daemon holds for a client.
type heldLease struct {
	h        *tier.Handle
	reported bool // its staleness was sent to the client
}

// create registers a new session.
func (m *sessionManager) create() (*session, error) {
	s := &session{id: newID(), leases: make(map[uint64]*heldLease)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, control.ErrUnavailable
	}
	m.sessions[s.id] = s
	return s, nil
}

// get returns a live session.
func (m *sessionManager) get(id string) (*session, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	return s, ok
}

// add records h as a lease of s and returns its id; false if s has ended
// (the caller closes h).
func (m *sessionManager) add(s *session, h *tier.Handle) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return 0, false
	}
	s.next++
	s.leases[s.next] = &heldLease{h: h}
	m.leases++
	return s.next, true
}

// release closes lease id of s; false if s holds no such lease.
func (m *sessionManager) release(s *session, id uint64) (bool, error) {
	m.mu.Lock()
	s.mu.Lock()
	l := s.leases[id]
	if l != nil {
		delete(s.leases, id)
		m.leases--
	}
	s.mu.Unlock()
	m.mu.Unlock()
	if l == nil {
		return false, nil
	}
	return true, l.h.Close()
}

// end ends s and closes its handles.
func (m *sessionManager) end(s *session) {
	m.mu.Lock()
	s.mu.Lock()
	held := s.leases
	s.leases, s.ended = nil, true
	m.leases -= len(held)
	delete(m.sessions, s.id)
	s.mu.Unlock()
	m.mu.Unlock()
	var errs []error
	for _, l := range held {
		errs = append(errs, l.h.Close())
	}
	m.log.Debug("lease session ended", "session", s.id, "released", len(held), "err", errors.Join(errs...))
	if m.onEnd != nil {
		m.onEnd(s.id, len(held))
	}
}

// close refuses new sessions and ends the remaining ones (their requests
// have normally ended them already).
func (m *sessionManager) close() {
	m.mu.Lock()
	m.closed = true
	var rest []*session
	for _, s := range m.sessions {
		rest = append(rest, s)
	}
	m.mu.Unlock()
	for _, s := range rest {
		m.end(s)
	}
}

// counts returns the number of sessions and leases.
func (m *sessionManager) counts() (sessions, leases int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions), m.leases
}

// newlyStale returns the leases of s whose copies went stale since the
// last call.
func (s *session) newlyStale() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []uint64
	for id, l := range s.leases {
		if !l.reported && l.h.Stale() {
			l.reported = true
			ids = append(ids, id)
		}
	}
	return ids
}

// maxSessionBody bounds the body of POST /v1/sessions, which carries
// nothing (clients send none, or {}).
const maxSessionBody = 4 << 10

// handleSession serves POST /v1/sessions: it names the session, then
// reports stale leases until the client goes away (or the daemon stops),
// and then releases every lease of the session. The request's body is read
// first: net/http notices a client going away only once it has been.
func (d *Daemon) handleSession(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, maxSessionBody)); err != nil {
		writeError(w, fmt.Errorf("%w: body: %w", control.ErrInvalid, err))
		return
	}
	s, err := d.sessions.create()
	if err != nil {
		writeError(w, err)
		return
	}
	d.stats.invalidate()
	defer d.stats.invalidate()
	defer d.sessions.end(s)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	if enc.Encode(control.SessionEvent{Session: s.id}) != nil || rc.Flush() != nil {
		return
	}
	d.log.Debug("lease session started", "session", s.id)
	t := time.NewTicker(staleScanEvery)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
			ids := s.newlyStale()
			if len(ids) == 0 {
				continue
			}
			if enc.Encode(control.SessionEvent{Stale: ids}) != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// handleAcquire serves POST /v1/sessions/{sid}/leases.
func (d *Daemon) handleAcquire(w http.ResponseWriter, r *http.Request) {
	s, ok := d.sessions.get(r.PathValue("sid"))
	if !ok {
		writeError(w, control.ErrSessionEnded)
		return
	}
	var ref control.ObjectRef
	if err := decodeBody(w, r, &ref, maxRequestBody); err != nil {
		writeError(w, err)
		return
	}
	h, err := d.cache.Open(r.Context(), ref.Object())
	if err != nil {
		writeError(w, err)
		return
	}
	id, ok := d.sessions.add(s, h)
	if !ok {
		h.Close()
		writeError(w, control.ErrSessionEnded)
		return
	}
	d.stats.invalidate()
	writeJSON(w, http.StatusOK, control.LeaseInfo{ID: id, Path: h.Path(), Offset: h.Offset(), Tier: string(h.Tier()), Attrs: control.AttrsOf(h.Attrs())})
}

// handleRelease serves DELETE /v1/sessions/{sid}/leases/{id}.
func (d *Daemon) handleRelease(w http.ResponseWriter, r *http.Request) {
	s, ok := d.sessions.get(r.PathValue("sid"))
	if !ok {
		writeError(w, control.ErrSessionEnded)
		return
	}
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, control.ErrNotFound)
		return
	}
	found, err := d.sessions.release(s, id)
	d.stats.invalidate()
	switch {
	case !found:
		writeError(w, control.ErrNotFound)
	case err != nil:
		writeError(w, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
