package fleet

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/cacheagent/cacheagent/fleet/placement"
)

// Errors of Start and Fleet's methods. Test them with errors.Is.
var (
	// ErrBadWeight reports a placement weight that is not positive and
	// finite.
	ErrBadWeight = errors.New("fleet: weight must be positive and finite")
	// ErrClosed reports a call on a closed Fleet.
	ErrClosed = errors.New("fleet: closed")
)

// Timeouts of the membership protocol's blocking calls.
const (
	// leaveTimeout bounds Close's wait for the leave message to reach a
	// member when ctx has no deadline (measured: 0.13 s to propagate).
	leaveTimeout = 5 * time.Second
	// updateTimeout bounds SetWeight's wait for its broadcast.
	updateTimeout = 5 * time.Second
	// reclaimAfter lets a member that failed come back under its name from
	// a new address (a rescheduled pod) this long after it was declared
	// dead.
	reclaimAfter = 10 * time.Second
)

// Options are the parts of a fleet that do not come from its Config.
type Options struct {
	// Weight is this agent's placement weight: its disk tier's budget in
	// bytes. Required, positive.
	Weight float64
	// Version is the agent's version, told to the other members.
	Version string
	// PeerAddr is the data plane address advertised to the others, if it
	// differs from Config.PeerListen (a listener on port 0, say).
	PeerAddr string
	// Logger receives the fleet's and memberlist's logs; nil discards them.
	Logger *slog.Logger
	// Keys are Config.KeyFile's keys, loaded once by the caller that also
	// needs the data plane's key (LoadKeys); nil: Start loads them.
	Keys *Keys
}

// Fleet is this agent's membership in a fleet: a memberlist instance, the
// members it knows and the placement table over the live ones. Create it
// with Start and end it with Close. Its methods are safe for concurrent
// use.
type Fleet struct {
	// Immutable after Start.
	log     *slog.Logger
	ml      *memberlist.Memberlist
	self    string
	join    []string
	peerKey []byte        // nil when insecure
	joined  chan struct{} // closed once another member is known
	alone   chan struct{} // signalled when no other member is left; cap 1
	stop    context.CancelFunc
	loop    sync.WaitGroup // the join loop

	joinAttempts atomic.Int64 // Join calls that found no other member
	joinOnce     sync.Once    // closes joined
	view         atomic.Pointer[view]

	// Lock order: memberlist's node lock (held in its event callbacks),
	// then mu. Nothing holding mu calls into memberlist.
	mu      sync.Mutex // protects the fields below
	meta    meta       // this agent's metadata
	members map[string]*record
	subs    map[chan struct{}]struct{}
	closed  bool
}

// Start joins (or founds) a fleet: it loads the key file (unless
// opts.Keys holds its keys), starts
// memberlist on cfg.Listen with this agent's metadata (peer address,
// weight, version), and, if cfg.Join lists members, joins them in the
// background, retrying until one answers (Joined); it does not wait for
// them. Without a key file it fails with ErrNoKey unless cfg.Insecure.
// ctx bounds nothing after Start returns: Close ends the fleet.
func Start(ctx context.Context, cfg Config, opts Options) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !(opts.Weight > 0) || math.IsInf(opts.Weight, 1) {
		return nil, fmt.Errorf("%w: %v", ErrBadWeight, opts.Weight)
	}
	lg := opts.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	if cfg.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("fleet: no name configured and no hostname: %w", err)
		}
		cfg.Name = h
	}
	peer := cfg.PeerListen
	if opts.PeerAddr != "" {
		peer = opts.PeerAddr
	}
	f := &Fleet{log: lg.With("fleet", cfg.Name), self: cfg.Name, join: slices.Clone(cfg.Join),
		joined: make(chan struct{}), alone: make(chan struct{}, 1),
		meta:    meta{Format: metaFormat, Peer: peer, Weight: opts.Weight, Version: opts.Version},
		members: make(map[string]*record), subs: make(map[chan struct{}]struct{})}
	if _, err := f.meta.encode(); err != nil {
		return nil, err
	}
	mc, err := f.memberlistConfig(cfg, opts.Keys)
	if err != nil {
		return nil, err
	}
	f.ml, err = memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("fleet: start gossip on %s: %w", cfg.Listen, err)
	}
	if ctx.Err() != nil {
		return nil, errors.Join(ctx.Err(), f.ml.Shutdown())
	}
	loopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	f.stop = stop
	if len(f.join) > 0 {
		f.loop.Go(func() { f.joinLoop(loopCtx) })
	}
	self := f.Self()
	f.log.Info("fleet started", "addr", self.Addr, "peer_addr", self.PeerAddr, "weight", opts.Weight,
		"join", f.join, "encrypted", f.peerKey != nil)
	return f, nil
}

