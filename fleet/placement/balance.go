package placement

import (
	"cmp"
	"slices"
)

// DefaultSlack is the load bound Balance is usually given: no member owns
// more than 1.05 times its weighted share of a key set's bytes (plus, at
// most, one key).
const DefaultSlack = 0.05

// Item is a key with its size in bytes: one object, or one chunk of a
// large object, of a dataset a node has listed.
type Item struct {
	Key  Key
	Size int64
}

// Assignment is a balanced placement of one set of keys over a table's
// members (see Table.Balance). It is immutable and safe for concurrent
// use.
type Assignment struct {
	table *Table
	owner map[uint64]int32 // key hash -> member index
	bytes []int64          // owned bytes per member index
	moved int              // keys owned by another member than their rendezvous owner
}

// Balance assigns each item to one member so that no member owns more
// than (1+slack) times its weighted share of the items' bytes, staying as
// close to rendezvous hashing as that bound allows: items are taken
// largest first (then by key hash, so every node computing it over the
// same items and table gets the same answer), and each goes to the
// best-ranked member it fits under its bound, or, where none has room
// left (a key larger than the slack), to the one it overfills least.
//
// Rendezvous hashing alone balances a key set only as well as the law of
// large numbers allows: 192 keys over 3 members leave the busiest owner
// with 36-40 % of the bytes instead of 33 %, and 48 keys one with 46 %.
// A dataset's cold read takes as long as its busiest owner's share of
// the origin link, and a pooled cache of N·B ≥ D bytes holds the dataset
// only if no owner's share exceeds its B. Bounded loads fix both for the
// keys a node knows to belong together; the price is that an owner now
// depends on the set, not on the key alone (every node must balance the
// same set to agree), and that a join or leave moves somewhat more than
// the rendezvous minimum. Duplicate keys count once; items of
// non-positive size count as one byte.
func (t *Table) Balance(items []Item, slack float64) *Assignment {
	type job struct {
		h    uint64
		size int64
	}
	jobs := make([]job, 0, len(items))
	seen := make(map[uint64]bool, len(items))
	var total int64
	for _, it := range items {
		h := it.Key.hash()
		if seen[h] {
			continue
		}
		seen[h] = true
		jobs = append(jobs, job{h: h, size: max(it.Size, 1)})
		total += max(it.Size, 1)
	}
	slices.SortFunc(jobs, func(a, b job) int {
		if c := cmp.Compare(b.size, a.size); c != 0 {
			return c
		}
		return cmp.Compare(a.h, b.h)
	})
	slack = max(slack, 0)
	bound := make([]float64, len(t.members))
	for i, m := range t.members {
		bound[i] = (1 + slack) * m.Weight / t.total * float64(total)
	}
	a := &Assignment{table: t, owner: make(map[uint64]int32, len(jobs)), bytes: make([]int64, len(t.members))}
	for _, j := range jobs {
		pick := t.ownerOf(j.h)
		if float64(a.bytes[pick]+j.size) > bound[pick] {
			pick = a.spill(j.h, j.size, bound)
			a.moved++
		}
		a.owner[j.h] = int32(pick)
		a.bytes[pick] += j.size
	}
	return a
}

// spill returns the member for a key whose rendezvous owner has no room:
// the best-ranked one with room, or the one it overfills least.
func (a *Assignment) spill(h uint64, size int64, bound []float64) int {
	t := a.table
	ranked := make([]int, len(t.members))
	score := make([]float64, len(t.members))
	for i := range ranked {
		ranked[i], score[i] = i, t.rank(h, i)
	}
	slices.SortFunc(ranked, func(x, y int) int { return cmp.Compare(score[y], score[x]) })
	for _, i := range ranked[1:] {
		if float64(a.bytes[i]+size) <= bound[i] {
			return i
		}
	}
	pick, best := -1, 0.0
	for _, i := range ranked {
		if r := float64(a.bytes[i]+size) / bound[i]; pick < 0 || r < best {
			pick, best = i, r
		}
	}
	return pick
}

// Table returns the table the assignment was computed over.
func (a *Assignment) Table() *Table { return a.table }

// Len returns how many keys the assignment places.
func (a *Assignment) Len() int { return len(a.owner) }

// Moved returns how many keys the bound gave to another member than
// their rendezvous owner.
func (a *Assignment) Moved() int { return a.moved }

// Owner returns the member key is assigned to, and false for a key
// outside the assigned set.
func (a *Assignment) Owner(key Key) (Member, bool) {
	i, ok := a.owner[key.hash()]
	if !ok {
		return Member{}, false
	}
	return a.table.members[i], true
}

// OwnedBytes returns the bytes of the set assigned to the member named
// name (0 for a name not in the table).
func (a *Assignment) OwnedBytes(name string) int64 {
	i, ok := a.table.index[name]
	if !ok {
		return 0
	}
	return a.bytes[i]
}

// Owners returns the first k members for key: its assigned owner first
// (for a key in the set), then the others in rendezvous order. For a key
// outside the set it is Table.Owners.
func (a *Assignment) Owners(key Key, k int) []Member {
	i, ok := a.owner[key.hash()]
	if !ok || k <= 0 {
		return a.table.Owners(key, k)
	}
	ranked := a.table.Owners(key, min(k, len(a.table.members)))
	out := make([]Member, 0, len(ranked))
	out = append(out, a.table.members[i])
	for _, m := range ranked {
		if len(out) == cap(out) {
			break
		}
		if m.Name != a.table.members[i].Name {
			out = append(out, m)
		}
	}
	return out
}
