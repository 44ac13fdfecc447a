package sampler

import "math/rand/v2"

// stream is the order of one epoch's samples over the whole dataset, before
// rank sharding: next returns the group and row at the next position and
// appends the events of that position to ev (opens of groups whose first
// row is here or that enter the window after it, closes of groups whose
// last row this was).
type stream interface {
	next(ev *[]Event) (group, row int)
	// order returns the groups in the order they open.
	order() []int
}

// nonEmpty returns the indexes of groups with rows.
func nonEmpty(rows []int) []int {
	out := make([]int, 0, len(rows))
	for g, n := range rows {
		if n > 0 {
			out = append(out, g)
		}
	}
	return out
}

// sequential reads groups in index order, rows in order.
type sequential struct {
	rows   []int
	groups []int // non-empty groups
	i, row int   // position: groups[i], row
}

// newSequential returns the sequential order of groups with rows rows.
func newSequential(rows []int) *sequential {
	return &sequential{rows: rows, groups: nonEmpty(rows)}
}

// order implements stream.
func (s *sequential) order() []int { return s.groups }

// next implements stream.
func (s *sequential) next(ev *[]Event) (int, int) {
	g, r := s.groups[s.i], s.row
	if r == 0 {
		*ev = append(*ev, Event{Open, g})
	}
	s.row++
	if s.row == s.rows[g] {
		*ev = append(*ev, Event{Close, g})
		s.i++
		s.row = 0
	}
	return g, r
}

// global reads a uniform permutation of every sample. Every group opens at
// the first position, in the order of first use, and closes after its last
// sample.
type global struct {
	groups groupIndex
	perm   []uint32
	first  []int // groups in order of first use
	left   []int // rows of each group not yet read
	i      int
}

// newGlobal returns epoch's permutation of every sample.
func newGlobal(rows []int, offsets []int64, seed uint64, epoch int) *global {
	n := offsets[len(offsets)-1]
	s := &global{groups: newGroupIndex(offsets), perm: make([]uint32, n), left: make([]int, len(rows))}
	for i := range s.perm {
		s.perm[i] = uint32(i)
	}
	shuffle(newPCG(seed, epoch, streamGlobal, 0), s.perm)
	copy(s.left, rows)
	seen := make([]bool, len(rows))
	want := len(nonEmpty(rows))
	for _, id := range s.perm {
		if len(s.first) == want {
			break // every group is in; the rest of the scan would find none
		}
		if g := s.groups.of(int64(id)); !seen[g] {
			seen[g] = true
			s.first = append(s.first, g)
		}
	}
	return s
}

// order implements stream.
func (s *global) order() []int { return s.first }

// next implements stream.
func (s *global) next(ev *[]Event) (int, int) {
	if s.i == 0 {
		for _, g := range s.first {
			*ev = append(*ev, Event{Open, g})
		}
	}
	id := int64(s.perm[s.i])
	s.i++
	g := s.groups.of(id)
	s.left[g]--
	if s.left[g] == 0 {
		*ev = append(*ev, Event{Close, g})
	}
	return g, int(id - s.groups.offsets[g])
}

// window reads the groups in a shuffled order through a window of up to
// size open groups: each position draws uniformly from the unread rows of
// the open groups; when a group's last row is drawn it closes and the next
// group in the order opens in its place. Each group's rows are read in a
// permutation of their own, drawn from the seed, epoch and group, so a
// uniform draw over the window's rows is a weighted draw of a group
// followed by that group's next row.
type window struct {
	rows   []int
	seed   uint64
	epoch  int
	shards []int // the shuffled order
	nextIn int   // index in shards of the next group to open
	slots  []slot
	left   fenwick // unread rows per slot
	total  int64   // sum of left
	draw   *rand.PCG
}

// slot is one open group of the window.
type slot struct {
	group int
	perm  []uint32 // the group's row order; reused across groups
	read  int
}