// memberlistConfig returns memberlist's LAN defaults set up for cfg: this
// agent's name and address, the gossip key (of keys, or of cfg.KeyFile when
// keys is nil), the delegates and the logger.
func (f *Fleet) memberlistConfig(cfg Config, keys *Keys) (*memberlist.Config, error) {
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	host, port := splitListen(cfg.Listen)
	if host == "" {
		host = "0.0.0.0"
	}
	mc.BindAddr, mc.BindPort, mc.AdvertisePort = host, port, port
	mc.DeadNodeReclaimTime = reclaimAfter
	d := &delegate{f: f}
	mc.Delegate, mc.Events, mc.Ping = d, d, d
	mc.Logger = log.New(&logWriter{log: f.log, suspect: func(name string) { f.setState(name, StateSuspect) }}, "", 0)
	if cfg.KeyFile == "" {
		f.log.Warn("fleet runs without a key (insecure: true): gossip is in clear text and anyone " +
			"who reaches the gossip port can join")
		return mc, nil
	}
	if keys == nil {
		var err error
		if keys, err = LoadKeys(cfg.KeyFile); err != nil {
			return nil, err
		}
	}
	if keys.worldReadable {
		f.log.Warn("fleet key file is readable by every user; chmod 600 or 400 it", "key_file", keys.file)
	}
	mc.SecretKey = keys.gossip
	f.peerKey = keys.peer
	return mc, nil
}

// Name returns this agent's name in the fleet.
func (f *Fleet) Name() string { return f.self }

// Self returns this agent as a member.
func (f *Fleet) Self() Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.members[f.self]; ok {
		return r.Member
	}
	return Member{Name: f.self, State: StateAlive, Weight: f.meta.Weight, Version: f.meta.Version}
}

// Members returns every member this agent knows, itself included, sorted
// by name: alive and suspect ones, and dead ones for DeadRetention.
func (f *Fleet) Members() []Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.membersLocked()
}

// Table returns the placement table over the live members (alive and
// suspect), weighted by their disk budgets. It is rebuilt on every
// membership change and is cheap to call (an atomic load); the table is
// immutable, so a caller may keep it for the length of a request.
func (f *Fleet) Table() *placement.Table { return f.view.Load().table }

// Owners returns the first k members of key's ranking in the current
// table, best first, with their peer addresses: the owner, then the
// members to fall back to. See placement.Table.Owners.
func (f *Fleet) Owners(key placement.Key, k int) []Member {
	v := f.view.Load()
	ranked := v.table.Owners(key, k)
	out := make([]Member, len(ranked))
	for i, m := range ranked {
		out[i] = v.byName[m.Name]
	}
	return out
}

// Member returns the member named name if it is in the current table
// (alive or suspect), with its peer address.
func (f *Fleet) Member(name string) (Member, bool) {
	m, ok := f.view.Load().byName[name]
	return m, ok
}

// Key returns the peer data plane's key, derived from the fleet's key
// file (PeerKey), or nil when the fleet runs without one (insecure). The
// caller must not modify it.
func (f *Fleet) Key() []byte { return f.peerKey }

