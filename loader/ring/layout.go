package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
)

// Slot layout. Every field is little-endian; offsets are from the slot's
// first byte. See the package documentation for the table.
const (
	// Magic is a slot header's first four bytes: "CRG1" read as a
	// little-endian uint32.
	Magic uint32 = 0x31475243
	// LayoutVersion is the version of the slot layout this package writes.
	LayoutVersion = 1
	// HeaderSize is the size of a slot header.
	HeaderSize = 64
	// DescSize is the size of one array descriptor; descriptors follow the
	// header.
	DescSize = 96
	// Align aligns slots and payloads (a page).
	Align = 4096
	// MaxDims is the most dimensions of an array (the batch dimension
	// included).
	MaxDims = 8
	// MaxArrays is the most arrays of a slot (the ids included).
	MaxArrays = 64
	// DTypeLen is the size of a descriptor's dtype field.
	DTypeLen = 12

	// HeaderStruct is the header as a Python struct format: magic,
	// version, arrays, seq, epoch, index, samples, state, slot_bytes.
	HeaderStruct = "<IHHQqqIIQ16x"
	// DescStruct is a descriptor as a Python struct format: name index,
	// ndim, dtype (NUL-padded numpy type string), shape[8], offset,
	// nbytes.
	DescStruct = "<HBx12s8qQQ"
)

// Offsets of the header's fields.
const (
	OffMagic     = 0  // uint32
	OffVersion   = 4  // uint16
	OffArrays    = 6  // uint16
	OffSeq       = 8  // uint64
	OffEpoch     = 16 // int64
	OffIndex     = 24 // int64
	OffSamples   = 32 // uint32
	OffState     = 36 // uint32
	OffSlotBytes = 40 // uint64
)

// Offsets of a descriptor's fields, from the descriptor's first byte
// (HeaderSize + i*DescSize for array i).
const (
	DescOffName   = 0  // uint16: index into the session's arrays
	DescOffNDim   = 2  // uint8
	DescOffDType  = 4  // [DTypeLen]byte
	DescOffShape  = 16 // [MaxDims]int64
	DescOffOffset = 80 // uint64: payload offset from the slot's start
	DescOffNBytes = 88 // uint64
)

// Slot states (the header's state field), written by the producer.
const (
	StateEmpty   = 0 // never filled
	StateFilling = 1 // the producer owns the slot
	StateReady   = 2 // handed to the consumer until it releases it
)

// ErrLayout means a slot or an array spec is malformed.
var ErrLayout = errors.New("ring: malformed slot layout")

// ArraySpec describes one array of every batch: its rows' element type and
// shape, fixed for the session.
type ArraySpec struct {
	// Name names the array ("ids" for the samples' ids).
	Name string `json:"name"`
	// DType is numpy's type string: "<f4", "|u1", "<i8"...
	DType string `json:"dtype"`
	// Row is the shape of one row (empty for a scalar per sample).
	Row []int `json:"row_shape"`
	// Bytes, if positive, makes the array variable-length: its payload
	// holds up to Bytes bytes, Row is ignored, and each slot's descriptor
	// gives the batch's shape (Layout.Encode cannot describe it; use
	// EncodeSlot).
	Bytes int `json:"bytes,omitempty"`
}

// RowBytes returns the size of one row, or an error for a malformed spec.
func (a ArraySpec) RowBytes() (int, error) {
	size, err := ItemSize(a.DType)
	if err != nil {
		return 0, err
	}
	if len(a.Row) > MaxDims-1 {
		return 0, fmt.Errorf("%w: array %q has %d row dimensions; at most %d", ErrLayout, a.Name, len(a.Row), MaxDims-1)
	}
	n, ok := product(size, a.Row)
	if !ok {
		return 0, fmt.Errorf("%w: array %q: row shape %v", ErrLayout, a.Name, a.Row)
	}
	return n, nil
}

