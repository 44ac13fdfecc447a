package tier

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// segmentReconcile is what reconcileSegments found and did.
type segmentReconcile struct {
	adopt    []found     // warm packed objects whose bytes are in place
	cold     []packedRec // cold ones (in c.cold), by segment and offset
	coldUsed int64       // the blocks of cold
	drop     []string    // keys of packed records whose segment is missing, short or overlapped
	segments int         // segments kept
	removed  int         // segment files removed: no record names an object in them
	dead     int64       // space in the kept segments that no record names (see segment.dead)
}

// packedRec is a packed record being checked: a warm entry's, or the cold
// record at pos.
type packedRec struct {
	seg               uint64
	off, size, access int64
	pos               uint64
	pinned            bool   // a cold record's set
	e                 *entry // nil for a cold record
}

// reconcileSegments checks the packed records (warm entries, and the records
// of cold) against the segment files and sets up c.segs: a record whose
// segment is missing, too short, or whose region overlaps another's is
// dropped (from cold too); a segment no record names is removed. Every
// segment found is sealed: new objects go to a new one, numbered past
// every segment and every record found, so a record whose deletion a
// crash lost never names a new segment's bytes.
//
// The space in a kept segment that no record names is not punched out: it
// may hold objects that the process before served and whose readers still
// map them (objects written but not yet committed at a crash, copies
// evicted while in use before a Close), and a mapping of a deleted file
// keeps its bytes where a punched region reads zeros. It is the segment's
// dead space, counted in the budget until the segment is deleted.
func (c *Cache) reconcileSegments(packed []*entry, cold coldLoad) (segmentReconcile, error) {
	var r segmentReconcile
	dir := c.base.lay.seg
	des, err := os.ReadDir(dir)
	if err != nil {
		return r, fmt.Errorf("tier: reconcile segments: %w", err)
	}
	files := make(map[uint64]*segment)
	sizes := make(map[uint64]int64)
	allocated := make(map[uint64]int64)
	var next uint64
	for _, de := range des {
		p := filepath.Join(dir, de.Name())
		num, ok := parseSegName(de.Name())
		var st syscall.Stat_t
		if ok {
			if err := syscall.Lstat(p, &st); err != nil {
				return r, fmt.Errorf("tier: reconcile segments: %w", err)
			}
			ok = st.Mode&syscall.S_IFMT == syscall.S_IFREG
		}
		if !ok { // not a segment: the directory holds nothing else
			if err := os.RemoveAll(p); err != nil {
				return r, fmt.Errorf("tier: reconcile segments: %w", err)
			}
			continue
		}
		files[num] = &segment{num: num, path: p, ino: st.Ino, sealed: true}
		sizes[num] = st.Size
		allocated[num] = st.Blocks * 512
		next = max(next, num+1)
	}
	// One slice, sorted by segment and offset: a million records cost one
	// allocation, not a map of growing slices.
	recs := make([]packedRec, 0, len(packed)+cold.unpinned.len()+cold.pinned.len())
	for _, e := range packed {
		recs = append(recs, packedRec{seg: e.rec.seg, off: e.rec.off, size: e.rec.size, e: e})
	}
	for _, pinned := range []bool{false, true} {
		cold.of(pinned).each(func(pos uint64, _, v []byte) bool {
			rec, _ := decodeRecord(v) // loadIndex decoded it before
			recs = append(recs, packedRec{seg: rec.seg, off: rec.off, size: rec.size, access: rec.access, pos: pos,
				pinned: pinned})
			return true
		})
	}
	slices.SortFunc(recs, func(a, b packedRec) int {
		if a.seg != b.seg {
			return cmp.Compare(a.seg, b.seg)
		}
		return cmp.Compare(a.off, b.off)
	})
	if len(recs) > 0 {
		next = max(next, recs[len(recs)-1].seg+1)
	}
	c.segs = newSegments(c.cfg.log, c.base.lay, c.base.bsize, next)
	r.cold = recs[:0] // the kept cold records, written over the slice as it is read
	for len(recs) > 0 {
		num := recs[0].seg
		k := 1
		for k < len(recs) && recs[k].seg == num {
			k++
		}
		ps := recs[:k]
		recs = recs[k:]
		seg := files[num]
		var end int64 // of the last region kept
		var keptBytes int64
		for _, p := range ps {
			n := roundUp(p.size, c.segs.align)
			if seg == nil || p.off+p.size > sizes[num] || p.off < end || p.off%c.segs.align != 0 {
				if p.e != nil {
					r.drop = append(r.drop, p.e.key)
				} else {
					_, k, _ := cold.of(p.pinned).parse(p.pos)
					r.drop = append(r.drop, string(k))
					cold.of(p.pinned).remove(p.pos)
				}
				continue
			}
			seg.objects++
			end = p.off + n
			keptBytes += n
			if p.e != nil {
				p.e.seg = seg
				r.adopt = append(r.adopt, found{e: p.e, blocks: n, ident: fileIdent{ino: seg.ino}})
			} else { // loadIndex froze only records whose blocks are n
				r.cold = append(r.cold, p)
				r.coldUsed += n
			}
		}
		if seg != nil && keptBytes > 0 {
			seg.dead = max(0, allocated[num]-keptBytes)
			r.dead += seg.dead
		}
	}
	for num, seg := range files {
		if seg.objects > 0 {
			r.segments++
			c.segs.byNum[num] = seg
			continue
		}
		if err := os.Remove(seg.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return r, fmt.Errorf("tier: reconcile segments: %w", err)
		}
		delete(files, num)
		r.removed++
	}
	return r, nil
}