// newWindow returns epoch's shard-window order with a window of size shards.
func newWindow(rows []int, size int, seed uint64, epoch int) *window {
	return newWindowOver(rows, nonEmpty(rows), size, seed, epoch, 0)
}

// newWindowOver returns epoch's shard-window order of groups (groups with
// rows, in increasing order; it takes the slice) with a window of size
// shards; key keys the shard-order and window streams (Node mode passes
// the node, so that node 0 of one node reads as ShardWindow does).
func newWindowOver(rows, groups []int, size int, seed uint64, epoch int, key uint64) *window {
	w := &window{rows: rows, seed: seed, epoch: epoch, shards: groups,
		draw: newPCG(seed, epoch, streamWindow, key)}
	shuffle(newPCG(seed, epoch, streamShards, key), w.shards)
	n := min(size, len(w.shards))
	w.slots = make([]slot, n)
	w.left = make(fenwick, n)
	return w
}

// order implements stream.
func (w *window) order() []int { return w.shards }

// open puts the next group of the order into slot i.
func (w *window) open(i int, ev *[]Event) {
	g := w.shards[w.nextIn]
	w.nextIn++
	s := &w.slots[i]
	s.group, s.read = g, 0
	n := w.rows[g]
	if cap(s.perm) < n {
		s.perm = make([]uint32, n)
	}
	s.perm = s.perm[:n]
	for r := range s.perm {
		s.perm[r] = uint32(r)
	}
	shuffle(newPCG(w.seed, w.epoch, streamRows, uint64(g)), s.perm)
	w.left.add(i, int64(n))
	w.total += int64(n)
	*ev = append(*ev, Event{Open, g})
}

// next implements stream.
func (w *window) next(ev *[]Event) (int, int) {
	if w.nextIn == 0 {
		for i := range w.slots {
			w.open(i, ev)
		}
	}
	i := w.left.find(int64(below(w.draw, uint64(w.total))))
	s := &w.slots[i]
	g, r := s.group, int(s.perm[s.read])
	s.read++
	w.left.add(i, -1)
	w.total--
	if s.read == len(s.perm) {
		*ev = append(*ev, Event{Close, g})
		if w.nextIn < len(w.shards) {
			w.open(i, ev)
		}
	}
	return g, r
}

// groupIndex finds the group holding a sample id: a table of the group at
// the start of each run of 2^shift ids narrows the search to the groups
// that run overlaps, so that with shards of similar sizes the lookup is one
// table load and a comparison or two, not a binary search over every group.
type groupIndex struct {
	offsets []int64 // offsets[g] = first id of group g; offsets[len] = total
	shift   uint
	start   []int32 // start[b]: the group of id b<<shift; one more entry at the end
}

// maxIndexBuckets bounds a groupIndex's table (4 bytes an entry).
const maxIndexBuckets = 1 << 16

// newGroupIndex indexes offsets (as Offsets returns them; the total must
// be positive) with about four table entries per group.
func newGroupIndex(offsets []int64) groupIndex {
	groups, n := len(offsets)-1, offsets[len(offsets)-1]
	buckets := min(4*groups, maxIndexBuckets)
	var shift uint
	for n>>shift > int64(buckets) {
		shift++
	}
	x := groupIndex{offsets: offsets, shift: shift, start: make([]int32, (n-1)>>shift+2)}
	g := 0
	for b := range len(x.start) - 1 {
		for offsets[g+1] <= int64(b)<<shift {
			g++
		}
		x.start[b] = int32(g)
	}
	x.start[len(x.start)-1] = int32(groups - 1)
	return x
}

// of returns the group holding id, 0 <= id < total: the first group
// whose rows end past id (empty groups hold nothing).
func (x *groupIndex) of(id int64) int {
	b := id >> x.shift
	lo, hi := int(x.start[b]), int(x.start[b+1])
	for lo < hi { // the answer is in [lo, hi]
		mid := int(uint(lo+hi) >> 1)
		if x.offsets[mid+1] > id {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
