package mmapstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/edsrzf/mmap-go"

	"github.com/cacheagent/cacheagent/internal/memhint"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/mmapstore/npy"
	"github.com/cacheagent/cacheagent/mmapstore/safetensors"
	"github.com/cacheagent/cacheagent/object"
)

// mapping is one read-only mapping of one File, shared by every lease on
// it.
type mapping struct {
	// Immutable after newMapping.
	s     *Store
	key   object.Object // the key it was acquired under
	file  File
	path  string // file.Path()
	off   int64  // file.Offset()
	attrs object.Attrs
	data  []byte // the mapping; empty (not mapped) for a zero-length file
	// staleAtOpen records that the File was already stale when opened (the
	// Opener had nothing better), so staleness alone does not make every
	// Acquire open it again.
	staleAtOpen bool
	array       func() (array.Array, error)       // parses data once
	tensors     func() (*safetensors.File, error) // parses data once
	populate    func()                            // maps data's pages in, once

	// Guarded by Store.mu.
	refs      int           // outstanding leases
	staleOK   bool          // serve although stale: the Opener had nothing fresher
	installed bool          // in Store.maps under key
	checkAt   time.Duration // Store clock time when Acquire next asks the Opener
	checking  bool          // an Acquire is asking the Opener now
	// prev and next link the mapping into Store.idle while refs == 0 and
	// installed; inIdle says it is linked.
	prev, next *mapping
	inIdle     bool
}

// newMapping maps f's file read-only. On error f is left open.
func newMapping(s *Store, key object.Object, f File) (*mapping, error) {
	data, err := mapFile(f)
	if err != nil {
		return nil, err
	}
	m := &mapping{s: s, key: key, file: f, path: f.Path(), off: f.Offset(), attrs: f.Attrs(), data: data, staleAtOpen: f.Stale()}
	m.array = sync.OnceValues(m.parseArray)
	m.tensors = sync.OnceValues(m.parseTensors)
	m.populate = sync.OnceFunc(func() { memhint.Pages(m.data) })
	return m, nil
}

// mapFile maps the f.Size() bytes at f.Offset() of f's file read-only and
// shared, after checking that the file holds them (a shorter file would
// fault on access). A zero-length file is
// not mapped: the result is an empty slice.
func mapFile(f File) ([]byte, error) {
	size := f.Size()
	if size == 0 {
		return []byte{}, nil
	}
	if size < 0 || uint64(size) > math.MaxInt {
		return nil, fmt.Errorf("mmapstore: map %s: size %d cannot be mapped", f.Attrs().Object, size)
	}
	fd, err := os.Open(f.Path())
	if err != nil {
		return nil, fmt.Errorf("mmapstore: map %s: %w", f.Attrs().Object, err)
	}
	defer fd.Close() // the mapping keeps the file's pages after the fd closes
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("mmapstore: map %s: %w", f.Attrs().Object, err)
	}
	off := f.Offset()
	if off < 0 || st.Size() < off+size { // a packed object's file holds others too: it may be longer
		return nil, fmt.Errorf("mmapstore: map %s: file %s has %d bytes; the object has %d at %d",
			f.Attrs().Object, f.Path(), st.Size(), size, off)
	}
	b, err := mmap.MapRegion(fd, int(size), mmap.RDONLY, 0, off)
	if err != nil {
		return nil, fmt.Errorf("mmapstore: map %s: %w", f.Attrs().Object, err)
	}
	return b, nil
}

// close unmaps m and closes its File. It runs once, after m's last lease
// is gone and m was taken out of the Store, never under Store.mu.
func (m *mapping) close() error {
	var uerr error
	if len(m.data) > 0 {
		// m.data stays set (it is immutable); no lease can reach it now.
		mm := mmap.MMap(m.data)
		if err := mm.Unmap(); err != nil {
			uerr = fmt.Errorf("mmapstore: unmap %s: %w", m.attrs.Object, err)
		}
	}
	if err := m.file.Close(); err != nil {
		return errors.Join(uerr, fmt.Errorf("mmapstore: close %s: %w", m.attrs.Object, err))
	}
	return uerr
}

// sameCopy reports whether m maps the copy that f holds.
func (m *mapping) sameCopy(f File) bool {
	return m.path == f.Path() && m.off == f.Offset() && m.attrs.Generation == f.Attrs().Generation &&
		int64(len(m.data)) == f.Size()
}

// Format is the file format of an object, as Detect sees it.
type Format uint8

const (
	// Unknown is any other format.
	Unknown Format = iota
	// NPY is a NumPy .npy file.
	NPY
	// Safetensors is a safetensors file.
	Safetensors
)

// String returns "npy", "safetensors" or "unknown".
func (f Format) String() string {
	switch f {
	case NPY:
		return "npy"
	case Safetensors:
		return "safetensors"
	}
	return "unknown"
}

// npyMagic starts every .npy file.
var npyMagic = []byte("\x93NUMPY")

// Detect returns the format of an object named name with contents b: by
// content first (the npy magic string; a safetensors header length that
// fits in b followed by '{'), then by name suffix (.npy, .safetensors). It
// does not validate the file: parsing does.
func Detect(name string, b []byte) Format {
	switch {
	case bytes.HasPrefix(b, npyMagic):
		return NPY
	case len(b) > 8 && b[8] == '{' && binary.LittleEndian.Uint64(b) <= uint64(len(b)-8):
		return Safetensors
	case strings.HasSuffix(name, ".npy"):
		return NPY
	case strings.HasSuffix(name, ".safetensors"):
		return Safetensors
	}
	return Unknown
}

// parseArray parses m's bytes as one array (.npy).
func (m *mapping) parseArray() (array.Array, error) {
	if f := Detect(m.attrs.Name, m.data); f != NPY {
		return array.Array{}, fmt.Errorf("mmapstore: array of %s: %w: not .npy (looks like %s)",
			m.attrs.Object, ErrFormat, f)
	}
	a, err := npy.Parse(m.data)
	if err != nil {
		return array.Array{}, fmt.Errorf("mmapstore: array of %s: %w", m.attrs.Object, err)
	}
	return a, nil
}

// parseTensors parses m's bytes as a safetensors file.
func (m *mapping) parseTensors() (*safetensors.File, error) {
	f, err := safetensors.Parse(m.data)
	if err != nil {
		return nil, fmt.Errorf("mmapstore: tensors of %s: %w", m.attrs.Object, err)
	}
	return f, nil
}

// idleList is an intrusive doubly-linked list of idle mappings, most
// recently released at the front. Linking never allocates. Guarded by
// Store.mu.
type idleList struct {
	front, back *mapping
	n           int
	bytes       int64
}

// pushFront links m at the front.
func (l *idleList) pushFront(m *mapping) {
	m.prev, m.next, m.inIdle = nil, l.front, true
	if l.front != nil {
		l.front.prev = m
	} else {
		l.back = m
	}
	l.front = m
	l.n++
	l.bytes += int64(len(m.data))
}

// remove unlinks m if it is linked.
func (l *idleList) remove(m *mapping) {
	if !m.inIdle {
		return
	}
	if m.prev != nil {
		m.prev.next = m.next
	} else {
		l.front = m.next
	}
	if m.next != nil {
		m.next.prev = m.prev
	} else {
		l.back = m.prev
	}
	m.prev, m.next, m.inIdle = nil, nil, false
	l.n--
	l.bytes -= int64(len(m.data))
}