// ItemSize returns the element size of a numpy type string: a byte order
// ('<', '>', '|' or '='), a kind (b, i, u, f, c or V) and the size in
// bytes, at most DTypeLen characters.
func ItemSize(dtype string) (int, error) {
	if len(dtype) < 3 || len(dtype) > DTypeLen {
		return 0, fmt.Errorf("%w: dtype %q", ErrLayout, dtype)
	}
	switch dtype[0] {
	case '<', '>', '|', '=':
	default:
		return 0, fmt.Errorf("%w: dtype %q has no byte order", ErrLayout, dtype)
	}
	switch dtype[1] {
	case 'b', 'i', 'u', 'f', 'c', 'V':
	default:
		return 0, fmt.Errorf("%w: dtype %q: unsupported kind", ErrLayout, dtype)
	}
	n, err := strconv.Atoi(dtype[2:])
	if err != nil || n <= 0 || n > 1<<20 || dtype[2] == '+' {
		return 0, fmt.Errorf("%w: dtype %q: item size", ErrLayout, dtype)
	}
	return n, nil
}

// product returns size × dims, false on a negative dimension or overflow
// past MaxInt32 × Align (no slot is that large).
func product(size int, dims []int) (int, bool) {
	n := uint64(size)
	for _, d := range dims {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64/2 {
			return 0, false
		}
		n = lo
	}
	return int(n), true
}

// alignUp rounds n up to a multiple of Align.
func alignUp(n int) int { return (n + Align - 1) &^ (Align - 1) }

// Layout places a session's arrays in a slot: the header, one descriptor
// per array, then each array's payload, Align-aligned, with room for
// MaxRows rows. It is immutable.
type Layout struct {
	// Arrays are the arrays, in descriptor order.
	Arrays []ArraySpec
	// MaxRows is the most samples of a batch.
	MaxRows int
	// Offsets are the payloads' offsets from the slot's start, and
	// Capacity their sizes (MaxRows rows).
	Offsets, Capacity []int
	// RowBytes are the arrays' row sizes.
	RowBytes []int
	// SlotBytes is the slot's size, a multiple of Align.
	SlotBytes int
}

// NewLayout lays out a slot for batches of up to maxRows samples of
// arrays. Each payload gets at least one page, so that every array has
// its own address.
func NewLayout(maxRows int, arrays []ArraySpec) (Layout, error) {
	switch {
	case maxRows <= 0 || maxRows > math.MaxUint32:
		return Layout{}, fmt.Errorf("%w: %d rows", ErrLayout, maxRows)
	case len(arrays) == 0 || len(arrays) > MaxArrays:
		return Layout{}, fmt.Errorf("%w: %d arrays; 1 to %d", ErrLayout, len(arrays), MaxArrays)
	}
	l := Layout{Arrays: arrays, MaxRows: maxRows}
	off := alignUp(HeaderSize + DescSize*len(arrays))
	for _, a := range arrays {
		rb, err := a.RowBytes()
		if err != nil {
			return Layout{}, err
		}
		n, ok := product(rb, []int{maxRows})
		if a.Bytes > 0 {
			n = a.Bytes
		}
		if !ok || n > math.MaxInt64/4-off {
			return Layout{}, fmt.Errorf("%w: array %q: %d rows of %d bytes", ErrLayout, a.Name, maxRows, rb)
		}
		capacity := alignUp(max(n, 1))
		l.Offsets, l.Capacity, l.RowBytes = append(l.Offsets, off), append(l.Capacity, capacity), append(l.RowBytes, rb)
		off += capacity
	}
	l.SlotBytes = off
	return l, nil
}

// Header is a slot's header.
type Header struct {
	Version  uint16
	Arrays   int
	Seq      uint64
	Epoch    int64
	Index    int64
	Samples  int
	State    uint32
	SlotSize uint64
}

// Desc describes one array of a filled slot.
type Desc struct {
	Name   int    // index into the session's arrays
	DType  string // numpy type string
	Shape  []int  // [samples, row shape...]
	Offset int    // from the slot's start
	NBytes int
}

