package loader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// group is one opening of a shard: its leases and arrays while in use. The
// shard plan (table.plan) numbers openings by seq across epochs; the same
// shard opens once per epoch.
//
// References (table.refs): the plan reference, from creation until the
// sampler closes the shard (planRef); one per batch reading it, until the
// batch is gathered (zero-copy batches: released); the opener's, while it
// opens the group. The last one releases the leases.
type group struct {
	seq   int64
	index int           // in Dataset.Groups
	ready chan struct{} // closed when the fields below are set

	// Set by the opener before ready is closed; read-only afterwards.
	shard    Shard // the Reader's opening; nil on error
	err      error
	fetched  time.Time // end of the fetch phase
	promoted time.Time // end of the disk→shm phase (and the mapping)

	// Guarded by table.mu.
	refs    int
	planRef bool

	// Dispatcher only: the serial of the last batch that reads the group,
	// and the group's index in that batch's slot.groups.
	mark      uint64
	slotIndex int
}

// table holds the shard plan and the groups being opened or in use.
type table struct {
	wake chan struct{} // capacity 1: the plan or dispatched changed

	mu sync.Mutex // protects the fields below and every group's refs and planRef
	// plan lists the shards in the order they open; plan[i] has seq
	// base+i. The dispatcher appends an epoch at a time.
	plan       []int
	base       int64
	groups     map[int64]*group
	dispatched int64 // seqs below this were claimed by the dispatcher
	openNext   int64 // the next seq the opener considers
}

// newTable returns an empty table.
func newTable() *table {
	return &table{wake: make(chan struct{}, 1), groups: make(map[int64]*group)}
}

// notify wakes the opener.
func (t *table) notify() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// extend appends shards to the plan.
func (t *table) extend(shards []int) {
	t.mu.Lock()
	t.plan = append(t.plan, shards...)
	t.mu.Unlock()
	t.notify()
}

// groupLocked returns the group of seq, creating it with its plan
// reference if it does not exist.
func (t *table) groupLocked(seq int64) *group {
	g := t.groups[seq]
	if g == nil {
		g = &group{seq: seq, index: t.plan[seq-t.base], ready: make(chan struct{}), refs: 1, planRef: true}
		t.groups[seq] = g
	}
	return g
}

// claim returns the group of seq for the dispatcher, which is opening
// shard index: seqs are claimed in order.
func (t *table) claim(seq int64, index int) (*group, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if seq < t.base || seq >= t.base+int64(len(t.plan)) || t.plan[seq-t.base] != index {
		return nil, fmt.Errorf("loader: internal error: shard %d opens out of plan at %d", index, seq)
	}
	g := t.groupLocked(seq)
	t.dispatched = seq + 1
	t.trimLocked()
	t.notify()
	return g, nil
}

// trimLocked drops the part of the plan no one will look at again.
func (t *table) trimLocked() {
	if k := min(t.dispatched, t.openNext) - t.base; k > 1024 {
		t.plan = slices.Delete(t.plan, 0, int(k))
		t.base += k
	}
}

// nextToOpen waits until the opener may open another group (at most
// lookahead seqs past the dispatcher's) and returns it with an opener
// reference. Groups the dispatcher already claimed and released (a rank
// that read none of a shard's rows) are skipped.
func (t *table) nextToOpen(ctx context.Context, lookahead int) (*group, error) {
	for {
		t.mu.Lock()
		for t.openNext < t.base+int64(len(t.plan)) && t.openNext < t.dispatched+int64(lookahead) {
			seq := t.openNext
			t.openNext++
			if t.groups[seq] == nil && seq < t.dispatched {
				continue
			}
			g := t.groupLocked(seq)
			g.refs++
			t.mu.Unlock()
			return g, nil
		}
		t.mu.Unlock()
		select {
		case <-t.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// unrefLocked drops one reference on g and appends g to dead if it was
// the last.
func (t *table) unrefLocked(g *group, dead []*group) []*group {
	g.refs--
	if g.refs > 0 {
		return dead
	}
	delete(t.groups, g.seq)
	return append(dead, g)
}

// release releases dead groups' leases (outside the table's lock).
func (l *Loader) release(dead []*group) error {
	var errs []error
	for _, g := range dead {
		if g.shard == nil {
			continue
		}
		for _, ls := range g.shard.Leases() {
			errs = append(errs, ls.Release())
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		l.cfg.Logger.Warn("loader: release shard", "err", err)
	}
	return err
}

// openLoop is the opener: it opens the planned shards in order, up to
// Config.Lookahead ahead of the sampler and as many at a time (at least
// one), until ctx ends; then it waits for the openings in progress.
func (l *Loader) openLoop(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, max(1, l.cfg.Lookahead))
	for {
		g, err := l.table.nextToOpen(ctx, l.cfg.Lookahead)
		if err != nil {
			return
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			l.unref(g)
			return
		}
		wg.Go(func() {
			l.open(ctx, g)
			<-slots
			l.unref(g)
		})
	}
}

// unref drops one reference on g, releasing it if it was the last.
func (l *Loader) unref(g *group) {
	l.table.mu.Lock()
	dead := l.table.unrefLocked(g, nil)
	l.table.mu.Unlock()
	l.release(dead)
}

// open stages the objects an opening of g's shard acquires
// (Reader.Objects: with a token dataset's, those of the shards its windows
// spill into), has the Reader open it, and marks g ready (with an error if
// any of that failed).
func (l *Loader) open(ctx context.Context, g *group) {
	defer close(g.ready)
	objs := l.reader.Objects(g.index)
	start := time.Now()
	if st := l.cfg.Stager; st != nil {
		if err := st.Fetch(ctx, objs); err != nil {
			g.err = fmt.Errorf("loader: fetch shard %d (%s): %w", g.index, objs[0], err)
			return
		}
		g.fetched = time.Now()
		if err := st.Promote(ctx, objs); err != nil && ctx.Err() == nil {
			l.counters.stageErrors.Add(1)
			l.cfg.Logger.Warn("loader: promote shard", "shard", g.index, "err", err)
		}
		g.promoted = time.Now()
	}
	shard, err := l.reader.Open(ctx, l.src, g.index)
	done := time.Now()
	if l.cfg.Stager == nil {
		g.fetched, g.promoted = done, done
	}
	l.counters.opened.Add(1)
	l.counters.openTime.Add(int64(done.Sub(start)))
	if err != nil {
		shard = nil
	}
	g.shard, g.err = shard, err
}
