package peer

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/fleet/placement"
)

// Candidate is one member that may serve an object, as Owners ranks them.
type Candidate struct {
	// Name is the member's name, as in placement.Member.
	Name string
	// Addr is the member's peer data-plane address, host:port.
	Addr string
	// Self marks this node: a Source stops at it and reads the origin
	// itself, since its own fill is the object's one origin read.
	Self bool
}

// Owners ranks the members that may serve a key, best first (the owner,
// then the member that owns the key if the owner fails). Implementations
// are safe for concurrent use; the fleet's membership implements it over
// its current placement table.
type Owners interface {
	Owners(key placement.Key) []Candidate
}

// OwnersFunc adapts a function to Owners.
type OwnersFunc func(key placement.Key) []Candidate

// Owners returns f(key).
func (f OwnersFunc) Owners(key placement.Key) []Candidate { return f(key) }

// TableOwners returns Owners over a fixed table: the first k members
// ranked for each key, the one named self marked Self, each with its
// address from addrs (members without one are left out).
func TableOwners(t *placement.Table, self string, addrs map[string]string, k int) Owners {
	addrs = maps.Clone(addrs)
	return OwnersFunc(func(key placement.Key) []Candidate {
		var out []Candidate
		for _, m := range t.Owners(key, k) {
			if a, ok := addrs[m.Name]; ok || m.Name == self {
				out = append(out, Candidate{Name: m.Name, Addr: a, Self: m.Name == self})
			}
		}
		return out
	})
}

// latencySamples is how many first-byte gaps a peer's estimate keeps.
const latencySamples = 64

// peerState is what a Source knows of one peer: its first-byte latency,
// whether it is cooling down after a failure, and its byte count.
type peerState struct {
	bytes atomic.Int64
	batch batcher // its small-object reads gathering into batches

	mu      sync.Mutex
	samples []time.Duration // ring of the last gaps, oldest overwritten; guarded by mu
	next    int             // guarded by mu
	until   time.Time       // skipped until then; guarded by mu
}

// observe records one gap between a request's events (sent, heartbeats,
// response).
func (p *peerState) observe(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.samples) < latencySamples {
		p.samples = append(p.samples, d)
		return
	}
	p.samples[p.next] = d
	p.next = (p.next + 1) % latencySamples
}

// firstByteTimeout returns how long to wait for the peer's next event:
// max(floor, factor x p99 of the samples), at most ceiling.
func (p *peerState) firstByteTimeout(floor, ceiling time.Duration, factor float64) time.Duration {
	p.mu.Lock()
	s := slices.Clone(p.samples)
	p.mu.Unlock()
	if len(s) == 0 {
		return floor
	}
	slices.Sort(s)
	est := s[(len(s)*99+99)/100-1]
	return min(ceiling, max(floor, time.Duration(factor*float64(est))))
}

// cool makes the peer skipped until now+d.
func (p *peerState) cool(now time.Time, d time.Duration) {
	p.mu.Lock()
	p.until = now.Add(d)
	p.mu.Unlock()
}

// cooling reports whether the peer is skipped at now.
func (p *peerState) cooling(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return now.Before(p.until)
}
