package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// releaseTimeout bounds Lease.Close, which has no context.
const releaseTimeout = 30 * time.Second

// Acquire returns a lease on o's best local copy, which the daemon fetches
// first if needed. Until the lease is released, or the client's lease
// session ends, the daemon holds the copy open: it is neither evicted nor
// deleted, and its file keeps its size. The caller maps or reads
// Lease.Path itself.
func (c *Client) Acquire(ctx context.Context, o object.Object) (*Lease, error) {
	var err error
	for range 2 { // a session that ended under us is replaced once
		var s *session
		if s, err = c.session(ctx); err != nil {
			return nil, err
		}
		var info LeaseInfo
		path := "/v1/sessions/" + url.PathEscape(s.id) + "/leases"
		err = c.do(ctx, http.MethodPost, path, nil, RefOf(o), &info)
		if errors.Is(err, ErrSessionEnded) {
			c.forget(s)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("control: acquire %s: %w", o, err)
		}
		l := &Lease{c: c, s: s, id: info.ID, path: info.Path, off: info.Offset, tier: info.Tier, attrs: info.Attrs.Fetch(),
			staleC: make(chan struct{})}
		if s.add(l) {
			return l, nil
		}
		err = fmt.Errorf("control: acquire %s: %w", o, ErrSessionEnded) // the daemon released it with the session
	}
	return nil, err
}

// Open is Acquire, in the shape mmapstore.Opener declares, so that a Store
// maps the daemon's copies and every process on the machine shares one
// cache.
func (c *Client) Open(ctx context.Context, o object.Object) (*Lease, error) {
	return c.Acquire(ctx, o)
}

// session returns the current lease session, opening one if needed.
func (c *Client) session(ctx context.Context) (*session, error) {
	c.openMu.Lock()
	defer c.openMu.Unlock()
	c.mu.Lock()
	s, closed := c.sess, c.closed
	c.mu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case s != nil:
		return s, nil
	}
	s, err := c.openSession(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed { // Close ran while we opened it
		c.mu.Unlock()
		s.cancel()
		return nil, ErrClosed
	}
	c.sess = s
	c.mu.Unlock()
	return s, nil
}

// openSession starts the session's streaming request, which outlives ctx,
// reads its first event and starts its reader.
func (c *Client) openSession(ctx context.Context) (*session, error) {
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel) // ctx bounds only the opening
	resp, err := c.send(sctx, http.MethodPost, "/v1/sessions", nil, nil)
	if err != nil {
		stop()
		cancel()
		return nil, fmt.Errorf("control: open lease session: %w", errors.Join(ctx.Err(), err))
	}
	dec := json.NewDecoder(bufio.NewReader(resp.Body))
	var ev SessionEvent
	err = dec.Decode(&ev)
	if !stop() || err != nil || ev.Session == "" {
		cancel()
		resp.Body.Close()
		if err == nil && ctx.Err() == nil {
			err = errors.New("first event names no session")
		}
		return nil, fmt.Errorf("control: open lease session: %w", errors.Join(ctx.Err(), err))
	}
	s := &session{id: ev.Session, cancel: cancel, leases: make(map[uint64]*Lease)}
	c.readers.Go(func() { c.readSession(s, dec, resp.Body) })
	return s, nil
}

// readSession applies the session's events until its stream ends, then
// ends the session.
func (c *Client) readSession(s *session, dec *json.Decoder, body io.Closer) {
	for {
		var ev SessionEvent
		if err := dec.Decode(&ev); err != nil {
			break
		}
		s.markStale(ev.Stale)
	}
	body.Close()
	s.cancel()
	c.forget(s)
	s.end()
}

// forget drops s as the current session.
func (c *Client) forget(s *session) {
	c.mu.Lock()
	if c.sess == s {
		c.sess = nil
	}
	c.mu.Unlock()
}

// session is the client's side of a lease session.
type session struct {
	id     string             // immutable
	cancel context.CancelFunc // ends the stream; immutable

	mu     sync.Mutex // protects the fields below
	leases map[uint64]*Lease
	ended  bool
}

// add records l; false if the session has ended (the daemon released l).
func (s *session) add(l *Lease) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.leases[l.id] = l
	return true
}

// remove forgets l and reports whether the session is still on.
func (s *session) remove(l *Lease) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.leases, l.id)
	return !s.ended
}

// markStale marks the leases with the given ids stale.
func (s *session) markStale(ids []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if l := s.leases[id]; l != nil {
			l.markStale()
		}
	}
}

// end marks the session over and every lease in it stale.
func (s *session) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	for _, l := range s.leases {
		l.markStale()
	}
	clear(s.leases)
}

// Lease is the daemon holding one object's local copy for this client. It
// implements mmapstore.File. Path, Size, Attrs, Stale and Done are safe for
// concurrent use; Release (or Close) must be called once.
type Lease struct {
	c      *Client
	s      *session
	id     uint64       // within s; immutable
	path   string       // immutable
	off    int64        // immutable
	tier   string       // immutable
	attrs  object.Attrs // immutable
	stale  atomic.Bool
	staleC chan struct{} // closed when stale is set
	done   atomic.Bool   // released
}

// Path returns the local file holding the object's bytes. It must not be
// modified; it stays readable, at its size, until the lease is released.
func (l *Lease) Path() string { return l.path }

// Offset returns where the object's bytes start in the file at Path: 0
// unless the object is packed into a segment file with others.
func (l *Lease) Offset() int64 { return l.off }

// Size returns the object's size in bytes.
func (l *Lease) Size() int64 { return l.attrs.Size }

// Tier returns the tier holding the copy: shm or disk.
func (l *Lease) Tier() string { return l.tier }

// Attrs returns the attributes of the generation the copy holds.
func (l *Lease) Attrs() object.Attrs { return l.attrs }

// Stale reports that the daemon no longer serves this copy (it was
// replaced, evicted or moved to another tier), or that the lease session
// ended (a daemon restart): acquire again to get the current copy. The
// daemon reports staleness within about a quarter second. Stale is one
// atomic load.
func (l *Lease) Stale() bool { return l.stale.Load() }

// Done returns a channel closed when the lease turns stale.
func (l *Lease) Done() <-chan struct{} { return l.staleC }

// markStale sets stale once.
func (l *Lease) markStale() {
	if l.stale.CompareAndSwap(false, true) {
		close(l.staleC)
	}
}

// Release gives the copy back to the daemon. If the session has ended the
// daemon already has, and Release only forgets the lease. A second Release
// fails with ErrReleased.
func (l *Lease) Release(ctx context.Context) error {
	if !l.done.CompareAndSwap(false, true) {
		return fmt.Errorf("control: release %s: %w", l.attrs.Object, ErrReleased)
	}
	if !l.s.remove(l) {
		return nil
	}
	path := "/v1/sessions/" + url.PathEscape(l.s.id) + "/leases/" + strconv.FormatUint(l.id, 10)
	err := l.c.do(ctx, http.MethodDelete, path, nil, nil, nil)
	if errors.Is(err, ErrSessionEnded) || errors.Is(err, ErrNotFound) {
		return nil // released with its session
	}
	if err != nil {
		return fmt.Errorf("control: release %s: %w", l.attrs.Object, err)
	}
	return nil
}

// Close implements mmapstore.File: Release, bounded by 30 seconds.
func (l *Lease) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	return l.Release(ctx)
}
