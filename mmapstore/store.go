package mmapstore

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// Defaults for zero Config fields.
const (
	// DefaultRevalidate is how long Acquire serves a mapping before asking
	// the Opener again.
	DefaultRevalidate = time.Second
	// DefaultMaxIdleMappings is how many mappings are kept with no lease.
	DefaultMaxIdleMappings = 256
	// DefaultMaxIdleBytes bounds the total size of idle mappings: 4 GiB.
	DefaultMaxIdleBytes = 4 << 30
)

// Config configures a Store. New never modifies it.
type Config struct {
	// Revalidate is how long Acquire serves an object's mapping before it
	// asks the Opener again for the object's current copy. With a tier.Cache's Opener
	// that is a tier.Cache.Open, which checks the source only when the
	// cache's own revalidation interval has passed. A File turning Stale
	// makes the next Acquire ask at once, whatever this says. 0 means
	// DefaultRevalidate; negative means never (only staleness).
	Revalidate time.Duration
	// MaxIdleMappings bounds the mappings kept with no lease, least
	// recently released dropped first. Each holds its File open (with
	// a tier.Cache's Opener, a tier handle that blocks the entry's eviction). 0 means
	// DefaultMaxIdleMappings; negative means none are kept, so the last
	// Release of a mapping unmaps it.
	MaxIdleMappings int
	// MaxIdleBytes bounds the total size in bytes of idle mappings, the
	// cache space they keep from eviction. 0 means DefaultMaxIdleBytes;
	// negative means none are kept.
	MaxIdleBytes int64
	// Logger receives errors that have no caller to return to (unmapping a
	// superseded mapping during an Acquire); nil discards them.
	Logger *slog.Logger
}

// Store maps cached objects and lends their bytes through leases. It is
// safe for concurrent use. See the package documentation for lifetimes.
type Store struct {
	// Immutable after New.
	open         openFunc
	revalidate   time.Duration // negative: never
	sweepEvery   time.Duration // how often Acquire drops stale idle mappings
	maxIdle      int
	maxIdleBytes int64
	log          *slog.Logger
	now          func() time.Duration // monotonic clock; tests replace it before use

	mu sync.Mutex // protects the fields below and every mapping's guarded fields
	// maps holds the current mapping of each key. INVARIANT: m.installed
	// iff maps[m.key] == m; an installed m with refs == 0 is in idle.
	maps       map[object.Object]*mapping
	idle       idleList
	free       []*slot // released lease slots, reused by leaseLocked
	closed     bool
	sweepAt    time.Duration
	live       int   // mappings not yet taken down, installed or not
	liveBytes  int64 // their sizes
	leases     int   // outstanding leases
	hits       int64
	opens      int64
	mapsMade   int64
	mapsClosed int64
}

// New returns a Store over o. It panics if o is nil (a programming error).
// Zero or negative Config fields are interpreted as Config documents.
func New[F File](o Opener[F], cfg Config) *Store {
	if o == nil {
		panic("mmapstore: New with a nil Opener")
	}
	s := &Store{open: erase(o), revalidate: cfg.Revalidate, maxIdle: cfg.MaxIdleMappings,
		maxIdleBytes: cfg.MaxIdleBytes, log: cfg.Logger, maps: make(map[object.Object]*mapping)}
	if s.revalidate == 0 {
		s.revalidate = DefaultRevalidate
	}
	s.sweepEvery = DefaultRevalidate
	if s.revalidate > 0 {
		s.sweepEvery = s.revalidate
	}
	switch {
	case s.maxIdle == 0:
		s.maxIdle = DefaultMaxIdleMappings
	case s.maxIdle < 0:
		s.maxIdle = 0
	}
	switch {
	case s.maxIdleBytes == 0:
		s.maxIdleBytes = DefaultMaxIdleBytes
	case s.maxIdleBytes < 0:
		s.maxIdleBytes = 0
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	epoch := time.Now()
	s.now = func() time.Duration { return time.Since(epoch) }
	s.sweepAt = s.sweepEvery
	return s
}

// Acquire returns a lease on a read-only mapping of o's current local copy,
// opening (and, with a tier.Cache's Opener, fetching) and mapping it on a miss. On a
// warm object it takes a lock, looks the mapping up and counts a reference:
// no system call, no allocation. The lease must be released. Errors wrap
// the Opener's (object.ErrNotFound, …) or ErrClosed.
func (s *Store) Acquire(ctx context.Context, o object.Object) (Lease, error) {
	now := s.now()
	s.mu.Lock()
	if m := s.maps[o]; m != nil && now < s.sweepAt && s.servableLocked(m, now) {
		s.hits++
		l := s.leaseLocked(m)
		s.mu.Unlock()
		return l, nil
	}
	s.mu.Unlock()
	return s.acquireSlow(ctx, o, now)
}

// servableLocked reports whether m may be leased without asking the
// Opener: its copy is current (or was already stale when opened, so the
// Opener had nothing better) and its revalidation is not due, or another
// Acquire is revalidating it right now.
func (s *Store) servableLocked(m *mapping, now time.Duration) bool {
	return (m.staleOK || !m.file.Stale()) && (now < m.checkAt || m.checking)
}

// acquireSlow is Acquire when the mapping is missing, stale or due for
// revalidation: it asks the Opener and maps what it returns unless that is
// the copy already mapped.
func (s *Store) acquireSlow(ctx context.Context, o object.Object, now time.Duration) (Lease, error) {
	l, cur, dead, err := s.prepare(o, now)
	s.closeLogged(dead)
	if err != nil || l.sl != nil {
		return l, err
	}
	f, err := s.open(ctx, o)
	if err != nil {
		s.endCheck(cur)
		return Lease{}, fmt.Errorf("mmapstore: acquire %s: %w", o, err)
	}
	return s.adopt(o, f, cur, s.now()) // Open may have taken long
}

// prepare is the locked part of acquireSlow before it asks the Opener. It
// drops stale idle mappings (returned in dead, to close) and then either
// returns a lease on a mapping that turned out to be servable, or the
// current mapping cur (nil if none), marked as being revalidated unless it
// is stale.
func (s *Store) prepare(o object.Object, now time.Duration) (l Lease, cur *mapping, dead []*mapping, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Lease{}, nil, nil, fmt.Errorf("mmapstore: acquire %s: %w", o, ErrClosed)
	}
	if now >= s.sweepAt {
		dead = s.sweepLocked(now)
	}
	cur = s.maps[o]
	switch {
	case cur == nil:
	case s.servableLocked(cur, now):
		s.hits++
		return s.leaseLocked(cur), nil, dead, nil
	case cur.file.Stale() && cur.refs == 0:
		// Let go of the stale copy first: the Opener may then reuse its space.
		dead = append(dead, s.retireLocked(cur))
		cur = nil
	case cur.file.Stale():
		// Leased: it keeps serving its leases; Open gives the copy to move to.
	default:
		cur.checking = true // others keep using cur meanwhile
	}
	s.opens++
	return Lease{}, cur, dead, nil
}