// Joined returns a channel closed once this agent has seen another member
// (it joined one, or one joined it); it never closes for a fleet of one.
func (f *Fleet) Joined() <-chan struct{} { return f.joined }

// Subscribe returns a channel that receives a value after membership
// changes (a join, a leave, a failure, new metadata): the receiver then
// reads Table or Members. Changes that arrive while a value waits are
// coalesced into it, so a slow receiver never blocks the fleet and never
// misses the latest state. The channel is closed by cancel or by Close.
func (f *Fleet) Subscribe() (changes <-chan struct{}, cancel func()) {
	ch := make(chan struct{}, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		close(ch)
		return ch, func() {}
	}
	f.subs[ch] = struct{}{}
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.subs[ch]; ok {
			delete(f.subs, ch)
			close(ch)
		}
	}
}

// SetWeight changes this agent's placement weight (its disk budget after a
// reload) and tells the other members.
func (f *Fleet) SetWeight(w float64) error {
	if !(w > 0) || math.IsInf(w, 1) {
		return fmt.Errorf("%w: %v", ErrBadWeight, w)
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	f.meta.Weight = w
	f.mu.Unlock()
	if err := f.ml.UpdateNode(updateTimeout); err != nil {
		return fmt.Errorf("fleet: announce weight %v: %w", w, err)
	}
	return nil
}

// Close leaves the fleet gracefully: it announces that it is leaving (the
// others take it out of their tables), then leaves (they drop it at once
// instead of detecting a failure), waiting within ctx (or 5 s each) for
// both messages to go out, then shuts memberlist down and waits for the
// join loop. Subscribers' channels are closed. A second Close returns
// ErrClosed.
func (f *Fleet) Close(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	f.closed = true
	f.mu.Unlock()
	f.stop()
	timeout := leaveTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl)/2, time.Millisecond)
	}
	var errs []error
	f.mu.Lock()
	f.meta.Leaving = true
	f.mu.Unlock()
	if err := f.ml.UpdateNode(timeout); err != nil { // the others stop routing to it
		errs = append(errs, fmt.Errorf("fleet: announce leaving: %w", err))
	}
	if err := f.ml.Leave(timeout); err != nil {
		errs = append(errs, fmt.Errorf("fleet: leave: %w", err))
	}
	if err := f.ml.Shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("fleet: shut down gossip: %w", err))
	}
	f.loop.Wait()
	f.mu.Lock()
	for ch := range f.subs {
		delete(f.subs, ch)
		close(ch)
	}
	f.mu.Unlock()
	f.log.Info("fleet left")
	return errors.Join(errs...)
}

// delegate is memberlist's view of the Fleet: it supplies this agent's
// metadata and receives membership events and probe results.
type delegate struct{ f *Fleet }

// NodeMeta returns this agent's metadata. It implements memberlist.Delegate.
func (d *delegate) NodeMeta(limit int) []byte {
	d.f.mu.Lock()
	m := d.f.meta
	d.f.mu.Unlock()
	b, err := m.encode() // checked by Start; SetWeight changes only the weight
	if err != nil || len(b) > limit {
		d.f.log.Error("fleet metadata does not fit", "err", err, "limit", limit)
		return nil
	}
	return b
}

// NotifyMsg ignores user messages: the fleet sends none.
func (d *delegate) NotifyMsg([]byte) {}

// GetBroadcasts returns nothing: the fleet broadcasts nothing of its own.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState returns nothing: all state is in the metadata.
func (d *delegate) LocalState(join bool) []byte { return nil }

// MergeRemoteState ignores remote state: there is none.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {}

// AckPayload returns nothing. It implements memberlist.PingDelegate.
func (d *delegate) AckPayload() []byte { return nil }

// NotifyPingComplete clears a suspicion: the member answered a probe.
func (d *delegate) NotifyPingComplete(other *memberlist.Node, _ time.Duration, _ []byte) {
	d.f.setState(other.Name, StateAlive)
}
