package fetch

import (
	"fmt"
	"hash/crc32"
	"slices"
)

// A CRC32C mismatch cannot be located from the object's CRC alone: GCS
// gives one checksum per object, none per range. So a mismatch re-reads the
// whole object once, and compares the two reads piecewise: the object is cut
// into check units (checkUnit bytes, at most SliceSize) whose CRCs are
// computed as bytes stream in, whatever ranges carried them. A unit whose
// bytes now in the destination have the CRC an earlier read of it had is
// confirmed (a corruption in transit does not repeat itself byte for byte);
// later rounds re-read only the units not confirmed. A corruption tied to a
// position in the response (a proxy that flips the middle byte of a body)
// would repeat itself whenever the same range is read, so every round after
// the first cuts its ranges elsewhere (shift), which moves such a
// corruption to other bytes: two reads agree only on what the source
// holds. Every unit confirmed and the object still wrong is not final while
// rounds remain (everything is read again); only a source that serves the
// same wrong bytes whatever the ranges fails every round.

// checkUnit is the largest check unit. A flipped byte costs one unit's
// re-read in the rounds after the second; more units cost 4 bytes each per
// read in memory, only after a mismatch.
const checkUnit = 1 << 20

// minUnits is how many check units an object is cut into at least, if
// they can be minUnit bytes or more: a small object (one range) is not one
// unit, so that a corruption in a later round costs only its unit, not a
// round lost.
const (
	minUnits = 8
	minUnit  = 4 << 10
)

// unitFor returns the check unit of an object of size bytes, at most
// limit, a multiple of minUnit.
func unitFor(size, limit int64) int64 {
	return min(limit, (max(size/minUnits, minUnit)+minUnit-1)/minUnit*minUnit)
}

// checkUnits tracks the CRC32C of each check unit of one download: of the
// bytes now in the destination, and of earlier reads. Fetch's goroutine
// owns it.
type checkUnits struct {
	size, unit int64
	rounds     int        // rounds recorded
	cur        []uint32   // CRC32C of each unit's bytes in the destination
	seen       [][]uint32 // CRC32Cs earlier reads of each unit gave
}

func newCheckUnits(size, unit int64) *checkUnits {
	n := (size + unit - 1) / unit
	return &checkUnits{size: size, unit: unit, cur: make([]uint32, n), seen: make([][]uint32, n)}
}

// span returns the byte range of unit i.
func (c *checkUnits) span(i int) (off, n int64) {
	off = int64(i) * c.unit
	return off, min(c.unit, c.size-off)
}

// all returns every unit's index.
func (c *checkUnits) all() []int {
	out := make([]int, len(c.cur))
	for i := range out {
		out[i] = i
	}
	return out
}

// ranges returns the ranges a round reads: the runs of consecutive units in
// todo (sorted), cut at multiples of sliceSize. A shift above 0 cuts each
// run elsewhere: its first range is shift/(shift+2) of a slice (of the
// run, if shorter), the next ones whole slices from there, so that the
// ranges of rounds with different shifts start and end at other bytes.
func (c *checkUnits) ranges(todo []int, sliceSize int64, shift int) []*slice {
	var out []*slice
	for j := 0; j < len(todo); {
		off, _ := c.span(todo[j])
		k := j
		for k+1 < len(todo) && todo[k+1] == todo[k]+1 {
			k++
		}
		last, n := c.span(todo[k])
		end := last + n
		var phase int64 // cuts at phase + m·sliceSize
		if shift > 0 {
			phase = off + max(1, min(sliceSize, end-off)*int64(shift)/int64(shift+2))
		}
		for off < end {
			next := min(end, phase+((off-phase)/sliceSize+1)*sliceSize)
			if off < phase {
				next = min(end, phase)
			}
			out = append(out, &slice{off: off, unit: c.unit, n: next - off})
			off = next
		}
		j = k + 1
	}
	return out
}

// record takes the unit CRCs of a round that read the units todo through
// the ranges rs (in object order, each complete): the previous CRC of each
// unit read goes to its history, the new one becomes current. It checks
// that the ranges cover exactly those units.
func (c *checkUnits) record(todo []int, rs []*slice) error {
	got := make(map[int]uint32, len(todo))
	covered := make(map[int]int64, len(todo))
	var next int64 = -1
	for _, s := range rs {
		if s.done != s.n || s.off < next {
			return fmt.Errorf("internal error: range at %d of %d bytes, %d written, after %d", s.off, s.n, s.done, next)
		}
		next = s.off + s.n
		for k, crc := range s.crcs {
			i := int(s.off/c.unit) + k
			uoff, un := c.span(i)
			n := min(uoff+un, s.off+s.n) - max(uoff, s.off)
			got[i] = crc32cCombine(got[i], crc, n)
			covered[i] += n
		}
	}
	for _, i := range todo {
		if _, n := c.span(i); covered[i] != n {
			return fmt.Errorf("internal error: ranges cover %d of the %d bytes of check unit %d", covered[i], n, i)
		}
	}
	if len(covered) != len(todo) {
		return fmt.Errorf("internal error: ranges cover %d check units, %d asked for", len(covered), len(todo))
	}
	for _, i := range todo {
		if c.rounds > 0 {
			c.seen[i] = append(c.seen[i], c.cur[i])
		}
		c.cur[i] = got[i]
	}
	c.rounds++
	return nil
}

// sum returns the CRC32C of the bytes in the destination.
func (c *checkUnits) sum() uint32 {
	var crc uint32
	for i, u := range c.cur {
		_, n := c.span(i)
		crc = crc32cCombine(crc, u, n)
	}
	return crc
}

// unconfirmed returns the units whose current CRC no earlier read of them
// gave, in order.
func (c *checkUnits) unconfirmed() []int {
	var out []int
	for i, u := range c.cur {
		if !slices.Contains(c.seen[i], u) {
			out = append(out, i)
		}
	}
	return out
}

// addCRC folds b, written at object offset off (the next bytes of s), into
// the CRCs of s's pieces: one per check unit s overlaps, in order.
func (s *slice) addCRC(off int64, b []byte) {
	unit := s.unit
	for len(b) > 0 {
		k := int(off/unit - s.off/unit)
		m := min(int64(len(b)), (off/unit+1)*unit-off)
		if k == len(s.crcs) {
			s.crcs = append(s.crcs, 0)
		}
		s.crcs[k] = crc32.Update(s.crcs[k], castagnoli, b[:m])
		b, off = b[m:], off+m
	}
}