// Encode writes the header and descriptors of a batch of samples rows
// into slot (len SlotBytes); the payloads are the caller's. h's Arrays,
// Samples, SlotSize and Version are set from l. Shapes gives the shape of
// each variable-length array (ArraySpec.Bytes), in order; the others'
// are [samples, Row...].
func (l Layout) Encode(slot []byte, h Header, samples int, shapes ...[]int) error {
	if len(slot) < l.SlotBytes || samples < 0 || samples > l.MaxRows {
		return fmt.Errorf("%w: %d samples in a slot of %d bytes (want ≤ %d samples, %d bytes)",
			ErrLayout, samples, len(slot), l.MaxRows, l.SlotBytes)
	}
	descs := make([]Desc, len(l.Arrays))
	for j, a := range l.Arrays {
		descs[j] = Desc{Name: j, DType: a.DType, Shape: append([]int{samples}, a.Row...), Offset: l.Offsets[j],
			NBytes: samples * l.RowBytes[j]}
		if a.Bytes <= 0 {
			continue
		}
		if len(shapes) == 0 {
			return fmt.Errorf("%w: no shape for variable-length array %q", ErrLayout, a.Name)
		}
		n, ok := product(l.RowBytes[j], shapes[0])
		if !ok || n > a.Bytes || len(shapes[0]) == 0 {
			return fmt.Errorf("%w: array %q: shape %v in %d bytes", ErrLayout, a.Name, shapes[0], a.Bytes)
		}
		descs[j].Shape, descs[j].NBytes, shapes = shapes[0], n, shapes[1:]
	}
	h.Version, h.Arrays, h.Samples, h.SlotSize = LayoutVersion, len(l.Arrays), samples, uint64(l.SlotBytes)
	return EncodeSlot(slot, h, descs)
}

// EncodeSlot writes h and descs at the start of slot. h.Arrays must be
// len(descs).
func EncodeSlot(slot []byte, h Header, descs []Desc) error {
	if h.Arrays != len(descs) || len(descs) > MaxArrays || len(slot) < HeaderSize+DescSize*len(descs) {
		return fmt.Errorf("%w: %d descriptors in %d bytes", ErrLayout, len(descs), len(slot))
	}
	le := binary.LittleEndian
	le.PutUint32(slot[OffMagic:], Magic)
	le.PutUint16(slot[OffVersion:], h.Version)
	le.PutUint16(slot[OffArrays:], uint16(h.Arrays))
	le.PutUint64(slot[OffSeq:], h.Seq)
	le.PutUint64(slot[OffEpoch:], uint64(h.Epoch))
	le.PutUint64(slot[OffIndex:], uint64(h.Index))
	le.PutUint32(slot[OffSamples:], uint32(h.Samples))
	le.PutUint32(slot[OffState:], h.State)
	le.PutUint64(slot[OffSlotBytes:], h.SlotSize)
	clear(slot[OffSlotBytes+8 : HeaderSize])
	for i, d := range descs {
		b := slot[HeaderSize+i*DescSize : HeaderSize+(i+1)*DescSize]
		if len(d.Shape) == 0 || len(d.Shape) > MaxDims || len(d.DType) > DTypeLen {
			return fmt.Errorf("%w: array %d: %d dimensions, dtype %q", ErrLayout, i, len(d.Shape), d.DType)
		}
		clear(b)
		le.PutUint16(b[DescOffName:], uint16(d.Name))
		b[DescOffNDim] = byte(len(d.Shape))
		copy(b[DescOffDType:DescOffDType+DTypeLen], d.DType)
		for k, n := range d.Shape {
			le.PutUint64(b[DescOffShape+8*k:], uint64(n))
		}
		le.PutUint64(b[DescOffOffset:], uint64(d.Offset))
		le.PutUint64(b[DescOffNBytes:], uint64(d.NBytes))
	}
	return nil
}

// SetState writes a slot header's state field.
func SetState(slot []byte, state uint32) { binary.LittleEndian.PutUint32(slot[OffState:], state) }

