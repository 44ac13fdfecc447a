package daemon

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/loader/ring"
	"github.com/cacheagent/cacheagent/loader/spec"
)

// Loader sessions (POST /v1/loaders): the daemon runs a loader for a
// client process and gathers its batches into a shared-memory ring (package
// loader/ring) that the client maps. The ring's memfd goes to the client
// over the data socket (the control socket's path + DataSocketSuffix,
// SOCK_SEQPACKET, mode 0660), opened with the first session; batches are
// announced and released there. A session ends when either its control
// stream or its data connection closes.
//
// Lock order: loaderSessions.mu only; sessions' run loops hold no lock of
// the manager's while they work.

// DataSocketSuffix is appended to the control socket's path to name the
// data socket.
const DataSocketSuffix = ".data"

// helloTimeout bounds the wait for a session's client to join on the data
// socket, and for a connection's Hello.
const helloTimeout = 30 * time.Second

// loaderSessions tracks loader sessions and owns the data socket.
type loaderSessions struct {
	d       *Daemon      // immutable
	batches atomic.Int64 // batches handed to clients, for the metrics
	wg      sync.WaitGroup

	mu       sync.Mutex // protects the fields below
	ln       *net.UnixListener
	path     string
	sessions map[string]*loaderSession
	pending  map[*ring.Conn]struct{} // connections saying hello
	closed   bool
}

// newLoaderSessions returns the daemon's loader sessions and registers
// their metrics.
func newLoaderSessions(d *Daemon) *loaderSessions {
	m := &loaderSessions{d: d, sessions: make(map[string]*loaderSession), pending: make(map[*ring.Conn]struct{})}
	d.met.Registry().MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cacheagent_loader_sessions",
			Help: "Open loader sessions (POST /v1/loaders)."}, func() float64 { return float64(m.count()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cacheagent_loader_session_batches_total",
			Help: "Batches loader sessions handed to their clients."}, func() float64 { return float64(m.batches.Load()) }),
	)
	return m
}

// count returns the number of open sessions.
func (m *loaderSessions) count() int {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// listenLocked opens the data socket next to the control socket, if not
// yet open, and starts accepting on it.
func (m *loaderSessions) listenLocked() error {
	if m.ln != nil {
		return nil
	}
	path := m.d.Config().Control.Socket + DataSocketSuffix
	// The control socket is ours, so a socket file at its side is a dead
	// daemon's.
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == fs.ModeSocket {
		os.Remove(path)
	}
	ln, err := net.ListenUnix(ring.Network, &net.UnixAddr{Name: path, Net: ring.Network})
	if err != nil {
		return fmt.Errorf("daemon: data socket: %w", err)
	}
	if err := os.Chmod(path, SocketMode); err != nil {
		ln.Close()
		return fmt.Errorf("daemon: data socket mode: %w", err)
	}
	m.ln, m.path = ln, path
	m.wg.Go(func() { m.accept(ln) })
	return nil
}

// accept serves the data socket until it is closed.
func (m *loaderSessions) accept(ln *net.UnixListener) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				m.d.log.Error("data socket failed", "err", err)
			}
			return
		}
		conn := ring.NewConn(c)
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			conn.Close()
			return
		}
		m.pending[conn] = struct{}{}
		m.mu.Unlock()
		m.wg.Go(func() { m.handshake(conn) })
	}
}

// handshake reads a connection's Hello and gives the connection to its
// session, or refuses it.
func (m *loaderSessions) handshake(conn *ring.Conn) {
	conn.SetDeadline(time.Now().Add(helloTimeout))
	msg, err := conn.Recv()
	m.mu.Lock()
	delete(m.pending, conn)
	refusal := &ring.Error{Code: ring.CodeProtocol, Text: fmt.Sprintf("want a Hello: %v", err)}
	if h, ok := msg.(ring.Hello); ok && err == nil {
		refusal = m.attachLocked(h, conn)
	}
	m.mu.Unlock()
	if refusal != nil {
		conn.Send(refusal)
		conn.Close()
	}
}

// attachLocked gives conn to the session h names, if h has its token;
// else it returns the refusal to send.
func (m *loaderSessions) attachLocked(h ring.Hello, conn *ring.Conn) *ring.Error {
	if h.Protocol != ring.Protocol {
		return &ring.Error{Code: ring.CodeProtocol, Text: fmt.Sprintf("protocol %d; the daemon speaks %d", h.Protocol, ring.Protocol)}
	}
	s := m.sessions[h.Session]
	if s == nil || subtle.ConstantTimeCompare([]byte(h.Token), []byte(s.token)) != 1 {
		return &ring.Error{Code: ring.CodeRefused, Text: "no such session, or a wrong token"}
	}
	if s.joined {
		return &ring.Error{Code: ring.CodeRefused, Text: "the session has a client already"}
	}
	conn.SetDeadline(time.Time{})
	s.joined = true
	s.attach <- conn // never blocks: the first and only send
	return nil
}

// add registers s, opening the data socket if needed, and returns the
// socket's path.
func (m *loaderSessions) add(s *loaderSession) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return "", control.ErrUnavailable
	}
	if err := m.listenLocked(); err != nil {
		return "", err
	}
	m.sessions[s.id] = s
	return m.path, nil
}

// remove unregisters s and closes a connection that joined it but was
// never taken.
func (m *loaderSessions) remove(s *loaderSession) {
	m.mu.Lock()
	delete(m.sessions, s.id)
	m.mu.Unlock()
	select {
	case c := <-s.attach:
		c.Close()
	default:
	}
}

// close stops the data socket and waits for its goroutines. Sessions end
// with their requests, before (Daemon.Close cancels them first).
func (m *loaderSessions) close() {
	m.mu.Lock()
	m.closed = true
	if m.ln != nil {
		m.ln.Close()
	}
	for c := range m.pending {
		c.Close()
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// newToken returns a session's secret: 16 random bytes in hex.
func newToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// handleLoaderSession serves POST /v1/loaders: it builds the session,
// sends its first line, runs it until the client goes (or the daemon
// stops), then frees everything.
func (d *Daemon) handleLoaderSession(w http.ResponseWriter, r *http.Request) {
	var req spec.Spec
	if err := decodeBody(w, r, &req, maxPlanBody); err != nil {
		writeError(w, err)
		return
	}
	s, err := d.openLoaderSession(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	path, err := d.lsess.add(s)
	if err != nil {
		s.free()
		writeError(w, err)
		return
	}
	// Counted until everything is freed: remove runs after free.
	d.stats.invalidate()
	defer d.stats.invalidate()
	defer d.lsess.remove(s)
	defer s.free()
	s.info.DataSocket = path
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	if enc.Encode(s.info) != nil || rc.Flush() != nil {
		return
	}
	d.log.Debug("loader session started", "session", s.id, "ring_bytes", s.info.RingBytes)
	reason := s.run(r.Context())
	d.log.Debug("loader session ended", "session", s.id, "reason", reason)
	if r.Context().Err() == nil {
		enc.Encode(control.LoaderEvent{Ended: reason})
		rc.Flush()
	}
}
