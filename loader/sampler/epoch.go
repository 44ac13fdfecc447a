package sampler

import (
	"fmt"
	"math"
)

// Epoch is one rank's pass over the dataset in one epoch: an iterator of
// samples and group events. It is not safe for concurrent use.
type Epoch struct {
	world, rank int
	offsets     []int64
	core        stream
	n           int64 // samples in the dataset
	total       int64 // global positions after padding or dropping
	pad         int64 // positions repeated at the end (Wrap)
	drop        bool
	length      int   // samples of this rank
	count       int   // samples returned
	pos         int64 // next global position
	tail        []Sample
	raw         []Event // the core's events for one position
	events      []Event // events since the last Next
	deferred    []Event // closes held until the repeats at the end are read
	opened      int     // groups opened so far: a prefix of order
	isOpen      []bool
}

// NewEpoch returns the iterator of epoch number epoch over groups with the
// given row counts. It fails with ErrConfig for a bad Config or a dataset
// too small to give every rank a sample.
func NewEpoch(rows []int, cfg Config, epoch int) (*Epoch, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	off, err := Offsets(rows)
	if err != nil {
		return nil, err
	}
	e := &Epoch{world: cfg.World, rank: cfg.Rank, offsets: off, n: off[len(rows)], drop: cfg.Tail == Drop,
		isOpen: make([]bool, len(rows))}
	if cfg.Mode == Node {
		return e.node(rows, cfg, epoch)
	}
	w := int64(cfg.World)
	if e.drop {
		e.total = e.n - e.n%w
	} else {
		e.pad = (w - e.n%w) % w
		e.total = e.n + e.pad
	}
	switch {
	case e.n == 0:
		return nil, fmt.Errorf("%w: the dataset has no samples", ErrConfig)
	case e.total == 0 || e.pad > e.n:
		return nil, fmt.Errorf("%w: %d samples cannot be shared by %d ranks", ErrConfig, e.n, cfg.World)
	}
	e.length = int(e.total / w)
	e.tail = make([]Sample, e.pad)
	switch cfg.Mode {
	case Sequential:
		e.core = newSequential(rows)
	case Global:
		if e.n > math.MaxUint32 {
			return nil, fmt.Errorf("%w: global shuffle of %d samples (at most 2^32; use shard-window)", ErrConfig, e.n)
		}
		e.core = newGlobal(rows, off, cfg.Seed, epoch)
	default:
		e.core = newWindow(rows, cfg.Window, cfg.Seed, epoch)
	}
	return e, nil
}

// node completes NewEpoch for Node mode: the rank's node's partition,
// dealt among the node's ranks, padded or cut to the world's length.
func (e *Epoch) node(rows []int, cfg Config, epoch int) (*Epoch, error) {
	if e.n == 0 {
		return nil, fmt.Errorf("%w: the dataset has no samples", ErrConfig)
	}
	sh, err := shareOf(rows, cfg)
	if err != nil {
		return nil, err
	}
	e.world, e.rank, e.n, e.total = sh.world, sh.rank, sh.n, sh.total
	if sh.total > sh.n {
		e.pad = sh.total - sh.n
	}
	e.length = int(e.total / int64(e.world))
	e.tail = make([]Sample, e.pad)
	e.core = newWindowOver(rows, sh.groups, cfg.Window, cfg.Seed, epoch, uint64(cfg.Node))
	return e, nil
}

// Len returns the number of samples this rank reads in the epoch.
func (e *Epoch) Len() int { return e.length }

// Read returns the number of samples returned so far.
func (e *Epoch) Read() int { return e.count }

// Order returns the groups in the order they open: every group with rows,
// each once. It must not be modified.
func (e *Epoch) Order() []int { return e.core.order() }

// Opened returns how many groups have opened: Order()[:Opened()].
func (e *Epoch) Opened() int { return e.opened }

// OpenGroups returns the groups open now (opened and not closed), in the
// order they opened.
func (e *Epoch) OpenGroups() []int {
	var out []int
	for _, g := range e.Order()[:e.opened] {
		if e.isOpen[g] {
			out = append(out, g)
		}
	}
	return out
}

// Next returns the rank's next sample, or false after the last. Events
// then holds what happened since the previous call: handle its Opens before
// using the sample and its Closes after.
func (e *Epoch) Next() (Sample, bool) {
	e.events = e.events[:0]
	if e.count == e.length {
		return Sample{}, false
	}
	target := int64(e.count)*int64(e.world) + int64(e.rank)
	for e.pos < target {
		e.step()
	}
	s := e.step()
	e.count++
	if e.count == e.length {
		e.finish()
	}
	return s, true
}

// Skip reads n samples (or all that are left) without returning them or
// their events; OpenGroups and Opened then describe the state reached.
func (e *Epoch) Skip(n int) {
	for range n {
		if _, ok := e.Next(); !ok {
			break
		}
	}
	e.events = e.events[:0]
}

// Events returns the events since the previous Next or Skip: Opens first
// (in opening order), then Closes. The slice is reused by the next call.
func (e *Epoch) Events() []Event { return e.events }

// step reads the sample at global position pos.
func (e *Epoch) step() Sample {
	p := e.pos
	e.pos++
	if p >= e.n { // a repeat (Wrap)
		return e.tail[p-e.n]
	}
	e.raw = e.raw[:0]
	g, r := e.core.next(&e.raw)
	s := Sample{ID: e.offsets[g] + int64(r), Group: g, Row: r}
	hold := p >= e.n-e.pad
	if hold {
		e.tail[p-(e.n-e.pad)] = s
	}
	for _, ev := range e.raw {
		if ev.Kind == Close && hold {
			e.deferred = append(e.deferred, ev)
			continue
		}
		e.record(ev)
	}
	return s
}

// record adds ev to events, keeping Opens before Closes, and tracks the
// open groups.
func (e *Epoch) record(ev Event) {
	if ev.Kind == Open {
		e.opened++
		e.isOpen[ev.Group] = true
		i := len(e.events)
		for i > 0 && e.events[i-1].Kind == Close {
			i--
		}
		e.events = append(e.events, Event{})
		copy(e.events[i+1:], e.events[i:])
		e.events[i] = ev
		return
	}
	e.isOpen[ev.Group] = false
	e.events = append(e.events, ev)
}

// finish runs after the rank's last sample: it reads the other ranks'
// remaining positions for their events, then closes whatever is still
// open and opens and closes any group the epoch never reached, so every
// group of Order opens and closes exactly once.
func (e *Epoch) finish() {
	for e.pos < e.total {
		e.step()
	}
	for _, ev := range e.deferred {
		e.record(ev)
	}
	e.deferred = e.deferred[:0]
	order := e.Order()
	for _, g := range order[:e.opened] {
		if e.isOpen[g] {
			e.record(Event{Close, g})
		}
	}
	for e.opened < len(order) {
		g := order[e.opened]
		e.record(Event{Open, g})
		e.record(Event{Close, g})
	}
}
