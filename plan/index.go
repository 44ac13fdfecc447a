package plan

import (
	"cmp"
	"iter"
	"math"
	"slices"
	"sort"
)

// Never is the distance to the next use of a key that no announced plan
// will use again.
const Never = math.MaxInt

// Index holds announced plans and answers how far away the next use of a
// key is. The zero Index is not usable; call NewIndex. An Index is not safe
// for concurrent use.
type Index[K comparable] struct {
	plans map[string]*sequence[K]
	uses  map[K][]occurrence[K] // where each key occurs, one entry per plan holding it
	// repeated counts the keys used more than once (in one plan or
	// several): while none is, Upcoming need not remember what it yielded.
	repeated int
}

// sequence is one announced plan.
type sequence[K comparable] struct {
	keys   []K
	cursor int // position of the next key the plan's reader will use
}

// occurrence lists the positions of a key in one plan, ascending.
type occurrence[K comparable] struct {
	plan *sequence[K]
	pos  []int
}

// NewIndex returns an empty Index.
func NewIndex[K comparable]() *Index[K] {
	return &Index[K]{plans: make(map[string]*sequence[K]), uses: make(map[K][]occurrence[K])}
}

// Announce stores plan id: its reader will use keys in this order, starting
// at position 0. It replaces a plan with the same id. A key may occur more
// than once (several epochs in one plan). keys is copied.
func (x *Index[K]) Announce(id string, keys []K) {
	x.Remove(id)
	s := &sequence[K]{keys: slices.Clone(keys)}
	x.plans[id] = s
	pos := make(map[K][]int)
	for i, k := range s.keys {
		pos[k] = append(pos[k], i)
	}
	for k, p := range pos {
		occ := x.uses[k]
		was := repeats(occ)
		occ = append(occ, occurrence[K]{plan: s, pos: p})
		x.uses[k] = occ
		if !was && repeats(occ) {
			x.repeated++
		}
	}
}

// repeats reports whether occ holds more than one use of its key.
func repeats[K comparable](occ []occurrence[K]) bool {
	return len(occ) > 1 || len(occ) == 1 && len(occ[0].pos) > 1
}

// Remove forgets plan id and reports whether it was announced.
func (x *Index[K]) Remove(id string) bool {
	s, ok := x.plans[id]
	if !ok {
		return false
	}
	delete(x.plans, id)
	for _, k := range s.keys {
		occ := x.uses[k]
		i := slices.IndexFunc(occ, func(o occurrence[K]) bool { return o.plan == s })
		if i < 0 {
			continue // a repeated key, already removed
		}
		was := repeats(occ)
		occ = slices.Delete(occ, i, i+1)
		if was && !repeats(occ) {
			x.repeated--
		}
		if len(occ) == 0 {
			delete(x.uses, k)
		} else {
			x.uses[k] = occ
		}
	}
	return true
}

// Advance moves plan id's cursor to pos, the position of the next key its
// reader will use (clamped to [0, length]); keys before it are in the past.
// Cursors may move backwards (a reader that restarted). It reports whether
// the plan is announced.
func (x *Index[K]) Advance(id string, pos int) bool {
	s, ok := x.plans[id]
	if !ok {
		return false
	}
	s.cursor = min(max(pos, 0), len(s.keys))
	return true
}

// Cursor returns plan id's cursor and length, and whether it is announced.
func (x *Index[K]) Cursor(id string) (cursor, length int, ok bool) {
	s, ok := x.plans[id]
	if !ok {
		return 0, 0, false
	}
	return s.cursor, len(s.keys), true
}

// Repeats reports whether some key is used more than once (in one plan or
// several). While none is, a single plan's upcoming keys are its keys from
// the cursor on, in order.
func (x *Index[K]) Repeats() bool { return x.repeated > 0 }

// Plans returns the number of announced plans.
func (x *Index[K]) Plans() int { return len(x.plans) }

