package fleet

import (
	"cmp"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/cacheagent/cacheagent/fleet/placement"
)

// State is a member's health as this agent sees it.
type State string

// Member states.
const (
	// StateAlive is a member that answers.
	StateAlive State = "alive"
	// StateSuspect is a member whose probes by this agent went unanswered;
	// memberlist declares it dead unless it refutes the suspicion in time.
	// It keeps its place in the table meanwhile.
	StateSuspect State = "suspect"
	// StateDead is a member declared failed. It is out of the table, and
	// is listed for DeadRetention after it failed, unless it comes back.
	StateDead State = "dead"
)

// DeadRetention is how long Members lists a failed member. A member that
// leaves gracefully (Close) is dropped at once.
const DeadRetention = 15 * time.Minute

// Member is one agent of the fleet.
type Member struct {
	// Name is the member's name (Config.Name), unique in the fleet.
	Name string `json:"name"`
	// Addr is its gossip address, IP:port.
	Addr string `json:"addr"`
	// PeerAddr is where its peer data plane listens, host:port.
	PeerAddr string `json:"peer_addr"`
	// State is its health.
	State State `json:"state"`
	// Weight is its placement weight, its disk budget in bytes; 0 if its
	// metadata could not be read (then it owns nothing).
	Weight float64 `json:"weight"`
	// Version is its agent's version.
	Version string `json:"version,omitempty"`
}

// record is what the fleet knows of one member.
type record struct {
	Member
	changed time.Time // when State last changed
	leaving bool      // it announced it is leaving
}

// view is an immutable snapshot of the members in the placement table,
// swapped whole on every change.
type view struct {
	table  *placement.Table
	byName map[string]Member // the table's members
}

// recordFromNode reads a memberlist node as a live member. It runs in
// memberlist's event callbacks, under memberlist's node lock: n's fields
// are stable then. (n.State is not: memberlist keeps the state elsewhere.)
func (f *Fleet) recordFromNode(n *memberlist.Node) record {
	m := Member{Name: n.Name, Addr: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))), State: StateAlive}
	md, err := decodeMeta(n.Meta)
	if err != nil {
		f.log.Warn("fleet member's metadata is unreadable; it owns nothing", "member", n.Name, "err", err)
		return record{Member: m}
	}
	m.PeerAddr, m.Weight, m.Version = peerAddr(md.Peer, n.Addr), md.Weight, md.Version
	return record{Member: m, leaving: md.Leaving}
}

// NotifyJoin records a member that joined (or came back). It implements
// memberlist.EventDelegate.
func (d *delegate) NotifyJoin(n *memberlist.Node) { d.f.upsert(d.f.recordFromNode(n)) }

// NotifyUpdate records a member's new metadata.
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.f.upsert(d.f.recordFromNode(n)) }

// NotifyLeave drops a member that announced it was leaving, and marks
// dead one that failed. (memberlist calls it for both alike.)
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	f := d.f
	f.update(func() {
		r, ok := f.members[n.Name]
		switch {
		case !ok:
		case r.leaving || n.Name == f.self:
			f.log.Info("fleet member left", "member", n.Name)
			delete(f.members, n.Name)
		default:
			f.log.Warn("fleet member failed", "member", n.Name, "addr", n.Address())
			r.State, r.changed = StateDead, time.Now()
		}
	})
}

// upsert records a live member.
func (f *Fleet) upsert(rec record) {
	f.update(func() {
		r, ok := f.members[rec.Name]
		if !ok {
			rec.changed = time.Now()
			f.members[rec.Name] = &rec
			if rec.Name != f.self {
				f.log.Info("fleet member joined", "member", rec.Name, "addr", rec.Addr, "peer_addr", rec.PeerAddr)
			}
			return
		}
		if r.State != rec.State {
			r.changed = time.Now()
		}
		r.Member, r.leaving = rec.Member, rec.leaving
	})
}

// setState moves a known member to state s, unless it is dead (only
// memberlist's events revive a dead member).
func (f *Fleet) setState(name string, s State) {
	f.mu.Lock()
	r, ok := f.members[name]
	change := ok && r.State != s && r.State != StateDead
	f.mu.Unlock()
	if !change {
		return
	}
	f.update(func() {
		if r, ok := f.members[name]; ok && r.State != StateDead {
			r.State, r.changed = s, time.Now()
		}
	})
}

// update applies fn to the members under f.mu, drops expired dead
// members, rebuilds the view and tells subscribers.
func (f *Fleet) update(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
	now := time.Now()
	var in []placement.Member
	byName := make(map[string]Member, len(f.members))
	others := 0
	for name, r := range f.members {
		switch {
		case r.State == StateDead && now.Sub(r.changed) > DeadRetention:
			delete(f.members, name)
		case r.State != StateDead && r.Weight > 0 && !r.leaving:
			in = append(in, placement.Member{Name: name, Weight: r.Weight})
			byName[name] = r.Member
		}
		if r.State != StateDead && name != f.self {
			others++
		}
	}
	t, err := placement.New(in)
	if err != nil { // only before this agent's own join event
		return
	}
	f.view.Store(&view{table: t, byName: byName})
	for ch := range f.subs {
		select {
		case ch <- struct{}{}:
		default: // a change is already pending
		}
	}
	if others > 0 {
		f.markJoined()
	} else {
		select {
		case f.alone <- struct{}{}:
		default:
		}
	}
}

// membersLocked returns every listed member, sorted by name.
func (f *Fleet) membersLocked() []Member {
	now := time.Now()
	out := make([]Member, 0, len(f.members))
	for _, r := range f.members {
		if r.State != StateDead || now.Sub(r.changed) <= DeadRetention {
			out = append(out, r.Member)
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// othersLocked counts the members other than this agent that are not
// dead.
func (f *Fleet) othersLocked() int {
	n := 0
	for name, r := range f.members {
		if name != f.self && r.State != StateDead {
			n++
		}
	}
	return n
}
