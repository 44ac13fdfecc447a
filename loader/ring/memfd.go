package ring

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"golang.org/x/sys/unix"
)

// Seals is what a ring's memfd is sealed with: its size can never change
// (no SIGBUS from a truncated mapping) and the seals are final.
const Seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// ErrClosed means the Ring is closed.
var ErrClosed = errors.New("ring: closed")

// Ring is a ring of Slots slots of SlotBytes bytes each in one anonymous
// memory file (memfd_create, MFD_CLOEXEC|MFD_ALLOW_SEALING), sized once,
// sealed with Seals and mapped shared, read-write. The file has no name
// in any file system (no /dev/shm entry, no size limit but memory's), and
// its memory is freed when the last descriptor and mapping go. Slot
// returns memory of the mapping: valid until Close. Close is safe for
// concurrent use with itself; the rest is immutable.
type Ring struct {
	fd        int
	mem       []byte
	slots     int
	slotBytes int

	closeOnce sync.Once
	closeErr  error
}

// New creates a ring of slots slots of slotBytes bytes (a multiple of
// Align). name shows in /proc/PID/fd (memfd:NAME); it need not be unique.
func New(name string, slots, slotBytes int) (*Ring, error) {
	if slots <= 0 || slotBytes <= 0 || slotBytes%Align != 0 || slotBytes > math.MaxInt64/slots {
		return nil, fmt.Errorf("%w: %d slots of %d bytes", ErrLayout, slots, slotBytes)
	}
	size := slots * slotBytes
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("ring: memfd_create: %w", err)
	}
	fail := func(op string, err error) (*Ring, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("ring: %s of a %d-byte ring: %w", op, size, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("ftruncate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, Seals); err != nil {
		return fail("seal", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	return &Ring{fd: fd, mem: mem, slots: slots, slotBytes: slotBytes}, nil
}

// Fd returns the memfd, to pass to the client; it stays the Ring's.
func (r *Ring) Fd() int { return r.fd }

// Bytes returns the whole mapping.
func (r *Ring) Bytes() []byte { return r.mem }

// Slots returns the number of slots.
func (r *Ring) Slots() int { return r.slots }

// SlotBytes returns the size of a slot.
func (r *Ring) SlotBytes() int { return r.slotBytes }

// Slot returns slot i's memory.
func (r *Ring) Slot(i int) []byte {
	return r.mem[i*r.slotBytes : (i+1)*r.slotBytes : (i+1)*r.slotBytes]
}

// Close unmaps the ring and closes its memfd. The memory lives on while a
// client maps it. Calling Close again returns the same.
func (r *Ring) Close() error {
	r.closeOnce.Do(func() {
		r.closeErr = errors.Join(unix.Munmap(r.mem), unix.Close(r.fd))
		if r.closeErr != nil {
			r.closeErr = fmt.Errorf("ring: close: %w", r.closeErr)
		}
	})
	return r.closeErr
}

// Mapping is a client's mapping of a ring received over the data socket.
type Mapping struct {
	mem       []byte
	slotBytes int
}

// Map maps the ring fd holds (ringBytes bytes, slots of slotBytes), shared
// and read-write, after checking that the file is that large and sealed
// against shrinking (so reading it never faults). fd stays the caller's
// (it may be closed once mapped).
func Map(fd int, ringBytes, slotBytes uint64) (*Mapping, error) {
	if slotBytes == 0 || ringBytes == 0 || ringBytes%slotBytes != 0 || ringBytes > math.MaxInt64 {
		return nil, fmt.Errorf("%w: ring of %d bytes in slots of %d", ErrLayout, ringBytes, slotBytes)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("ring: fstat: %w", err)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	switch {
	case err != nil:
		return nil, fmt.Errorf("ring: get seals: %w", err)
	case seals&unix.F_SEAL_SHRINK == 0:
		return nil, fmt.Errorf("%w: the ring file is not sealed against shrinking", ErrLayout)
	case uint64(st.Size) < ringBytes:
		return nil, fmt.Errorf("%w: the ring file has %d bytes; want %d", ErrLayout, st.Size, ringBytes)
	}
	mem, err := unix.Mmap(fd, 0, int(ringBytes), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("ring: mmap: %w", err)
	}
	return &Mapping{mem: mem, slotBytes: int(slotBytes)}, nil
}

// Slot returns slot i's memory, nil if there is no slot i.
func (m *Mapping) Slot(i int) []byte {
	if i < 0 || i >= len(m.mem)/m.slotBytes {
		return nil
	}
	return m.mem[i*m.slotBytes : (i+1)*m.slotBytes : (i+1)*m.slotBytes]
}

// Bytes returns the whole mapping.
func (m *Mapping) Bytes() []byte { return m.mem }

// Unmap unmaps the ring; its slots must not be used afterwards.
func (m *Mapping) Unmap() error {
	if m.mem == nil {
		return nil
	}
	err := unix.Munmap(m.mem)
	m.mem = nil
	return err
}