// NextUse returns the distance from its plan's cursor to the next use of k,
// the smallest over all plans (0: k is the next key some reader will use),
// or Never if no plan will use k again.
func (x *Index[K]) NextUse(k K) int {
	best := Never
	for _, o := range x.uses[k] {
		c := o.plan.cursor
		if i := sort.SearchInts(o.pos, c); i < len(o.pos) {
			best = min(best, o.pos[i]-c)
		}
	}
	return best
}

// Upcoming yields the keys the plans will use from their cursors on, each
// once, in order of next use (ties: plans in id order), with that distance.
// The Index must not change during the iteration.
func (x *Index[K]) Upcoming() iter.Seq2[K, int] {
	return func(yield func(K, int) bool) {
		ids := make([]string, 0, len(x.plans))
		for id := range x.plans {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		var seen map[K]struct{} // nil while no key repeats
		if x.repeated > 0 {
			seen = make(map[K]struct{})
		}
		for d := 0; ; d++ {
			more := false
			for _, id := range ids {
				s := x.plans[id]
				i := s.cursor + d
				if i >= len(s.keys) {
					continue
				}
				more = true
				k := s.keys[i]
				if seen != nil {
					if _, ok := seen[k]; ok {
						continue
					}
					seen[k] = struct{}{}
				}
				if !yield(k, d) {
					return
				}
			}
			if !more {
				return
			}
		}
	}
}

// Candidate is a resident entry the cache may evict. Callers never offer
// entries that are leased, open or pinned.
type Candidate[K comparable] struct {
	// Key identifies the entry.
	Key K
	// Size is the space evicting it frees, in bytes.
	Size int64
	// LastUse orders entries by recency: larger is more recent (a clock
	// reading or a counter).
	LastUse int64
	// Tag is the caller's own reference to the entry (an index into its
	// slice of entries, say); Order keeps it with the candidate.
	Tag int
	// Due marks an entry that its reader has yet to read although its
	// plan's position has passed it (a reader may announce positions ahead
	// of its reads). It counts as needed next (Next 0) when no plan lists
	// it ahead of a reader.
	Due bool
	// Keep marks an entry to evict after every other, planned or not (a
	// copy this node owns for its fleet: a copy held for this node's own
	// readers can be read again from its owner, one the fleet keeps only
	// here cannot). Without Keep entries the order is the plan's alone.
	Keep bool
	// Next is the distance to the entry's next use; Order fills it in.
	Next int
}

// next returns c's distance to its next use (see Candidate.Due).
func (x *Index[K]) next(c Candidate[K]) int {
	n := x.NextUse(c.Key)
	if n == Never && c.Due {
		return 0
	}
	return n
}

// Order fills in each candidate's Next and sorts cands best victim first:
// entries without Keep before those with it, and within each, entries no
// plan will use again, least recently used first; then planned entries,
// farthest next use first (ties: least recently used first, then by
// position in cands, so the order is deterministic).
func (x *Index[K]) Order(cands []Candidate[K]) {
	for i := range cands {
		cands[i].Next = x.next(cands[i])
	}
	slices.SortStableFunc(cands, func(a, b Candidate[K]) int {
		if a.Keep != b.Keep {
			return boolCmp(a.Keep, b.Keep)
		}
		if c := cmp.Compare(b.Next, a.Next); c != 0 {
			return c
		}
		return cmp.Compare(a.LastUse, b.LastUse)
	})
}

// Victims returns how many of ordered (sorted by Order) to evict, from the
// front, to free need bytes, and the bytes they free. Only candidates whose
// next use is farther than farther qualify: pass the distance of the entry
// being brought in so that nothing needed sooner is displaced, or -1 to
// accept any. If they cannot free need bytes, Victims returns every
// candidate before the first that does not qualify, and freed < need; the
// caller decides whether evicting them is worth it.
func Victims[K comparable](ordered []Candidate[K], need int64, farther int) (n int, freed int64) {
	for n < len(ordered) && freed < need && ordered[n].Next > farther {
		freed += ordered[n].Size
		n++
	}
	return n, freed
}
