package mmapstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/mmapstore/safetensors"
	"github.com/cacheagent/cacheagent/object"
)

// Lease is a reference to a read-only mapping of one cached object. It is a
// small value: copies refer to the same lease, and the first Release of any
// copy ends it; later ones return ErrReleased and change nothing. The zero
// Lease is released. Methods are safe for concurrent use, but releasing a
// lease while another goroutine still reads its bytes is a bug.
type Lease struct {
	m   *mapping
	sl  *slot
	seq uint64 // sl.seq when the lease was taken
}

// slot identifies one outstanding lease. Release advances seq, so a stale
// copy of a released Lease no longer matches even after the slot is reused
// for a new lease. Slots are recycled through Store.free, which keeps
// Acquire free of allocations.
type slot struct {
	seq atomic.Uint64
}

// valid reports whether l has not been released.
func (l Lease) valid() bool {
	return l.sl != nil && l.sl.seq.Load() == l.seq
}

// Bytes returns the object's bytes: the read-only mapping, or an empty
// slice for a zero-length object. They are valid until the lease is
// released and must not be modified (a write is a fatal fault). Bytes
// returns nil for a released lease.
func (l Lease) Bytes() []byte {
	if !l.valid() {
		return nil
	}
	return l.m.data
}

// Attrs returns the attributes of the mapped generation; the zero Attrs
// for a released lease.
func (l Lease) Attrs() object.Attrs {
	if !l.valid() {
		return object.Attrs{}
	}
	return l.m.attrs
}

// Array returns the object parsed as a .npy array (recognised by its magic
// string, or by a .npy name when the content is not recognised; anything
// else fails with ErrFormat). The array is parsed once per mapping and
// shared by all its leases, so calling Array on every Acquire is cheap and
// does not allocate. Its data aliases the mapping: valid until Release,
// never to be modified. Parse errors wrap npy's sentinels (npy.ErrHeader,
// npy.ErrTruncated, …).
func (l Lease) Array() (array.Array, error) {
	if !l.valid() {
		return array.Array{}, l.releasedError("array of")
	}
	return l.m.array()
}

// Tensors returns the object parsed as a safetensors file, parsed once per
// mapping and shared by all its leases; the File and its arrays must not be
// modified and are valid until Release. Parse errors wrap safetensors'
// sentinels (safetensors.ErrHeader, …).
func (l Lease) Tensors() (*safetensors.File, error) {
	if !l.valid() {
		return nil, l.releasedError("tensors of")
	}
	return l.m.tensors()
}

// Populate maps every page of the object into the process now, reading in
// any not in memory, so that reading the bytes afterwards takes no page
// faults (Linux 5.14 and later; elsewhere it does nothing). It is done once
// per mapping: later calls, on this lease or any other on the same mapping,
// return at once, while the pages stay mapped for the mapping's life unless
// the kernel reclaims them under memory pressure (a read then faults them
// back in). A reader about to touch most of an object, as the loader's
// gather does, calls it first; it does nothing on a released lease.
func (l Lease) Populate() {
	if l.valid() {
		l.m.populate()
	}
}

// Release ends the lease. When it was the mapping's last and the mapping is
// no longer wanted (see the package documentation), the mapping is unmapped
// and its File closed, and errors doing so are returned. Releasing a lease
// again returns an error matching ErrReleased and does nothing else.
func (l Lease) Release() error {
	if l.sl == nil || !l.sl.seq.CompareAndSwap(l.seq, l.seq+1) {
		return l.releasedError("release")
	}
	return l.m.s.release(l.m, l.sl)
}

// releasedError reports the use of a released lease in operation op.
func (l Lease) releasedError(op string) error {
	if l.m == nil {
		return fmt.Errorf("mmapstore: %s the zero Lease: %w", op, ErrReleased)
	}
	return fmt.Errorf("mmapstore: %s %s: %w", op, l.m.attrs.Object, ErrReleased)
}

// View acquires o, calls fn with its bytes and releases the lease. The
// bytes are valid only during fn and must not be modified or retained.
// fn's error is returned, joined with any error releasing the lease.
func (s *Store) View(ctx context.Context, o object.Object, fn func(b []byte) error) error {
	l, err := s.Acquire(ctx, o)
	if err != nil {
		return err
	}
	ferr := fn(l.Bytes())
	return errors.Join(ferr, l.Release())
}

// leaseLocked takes a lease on m.
func (s *Store) leaseLocked(m *mapping) Lease {
	if m.refs == 0 {
		s.idle.remove(m)
	}
	m.refs++
	s.leases++
	var sl *slot
	if n := len(s.free); n > 0 {
		sl = s.free[n-1]
		s.free[n-1] = nil
		s.free = s.free[:n-1]
	} else {
		sl = new(slot)
	}
	return Lease{m: m, sl: sl, seq: sl.seq.Load()}
}

// release drops a lease on m whose slot sl the caller has just advanced.
// The last lease of a mapping that is superseded, stale or over the idle
// bounds takes it down.
func (s *Store) release(m *mapping, sl *slot) error {
	var buf [4]*mapping // room for the common cases without allocating
	dead := buf[:0]
	s.mu.Lock()
	s.free = append(s.free, sl)
	s.leases--
	m.refs--
	if m.refs == 0 {
		switch {
		case !m.installed:
			dead = append(dead, s.forgetLocked(m))
		case m.file.Stale():
			dead = append(dead, s.retireLocked(m))
		default:
			s.idle.pushFront(m)
			dead = s.trimIdleLocked(dead)
		}
	}
	s.mu.Unlock()
	return closeAll(dead)
}
