package mmapstore

import (
	"errors"
	"fmt"
	"time"
)

// Stats is a snapshot of a Store's state and counters.
type Stats struct {
	// Mappings is the number of mappings not yet taken down, leased or
	// idle, including superseded ones that leases still use.
	Mappings int
	// MappedBytes is their total size.
	MappedBytes int64
	// IdleMappings and IdleBytes describe the mappings kept with no lease.
	IdleMappings int
	IdleBytes    int64
	// Leases is the number of outstanding leases.
	Leases int
	// Hits counts Acquires served by an existing mapping.
	Hits int64
	// Opens counts calls of Opener.Open.
	Opens int64
	// Maps and Unmaps count mappings installed and taken down.
	Maps, Unmaps int64
}

// Stats returns a snapshot of the Store's state and counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Mappings: s.live, MappedBytes: s.liveBytes, IdleMappings: s.idle.n, IdleBytes: s.idle.bytes,
		Leases: s.leases, Hits: s.hits, Opens: s.opens, Maps: s.mapsMade, Unmaps: s.mapsClosed}
}

// Trim takes down every idle mapping, closing its File so the cache may
// evict the object; leased mappings are untouched. It returns errors from
// unmapping and closing.
func (s *Store) Trim() error {
	s.mu.Lock()
	var dead []*mapping
	for s.idle.back != nil {
		dead = append(dead, s.retireLocked(s.idle.back))
	}
	s.mu.Unlock()
	return closeAll(dead)
}

// Close closes the Store: later Acquires fail with ErrClosed and idle
// mappings are taken down now. Close does not wait for leases: each
// outstanding lease keeps its mapping, and its File open, until it is
// released, and the last Release takes the mapping down. Close the Store
// and release every lease before closing the Opener's cache. A second
// Close returns an error matching ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("mmapstore: close: %w", ErrClosed)
	}
	s.closed = true
	var dead []*mapping
	for _, m := range s.maps {
		if d := s.retireLocked(m); d != nil {
			dead = append(dead, d)
		}
	}
	s.mu.Unlock()
	return closeAll(dead)
}

// retireLocked takes m out of the index. If it is idle it is forgotten and
// returned, for the caller to close after unlocking; otherwise its last
// Release takes it down.
func (s *Store) retireLocked(m *mapping) *mapping {
	if m.installed {
		delete(s.maps, m.key)
		m.installed = false
	}
	m.checking = false
	if m.refs > 0 {
		return nil
	}
	s.idle.remove(m)
	return s.forgetLocked(m)
}

// forgetLocked accounts for m being taken down, and returns it.
func (s *Store) forgetLocked(m *mapping) *mapping {
	s.live--
	s.liveBytes -= int64(len(m.data))
	s.mapsClosed++
	return m
}

// trimIdleLocked retires the least recently released idle mappings until
// the idle bounds hold, appending them to dead.
func (s *Store) trimIdleLocked(dead []*mapping) []*mapping {
	for s.idle.n > s.maxIdle || s.idle.bytes > s.maxIdleBytes {
		dead = append(dead, s.retireLocked(s.idle.back))
	}
	return dead
}

// sweepLocked retires the idle mappings whose File went stale, so they do
// not hold a copy the cache has let go of, and schedules the next sweep.
func (s *Store) sweepLocked(now time.Duration) []*mapping {
	s.sweepAt = now + s.sweepEvery
	var dead []*mapping
	for m := s.idle.back; m != nil; {
		prev := m.prev
		if m.file.Stale() {
			dead = append(dead, s.retireLocked(m))
		}
		m = prev
	}
	return dead
}

// closeAll closes the mappings in dead, never under Store.mu.
func closeAll(dead []*mapping) error {
	var errs []error
	for _, m := range dead {
		if err := m.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// closeLogged closes the mappings in dead and logs errors, for callers
// whose own result does not depend on them.
func (s *Store) closeLogged(dead []*mapping) {
	if err := closeAll(dead); err != nil {
		s.log.Warn("mmapstore: taking a mapping down", "err", err)
	}
}

// closeFile closes a File the Store no longer needs (a duplicate of a copy
// already mapped, or one whose file vanished), logging an error: a
// read-only file has no data to lose.
func (s *Store) closeFile(f File) {
	if err := f.Close(); err != nil {
		s.log.Warn("mmapstore: closing a file", "object", f.Attrs().Object.String(), "err", err)
	}
}

// checkInvariants returns an error describing each violated invariant of
// the index, the idle list and the counters. Tests call it.
func (s *Store) checkInvariants() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	idle := 0
	var idleBytes int64
	for m := s.idle.front; m != nil; m = m.next {
		idle++
		idleBytes += int64(len(m.data))
		if !m.inIdle || m.refs != 0 || !m.installed || s.maps[m.key] != m {
			errs = append(errs, fmt.Errorf("idle %s: inIdle %t refs %d installed %t", m.key, m.inIdle, m.refs, m.installed))
		}
	}
	if idle != s.idle.n || idleBytes != s.idle.bytes {
		errs = append(errs, fmt.Errorf("idle list has %d mappings of %d bytes; counted %d of %d",
			idle, idleBytes, s.idle.n, s.idle.bytes))
	}
	for k, m := range s.maps {
		if m.key != k || !m.installed || m.refs < 0 || (m.refs == 0) != m.inIdle {
			errs = append(errs, fmt.Errorf("mapping %s under %s: installed %t refs %d inIdle %t",
				m.key, k, m.installed, m.refs, m.inIdle))
		}
	}
	if s.live < len(s.maps) || s.leases < 0 || int64(s.live) != s.mapsMade-s.mapsClosed {
		errs = append(errs, fmt.Errorf("live %d, installed %d, leases %d, made %d, closed %d",
			s.live, len(s.maps), s.leases, s.mapsMade, s.mapsClosed))
	}
	return errors.Join(errs...)
}
