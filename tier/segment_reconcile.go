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
	adopt    []found  // packed objects whose bytes are in place
	drop     []string // keys of packed records whose segment is missing, short or overlapped
	segments int      // segments kept
	removed  int      // segment files removed: no record names an object in them
	gaps     int      // regions freed that no record names (a group cut short by a crash, evictions not yet freed)
}

// reconcileSegments checks the packed records against the segment files
// and sets up c.segs: a record whose segment is missing, too short, or
// whose region overlaps another's is dropped; a segment no record names is
// removed; the space of a segment that no record names (objects written
// but never committed before a crash, objects evicted whose space was not
// yet freed) is punched out. Every segment found is sealed: new objects go
// to a new one.
func (c *Cache) reconcileSegments(packed []*entry) (segmentReconcile, error) {
	var r segmentReconcile
	dir := c.base.lay.seg
	des, err := os.ReadDir(dir)
	if err != nil {
		return r, fmt.Errorf("tier: reconcile segments: %w", err)
	}
	files := make(map[uint64]*segment)
	sizes := make(map[uint64]int64)
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
		next = max(next, num+1)
	}
	c.segs = newSegments(c.base.lay, c.base.bsize, next)
	bySeg := make(map[uint64][]*entry)
	for _, e := range packed {
		bySeg[e.rec.seg] = append(bySeg[e.rec.seg], e)
	}
	for num, es := range bySeg {
		seg := files[num]
		slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.rec.off, b.rec.off) })
		var end int64 // of the last region kept
		var kept []region
		for _, e := range es {
			n := roundUp(e.rec.size, c.segs.align)
			if seg == nil || e.rec.off+e.rec.size > sizes[num] || e.rec.off < end || e.rec.off%c.segs.align != 0 {
				r.drop = append(r.drop, e.key)
				continue
			}
			e.seg = seg
			seg.objects++
			end = e.rec.off + n
			kept = append(kept, region{e.rec.off, n})
			r.adopt = append(r.adopt, found{e: e, blocks: n, ident: fileIdent{ino: seg.ino}})
		}
		if seg != nil && len(kept) > 0 {
			gaps, err := punchGaps(seg, kept, sizes[num])
			if err != nil {
				c.cfg.log.Warn("tier: free unused space in a segment", "segment", seg.path, "err", err)
			}
			r.gaps += gaps
		}
	}
	for num, seg := range files {
		if seg.objects > 0 {
			r.segments++
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

// punchGaps frees the space of seg (of size bytes) outside kept, sorted
// regions, and returns how many gaps it punched.
func punchGaps(seg *segment, kept []region, size int64) (int, error) {
	var gaps []region
	var at int64
	for _, k := range kept {
		if k.off > at {
			gaps = append(gaps, region{at, k.off - at})
		}
		at = k.off + k.n
	}
	if size > at {
		gaps = append(gaps, region{at, size - at})
	}
	if len(gaps) == 0 {
		return 0, nil
	}
	return len(gaps), punchRegions(seg, gaps)
}
