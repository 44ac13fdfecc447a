package daemon

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cacheagent/cacheagent/fleet"
	"github.com/cacheagent/cacheagent/fleet/peer"
	"github.com/cacheagent/cacheagent/fleet/placement"
	"github.com/cacheagent/cacheagent/object"
)

// Bounds on the datasets fleetOwners balances: the most recent listings,
// up to this many keys in all (about 40 bytes each in the assignment).
const (
	maxBalancedSets = 64
	maxBalancedKeys = 4 << 20
)

// fleetOwners is peer.Owners over the fleet's current placement table,
// with the datasets this node has listed (prefetch jobs, pins) balanced:
// their keys' owners come from placement.Table.Balance over every such
// listing, so no member owns more than its bounded share of them; other
// keys are placed by rendezvous alone. Every node that lists the same
// dataset computes the same owners; a node that has not listed it places
// its keys by rendezvous, which costs a fill at another member, never a
// wrong byte.
type fleetOwners struct {
	f atomic.Pointer[fleet.Fleet]
	// balanced is the assignment over the current table (stale after a
	// membership change until rebalance; Owners then uses rendezvous).
	balanced atomic.Pointer[placement.Assignment]

	mu    sync.Mutex
	sets  map[string][]placement.Item // by dataset URI; guarded by mu
	order []string                    // dataset URIs, oldest first; guarded by mu

	// pref is the preferred holders of checkpoints (see prefer), an
	// immutable list swapped whole under prefMu.
	pref   atomic.Pointer[[]preferred]
	prefMu sync.Mutex
}

// Owners ranks key's owners, this node marked; a checkpoint's preferred
// holder (see prefer) comes right after the owner while it is live.
func (o *fleetOwners) Owners(key placement.Key) []peer.Candidate {
	f := o.f.Load()
	if f == nil {
		return nil
	}
	t := f.Table()
	var ms []placement.Member
	if a := o.balanced.Load(); a != nil && a.Table() == t {
		ms = a.Owners(key, fleetOwnersK)
	} else {
		ms = t.Owners(key, fleetOwnersK)
	}
	out := make([]peer.Candidate, 0, len(ms)+1)
	self := f.Name()
	for _, m := range ms {
		if m.Name == self {
			out = append(out, peer.Candidate{Name: m.Name, Self: true})
		} else if fm, ok := f.Member(m.Name); ok {
			out = append(out, peer.Candidate{Name: m.Name, Addr: fm.PeerAddr})
		}
	}
	// A checkpoint's saver holds its files: the owner fills from it (a
	// fill asks the members after the owner for what they hold), and the
	// others read from the owner, so each chunk leaves the saver about
	// once.
	if p, ok := o.preferredFor(key); ok && p != self && len(out) > 0 && out[0].Name != p {
		if fm, ok := f.Member(p); ok {
			out = slices.DeleteFunc(out, func(c peer.Candidate) bool { return c.Name == p })
			out = slices.Insert(out, 1, peer.Candidate{Name: p, Addr: fm.PeerAddr})
		}
	}
	return out[:min(len(out), fleetOwnersK)]
}

// register balances the keys of the dataset uri (objs, as src routes them)
// with the others listed before, and reports whether it could (false
// before the fleet starts; startFleet balances then). A new listing of uri
// replaces the old.
func (o *fleetOwners) register(src *peer.Source, uri string, objs []object.Attrs) bool {
	items := src.Items(objs)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sets == nil {
		o.sets = make(map[string][]placement.Item)
	}
	if i := slices.Index(o.order, uri); i >= 0 {
		o.order = slices.Delete(o.order, i, i+1)
	}
	o.sets[uri] = items
	o.order = append(o.order, uri)
	return o.rebalanceLocked()
}

// listed reports whether the dataset uri is among those balanced.
func (o *fleetOwners) listed(uri string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.sets[uri]
	return ok
}

// rebalance recomputes the assignment over the fleet's current table,
// and reports whether there was one to compute (a fleet, and a dataset
// listed).
func (o *fleetOwners) rebalance() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rebalanceLocked()
}

func (o *fleetOwners) rebalanceLocked() bool {
	f := o.f.Load()
	if f == nil || len(o.sets) == 0 {
		return false
	}
	n := 0
	for i := len(o.order) - 1; i >= 0; i-- { // the newest listings first
		n += len(o.sets[o.order[i]])
		if i < len(o.order)-maxBalancedSets || n > maxBalancedKeys {
			for _, u := range o.order[:i+1] {
				delete(o.sets, u)
			}
			o.order = append(o.order[:0], o.order[i+1:]...)
			break
		}
	}
	var items []placement.Item
	for _, u := range o.order {
		items = append(items, o.sets[u]...)
	}
	o.balanced.Store(f.Table().Balance(items, placement.DefaultSlack))
	return true
}

// interleave returns objs in the order a prefetch should read them: the
// first object of each owner, then the second of each, and so on (each
// owner's objects in listing order; a chunked object counts for its
// first chunk's owner). Every node that listed the dataset computes the
// same order, so every owner's link is busy from the start with the
// objects all nodes ask for first, instead of some owners waiting while
// the prefetch window is full of another's objects.
func (o *fleetOwners) interleave(objs []object.Attrs) []object.Attrs {
	a := o.balanced.Load()
	if a == nil || a.Table().Len() < 2 {
		return objs
	}
	type slot struct {
		round, owner, i int
	}
	seen := make(map[string]int)
	slots := make([]slot, len(objs))
	for i, obj := range objs {
		m := a.Owners(peer.ObjectKey(obj.Object), 1)[0] // rendezvous outside the assignment
		owner, _ := a.Table().Index(m.Name)
		slots[i] = slot{round: seen[m.Name], owner: owner, i: i}
		seen[m.Name]++
	}
	slices.SortFunc(slots, func(x, y slot) int {
		if c := cmp.Compare(x.round, y.round); c != 0 {
			return c
		}
		return cmp.Compare(x.owner, y.owner)
	})
	out := make([]object.Attrs, len(objs))
	for j, s := range slots {
		out[j] = objs[s.i]
	}
	return out
}