// Decode reads a slot's header and descriptors and checks them: the magic
// and version, at most MaxArrays arrays (and fewer than names, when names
// > 0, the session's number of arrays), each with a valid dtype, at most
// MaxDims non-negative dimensions whose product times the item size is
// NBytes, and a payload inside the slot. Malformed slots are errors
// wrapping ErrLayout; Decode never panics.
func Decode(slot []byte, names int) (Header, []Desc, error) {
	if len(slot) < HeaderSize {
		return Header{}, nil, fmt.Errorf("%w: %d bytes", ErrLayout, len(slot))
	}
	le := binary.LittleEndian
	if m := le.Uint32(slot[OffMagic:]); m != Magic {
		return Header{}, nil, fmt.Errorf("%w: magic %#x", ErrLayout, m)
	}
	h := Header{Version: le.Uint16(slot[OffVersion:]), Arrays: int(le.Uint16(slot[OffArrays:])),
		Seq: le.Uint64(slot[OffSeq:]), Epoch: int64(le.Uint64(slot[OffEpoch:])),
		Index: int64(le.Uint64(slot[OffIndex:])), Samples: int(le.Uint32(slot[OffSamples:])),
		State: le.Uint32(slot[OffState:]), SlotSize: le.Uint64(slot[OffSlotBytes:])}
	switch {
	case h.Version != LayoutVersion:
		return h, nil, fmt.Errorf("%w: layout version %d", ErrLayout, h.Version)
	case h.Arrays > MaxArrays || (names > 0 && h.Arrays > names):
		return h, nil, fmt.Errorf("%w: %d arrays", ErrLayout, h.Arrays)
	case h.SlotSize > uint64(len(slot)) || h.SlotSize < uint64(HeaderSize+DescSize*h.Arrays):
		return h, nil, fmt.Errorf("%w: slot of %d bytes in %d", ErrLayout, h.SlotSize, len(slot))
	}
	descs := make([]Desc, h.Arrays)
	for i := range descs {
		d, err := decodeDesc(slot[HeaderSize+i*DescSize:HeaderSize+(i+1)*DescSize], h.SlotSize, names)
		if err != nil {
			return h, nil, fmt.Errorf("array %d: %w", i, err)
		}
		descs[i] = d
	}
	return h, descs, nil
}

// decodeDesc reads and checks one descriptor of a slot of slotSize bytes.
func decodeDesc(b []byte, slotSize uint64, names int) (Desc, error) {
	le := binary.LittleEndian
	d := Desc{Name: int(le.Uint16(b[DescOffName:]))}
	ndim := int(b[DescOffNDim])
	dt := b[DescOffDType : DescOffDType+DTypeLen]
	n := 0
	for n < len(dt) && dt[n] != 0 {
		n++
	}
	d.DType = string(dt[:n])
	size, err := ItemSize(d.DType)
	switch {
	case err != nil:
		return d, err
	case names > 0 && d.Name >= names:
		return d, fmt.Errorf("%w: name index %d", ErrLayout, d.Name)
	case ndim == 0 || ndim > MaxDims:
		return d, fmt.Errorf("%w: %d dimensions", ErrLayout, ndim)
	}
	for k := range ndim {
		v := int64(le.Uint64(b[DescOffShape+8*k:]))
		if v < 0 || v > math.MaxInt32 {
			return d, fmt.Errorf("%w: dimension %d is %d", ErrLayout, k, v)
		}
		d.Shape = append(d.Shape, int(v))
	}
	off, nb := le.Uint64(b[DescOffOffset:]), le.Uint64(b[DescOffNBytes:])
	want, ok := product(size, d.Shape)
	switch {
	case off > slotSize || nb > slotSize-off:
		return d, fmt.Errorf("%w: payload [%d, +%d) outside a slot of %d bytes", ErrLayout, off, nb, slotSize)
	case !ok || uint64(want) != nb:
		return d, fmt.Errorf("%w: %d bytes for shape %v of %s", ErrLayout, nb, d.Shape, d.DType)
	}
	d.Offset, d.NBytes = int(off), int(nb)
	return d, nil
}
