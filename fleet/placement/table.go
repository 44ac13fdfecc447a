package placement

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Errors returned by [New], wrapped with the offending member's name.
var (
	// ErrNoMembers reports an empty member set.
	ErrNoMembers = errors.New("placement: no members")
	// ErrEmptyName reports a member without a name.
	ErrEmptyName = errors.New("placement: empty member name")
	// ErrDuplicateMember reports two members with the same name.
	ErrDuplicateMember = errors.New("placement: duplicate member")
	// ErrBadWeight reports a weight that is not positive and finite, or
	// weights whose sum is not finite.
	ErrBadWeight = errors.New("placement: weight must be positive and finite")
)

// Member is one agent of a fleet as placement sees it.
type Member struct {
	// Name identifies the member; it seeds the member's hash, so it must
	// be stable across restarts (a node name, not an address that changes).
	Name string
	// Weight is the member's share of ownership, its cache budget in bytes:
	// a member owns about Weight / (sum of weights) of all keys. It must be
	// positive and finite.
	Weight float64
}

// Table ranks the members of a fleet for each key by weighted rendezvous
// hashing. It is immutable after [New] and safe for concurrent use; a
// membership change builds a new Table.
type Table struct {
	members []Member // sorted by name; an index is a position here
	seeds   []uint64 // xxhash64 of each member's name
	invW    []float64
	total   float64 // sum of weights
	index   map[string]int
	uniform bool // all weights equal: rank by draw alone
}

// New returns the table for members, in any order: the table, and so every
// owner, depends only on the set. It fails with [ErrNoMembers],
// [ErrEmptyName], [ErrDuplicateMember] or [ErrBadWeight]. New does not retain
// members.
func New(members []Member) (*Table, error) {
	if len(members) == 0 {
		return nil, ErrNoMembers
	}
	t := &Table{
		members: slices.Clone(members),
		seeds:   make([]uint64, len(members)),
		invW:    make([]float64, len(members)),
		index:   make(map[string]int, len(members)),
		uniform: true,
	}
	slices.SortFunc(t.members, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	for i, m := range t.members {
		switch {
		case m.Name == "":
			return nil, fmt.Errorf("placement: member %d: %w", i, ErrEmptyName)
		case i > 0 && t.members[i-1].Name == m.Name:
			return nil, fmt.Errorf("placement: member %q: %w", m.Name, ErrDuplicateMember)
		case !(m.Weight > 0) || math.IsInf(m.Weight, 1):
			return nil, fmt.Errorf("placement: member %q weight %v: %w", m.Name, m.Weight, ErrBadWeight)
		}
		t.seeds[i] = xxhash.Sum64String(m.Name)
		t.invW[i] = 1 / m.Weight
		t.total += m.Weight
		t.index[m.Name] = i
		t.uniform = t.uniform && m.Weight == t.members[0].Weight
	}
	if math.IsInf(t.total, 1) {
		return nil, fmt.Errorf("placement: total weight of %d members: %w", len(members), ErrBadWeight)
	}
	return t, nil
}

// Len returns the number of members.
func (t *Table) Len() int { return len(t.members) }

// Members returns a copy of the members, sorted by name. Indices returned by
// [Table.OwnerIndex] are positions in this slice.
func (t *Table) Members() []Member { return slices.Clone(t.members) }

// Member returns the member at index i of [Table.Members]. It panics if i is
// out of range.
func (t *Table) Member(i int) Member { return t.members[i] }

// Index returns the index of the member named name, and whether there is one.
func (t *Table) Index(name string) (int, bool) {
	i, ok := t.index[name]
	return i, ok
}

// OwnedShare returns the fraction of keys the member named name is expected
// to own: its weight over the sum of weights. It is 0 for a name that is not
// a member.
func (t *Table) OwnedShare(name string) float64 {
	i, ok := t.index[name]
	if !ok {
		return 0
	}
	return t.members[i].Weight / t.total
}

// Owner returns the member that owns key.
func (t *Table) Owner(key Key) Member { return t.members[t.ownerOf(key.hash())] }

// OwnerIndex returns the index in [Table.Members] of the member that owns
// key.
func (t *Table) OwnerIndex(key Key) int { return t.ownerOf(key.hash()) }

// Owners returns the first k members in key's ranking, best first: Owners(key,
// k)[0] is Owner(key), and each next member is the owner if all before it
// refuse or leave. k larger than [Table.Len] returns every member; k <= 0
// returns nil.
func (t *Table) Owners(key Key, k int) []Member {
	if k <= 0 {
		return nil
	}
	idx := t.ranked(key.hash(), min(k, len(t.members)))
	out := make([]Member, len(idx))
	for j, i := range idx {
		out[j] = t.members[i]
	}
	return out
}

// rank returns member i's rank value for a key hash: higher is better. With
// equal weights it is the draw itself, an order-preserving stand-in for the
// score; otherwise it is the score -w/ln(u), negated and inverted into
// -(-ln(u)/w) to multiply by a precomputed 1/w instead of dividing.
func (t *Table) rank(h uint64, i int) float64 {
	x := draw(h, t.seeds[i])
	if t.uniform {
		return float64(x) // exact: x < 2^52
	}
	return -float64(negLnUnit(x) * t.invW[i])
}

// ownerOf returns the index of the highest-ranked member for key hash h;
// ties go to the lower index (the name first in order).
func (t *Table) ownerOf(h uint64) int {
	best := 0
	if t.uniform {
		bx := draw(h, t.seeds[0])
		for i := 1; i < len(t.seeds); i++ {
			if x := draw(h, t.seeds[i]); x > bx {
				best, bx = i, x
			}
		}
		return best
	}
	br := t.rank(h, 0)
	for i := 1; i < len(t.seeds); i++ {
		if r := t.rank(h, i); r > br {
			best, br = i, r
		}
	}
	return best
}

// ranked returns the indices of the k highest-ranked members for key hash
// h, best first, ties to the lower index. It keeps a sorted top-k, O(N*k).
func (t *Table) ranked(h uint64, k int) []int {
	if k <= 0 {
		return nil
	}
	idx := make([]int, 0, k)
	val := make([]float64, 0, k)
	for i := range t.seeds {
		r := t.rank(h, i)
		if len(idx) == k && r <= val[k-1] {
			continue
		}
		// Insert after every equal or better value, so ties keep index order.
		j := len(idx)
		for j > 0 && val[j-1] < r {
			j--
		}
		if len(idx) < k {
			idx, val = append(idx, 0), append(val, 0)
		}
		copy(idx[j+1:], idx[j:])
		copy(val[j+1:], val[j:])
		idx[j], val[j] = i, r
	}
	return idx
}
