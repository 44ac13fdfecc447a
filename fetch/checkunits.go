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
//
// The object's CRC also says which of the values the reads gave each unit
// are right, when some combination of them is: the CRC of a concatenation
// is linear in each part's CRC (crc32cCombine), so the CRC the object
// would have with unit i holding another of its values is the current sum
// plus that value's difference shifted by the bytes after the unit. After
// a mismatch, solve tries every combination of the values seen (while
// they are few) and, if exactly one gives the object's CRC, the rounds
// after it re-read only the units whose bytes now in the destination are
// not that combination's: a unit read right once is not read again (where
// it could arrive corrupt), and a unit read wrong every time so far is
// read again however its reads agreed. Such a guided round after a cut one
// reads each run of units in one range (a range cut in two is two chances
// of a corruption); the next is cut elsewhere again, so a corruption tied
// to a position still moves. That outcome is a guide, never a verdict: the
// object is accepted only when the bytes in the destination have its CRC.

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
	// good is each unit's right CRC32C as the last solve found it; nil
	// until one found exactly one combination.
	good []uint32
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

// maxCombos bounds the combinations solve tries. Each is a 1 in 2^32
// chance of a false match, so they stay few, and together with the unique
// match solve asks for that keeps a wrong guide out of the question (and a
// wrong guide could only cost rounds: the object is still checked whole).
const maxCombos = 256

// solve looks for the one combination of the values the reads gave each
// unit whose object CRC is want, and records it as good. It reports
// whether it found exactly one; with none or several (or too many to try)
// good is left as it was.
func (c *checkUnits) solve(want uint32) bool {
	type choice struct {
		vals  []uint32 // the unit's distinct values, the current one first
		delta []uint32 // what each changes in the object's CRC
	}
	var units []int
	var choices []choice
	combos := 1
	var after int64 = c.size
	for i, u := range c.cur {
		_, n := c.span(i)
		after -= n
		vals := []uint32{u}
		for _, v := range c.seen[i] {
			if !slices.Contains(vals, v) {
				vals = append(vals, v)
			}
		}
		if len(vals) == 1 {
			continue
		}
		if combos *= len(vals); combos > maxCombos {
			return false
		}
		ch := choice{vals: vals, delta: make([]uint32, len(vals))}
		for k, v := range vals {
			ch.delta[k] = crc32cShift(u^v, after)
		}
		units, choices = append(units, i), append(choices, ch)
	}
	target := c.sum() ^ want // the XOR of the chosen deltas must be this
	var found []int          // the matching combination: an index into each unit's values
	pick := make([]int, len(units))
	for n := 0; n < combos; n++ {
		var d uint32
		for j, k := range pick {
			d ^= choices[j].delta[k]
		}
		if d == target {
			if found != nil {
				return false // two combinations match: no guide
			}
			found = slices.Clone(pick)
		}
		for j := range pick { // the next combination
			if pick[j]++; pick[j] < len(choices[j].vals) {
				break
			}
			pick[j] = 0
		}
	}
	if found == nil {
		return false
	}
	c.good = slices.Clone(c.cur)
	for j, i := range units {
		c.good[i] = choices[j].vals[found[j]]
	}
	return true
}

// wrong returns, after a solve that found the good values, the units
// whose bytes in the destination are not those, in order.
func (c *checkUnits) wrong() []int {
	var out []int
	for i, u := range c.cur {
		if u != c.good[i] {
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
