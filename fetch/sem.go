package fetch

import (
	"context"
	"errors"
	"sync"

	"github.com/cacheagent/cacheagent/object"
)

// connSem is the process-wide connection budget: a counting semaphore whose
// freed slots go to the most urgent waiter.
//
// golang.org/x/sync/semaphore.Weighted grants strictly FIFO and has no notion
// of priority, so a demand read would queue behind every warm prefetch; hence
// this one. A waiter's priority is read from its object.Urgency at grant time, not
// at enqueue time, so raising a download's object.Urgency while it waits takes
// effect at the next grant. Among waiters of equal level the one with the
// lowest order (the download that started first) wins, then the one that
// queued first.
//
// The grant scans all waiters: O(waiters) per grant. Fetch keeps at most one
// waiter per download in the queue, so the scan is over downloads in flight,
// not slices.
type connSem struct {
	mu sync.Mutex // protects everything below
	// limit is the number of slots; used may exceed it after a shrink until
	// enough holders release.
	limit, used int
	// waiters are queued Acquire calls in no particular order.
	// INVARIANT: len(waiters) > 0 ⇒ used ≥ limit (a free slot is never idle
	// while someone waits).
	waiters []*semWaiter
	seq     uint64 // source of semWaiter.seq
	// onEnqueue, if set (tests only, before use), is called with mu held
	// whenever a waiter is queued.
	onEnqueue func()
}

// semWaiter is one queued Acquire.
type semWaiter struct {
	u     *object.Urgency
	order uint64        // the download's start ticket: FIFO by download
	seq   uint64        // enqueue order: FIFO within a download
	ready chan struct{} // closed when granted
	// granted is set with connSem.mu held, before ready is closed.
	granted bool
}

// errSemLimit is returned by newConnSem and setLimit for a limit below 1.
var errSemLimit = errors.New("fetch: connection budget must be at least 1")

// newConnSem returns a semaphore with limit slots.
func newConnSem(limit int) (*connSem, error) {
	if limit < 1 {
		return nil, errSemLimit
	}
	return &connSem{limit: limit}, nil
}

// acquire takes one slot, waiting while none is free. It returns ctx's error,
// holding nothing, if ctx ends first.
func (s *connSem) acquire(ctx context.Context, u *object.Urgency, order uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := s.enqueue(u, order)
	if w == nil {
		return nil
	}
	return s.wait(ctx, w)
}

// enqueue takes a free slot and returns nil, or queues and returns a waiter
// to pass to wait.
func (s *connSem) enqueue(u *object.Urgency, order uint64) *semWaiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used < s.limit {
		s.used++
		return nil
	}
	s.seq++
	w := &semWaiter{u: u, order: order, seq: s.seq, ready: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	if s.onEnqueue != nil {
		s.onEnqueue()
	}
	return w
}

// wait blocks until w is granted or ctx ends. On ctx's end it dequeues w, or,
// if w was granted meanwhile, hands the slot on, so no slot leaks and no
// slot is taken under a finished ctx.
func (s *connSem) wait(ctx context.Context, w *semWaiter) error {
	select {
	case <-w.ready:
		if ctx.Err() == nil {
			return nil
		}
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.granted {
		s.used--
		s.grantLocked()
	} else {
		s.removeLocked(w)
	}
	return ctx.Err()
}

// release returns one slot and grants it to the most urgent waiter.
func (s *connSem) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used--
	s.grantLocked()
}

// setLimit changes the number of slots. Growing grants waiters at once;
// shrinking takes effect as holders release.
func (s *connSem) setLimit(n int) error {
	if n < 1 {
		return errSemLimit
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = n
	s.grantLocked()
	return nil
}

// tryAcquire takes a slot if one is free and no one waits for it (by the
// invariant, no one does while a slot is free).
func (s *connSem) tryAcquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiters) > 0 || s.used >= s.limit {
		return false
	}
	s.used++
	return true
}

// idle reports whether a slot released now would go unused: no one waits,
// and the budget has not shrunk below the slots in use.
func (s *connSem) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters) == 0 && s.used <= s.limit
}

// counts returns the number of slots, the slots in use and the number of
// waiters.
func (s *connSem) counts() (limit, used, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit, s.used, len(s.waiters)
}

// grantLocked hands free slots to waiters, most urgent first.
func (s *connSem) grantLocked() {
	for s.used < s.limit && len(s.waiters) > 0 {
		i := s.bestLocked()
		w := s.waiters[i]
		s.waiters[i] = s.waiters[len(s.waiters)-1]
		s.waiters[len(s.waiters)-1] = nil
		s.waiters = s.waiters[:len(s.waiters)-1]
		s.used++
		w.granted = true
		close(w.ready)
	}
}

// bestLocked returns the index of the waiter to serve next: highest current
// level, then lowest order, then lowest seq.
func (s *connSem) bestLocked() int {
	best, bestLevel := 0, s.waiters[0].u.Level()
	for i, w := range s.waiters[1:] {
		lv := w.u.Level()
		b := s.waiters[best]
		if lv > bestLevel || lv == bestLevel && (w.order < b.order || w.order == b.order && w.seq < b.seq) {
			best, bestLevel = i+1, lv
		}
	}
	return best
}

// removeLocked drops w from the queue.
func (s *connSem) removeLocked(w *semWaiter) {
	for i, x := range s.waiters {
		if x == w {
			last := len(s.waiters) - 1
			s.waiters[i] = s.waiters[last]
			s.waiters[last] = nil
			s.waiters = s.waiters[:last]
			return
		}
	}
}