// endCheck clears cur's revalidation mark, if cur is not nil, after a
// failed Open: the next Acquire due for revalidation tries again.
func (s *Store) endCheck(cur *mapping) {
	if cur == nil {
		return
	}
	s.mu.Lock()
	cur.checking = false
	s.mu.Unlock()
}

// adopt leases the copy f that the Opener returned for o at time now: the
// installed mapping if it already maps f's copy (f is closed), a new
// mapping of f otherwise. cur is the mapping prepare marked, if any.
func (s *Store) adopt(o object.Object, f File, cur *mapping, now time.Duration) (Lease, error) {
	s.mu.Lock()
	if c := s.maps[o]; c != nil && reusable(c, f) {
		l := s.reuseLocked(c, cur, f, now)
		s.mu.Unlock()
		s.closeFile(f)
		return l, nil
	}
	s.mu.Unlock()
	m, err := newMapping(s, o, f)
	if err != nil {
		s.closeFile(f)
		s.endCheck(cur)
		return Lease{}, fmt.Errorf("mmapstore: acquire %s: %w", o, err)
	}
	return s.install(m, cur, now)
}

// reusable reports whether installed mapping c can stand in for the copy f
// the Opener just returned: it maps that copy, and is not staler than f.
func reusable(c *mapping, f File) bool {
	return c.sameCopy(f) && (f.Stale() || !c.file.Stale())
}

// reuseLocked leases c in place of the copy f, which the caller closes,
// and restarts c's revalidation interval.
func (s *Store) reuseLocked(c, cur *mapping, f File, now time.Duration) Lease {
	if cur != nil {
		cur.checking = false
	}
	c.checkAt = s.deadline(now)
	if f.Stale() {
		c.staleOK = true // the Opener has nothing fresher
	}
	s.hits++
	return s.leaseLocked(c)
}

// install makes m the mapping of its key, replacing (and, if idle, taking
// down) the mapping it supersedes, and leases it. If another Acquire
// installed the same copy meanwhile, m is discarded in its favour.
func (s *Store) install(m, cur *mapping, now time.Duration) (Lease, error) {
	s.mu.Lock()
	if cur != nil {
		cur.checking = false
	}
	if s.closed {
		s.mu.Unlock()
		s.closeLogged([]*mapping{m})
		return Lease{}, fmt.Errorf("mmapstore: acquire %s: %w", m.key, ErrClosed)
	}
	if c := s.maps[m.key]; c != nil && reusable(c, m.file) {
		l := s.reuseLocked(c, nil, m.file, now)
		s.mu.Unlock()
		s.closeLogged([]*mapping{m})
		return l, nil
	}
	var dead []*mapping
	if c := s.maps[m.key]; c != nil {
		if d := s.retireLocked(c); d != nil {
			dead = append(dead, d)
		}
	}
	m.installed, m.checkAt, m.staleOK = true, s.deadline(now), m.staleAtOpen
	s.maps[m.key] = m
	s.live++
	s.liveBytes += int64(len(m.data))
	s.mapsMade++
	l := s.leaseLocked(m)
	s.mu.Unlock()
	s.closeLogged(dead)
	return l, nil
}

// deadline returns when a mapping checked at now is due for revalidation.
func (s *Store) deadline(now time.Duration) time.Duration {
	if s.revalidate < 0 {
		return math.MaxInt64
	}
	return now + s.revalidate
}
