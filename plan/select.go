package plan

import (
	"cmp"
	"slices"
)

// Select fills in every candidate's Next and moves the victims that free
// need bytes to the front of cands, in eviction order: the same victims,
// in the same order, as Order followed by Victims, for candidates whose
// LastUse values are distinct. Only candidates whose next use is farther
// than farther qualify (-1: any), and Keep candidates only once every
// other candidate qualified and was taken. It returns how many it moved
// and the bytes they free (less than need if those cannot free it; then
// all of them are moved). The rest of cands is left in no particular
// order.
//
// Select does not sort everything: it partitions out the unplanned
// candidates and sorts those by LastUse, then takes the planned ones from
// a heap, farthest next use first, only as many as needed: O(n log u + k
// log n) for u unplanned candidates and k planned victims.
func (x *Index[K]) Select(cands []Candidate[K], need int64, farther int) (n int, freed int64) {
	for i := range cands {
		cands[i].Next = x.next(cands[i])
	}
	if need <= 0 {
		return 0, 0
	}
	// Copies kept for the fleet go after every other, planned or not.
	k := partition(cands, func(c Candidate[K]) bool { return !c.Keep })
	n, freed = selectIn(cands[:k], need, farther)
	if freed >= need || n < k { // done, or stopped at one needed sooner
		return n, freed
	}
	n2, freed2 := selectIn(cands[k:], need-freed, farther)
	return n + n2, freed + freed2
}

// selectIn is Select over candidates of one Keep value whose Next is set.
func selectIn[K comparable](cands []Candidate[K], need int64, farther int) (n int, freed int64) {
	// Unplanned first, then planned and qualifying, then the rest.
	never := partition(cands, func(c Candidate[K]) bool { return c.Next == Never })
	rest := never + partition(cands[never:], func(c Candidate[K]) bool { return c.Next > farther })
	unplanned := cands[:never]
	slices.SortFunc(unplanned, func(a, b Candidate[K]) int { return cmp.Compare(a.LastUse, b.LastUse) })
	for n < len(unplanned) && freed < need {
		freed += unplanned[n].Size
		n++
	}
	if freed >= need {
		return n, freed
	}
	h := cands[never:rest]
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(h, i)
	}
	end := len(h)
	for end > 0 && freed < need {
		freed += h[0].Size
		end--
		h[0], h[end] = h[end], h[0]
		down(h[:end], 0)
	}
	// The victims are h[end:], last one first: move them to the front.
	k := len(h) - end
	victims := make([]Candidate[K], k)
	for i := range victims {
		victims[i] = h[len(h)-1-i]
	}
	copy(h[k:], h[:end])
	copy(h, victims)
	return never + k, freed
}

// partition moves the elements satisfying keep to the front (not
// preserving order) and returns their number.
func partition[T any](s []T, keep func(T) bool) int {
	i := 0
	for j := range s {
		if keep(s[j]) {
			s[i], s[j] = s[j], s[i]
			i++
		}
	}
	return i
}

// before reports whether a is evicted before b among planned candidates:
// farther next use first, then least recently used.
func before[K comparable](a, b Candidate[K]) bool {
	if a.Next != b.Next {
		return a.Next > b.Next
	}
	return a.LastUse < b.LastUse
}

// down restores the heap order (before at the root) below i.
func down[K comparable](h []Candidate[K], i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && before(h[r], h[l]) {
			m = r
		}
		if !before(h[m], h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// boolCmp orders false before true.
func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
