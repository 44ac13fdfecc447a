package loader

import (
	"context"
	"fmt"
	"time"

	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/object"
)

// dispatcher runs the sampler: it fills batch slots with samples, tracks
// which shards are open, and hands the slots to the workers and to Next,
// in order. It is one goroutine; its fields are its own.
type dispatcher struct {
	l      *Loader
	cur    []*group // the open group of each shard
	seq    int64    // the next seq to claim
	closes []*group // shards closed while filling the current slot
	serial uint64   // batches filled
	// The announced plan: shards in plan order from seq planBase, the
	// objects of seq planBase+i (Reader.Objects) from position planPos[i] on.
	planBase int64
	planPos  []int
	planLen  int
	// reported is when Stats were last reported to a StatsReporter.
	reported time.Time
}

// dispatch runs the dispatcher until every batch is handed out or ctx
// ends, then closes l.ordered. A failure is recorded for Next.
func (l *Loader) dispatch(ctx context.Context) {
	defer close(l.ordered)
	d := &dispatcher{l: l, cur: make([]*group, len(l.ds.Groups))}
	if err := d.run(ctx); err != nil && ctx.Err() == nil {
		l.fail(err)
	}
}

// run dispatches every epoch from the start state.
func (d *dispatcher) run(ctx context.Context) error {
	l := d.l
	if l.start.Epoch >= l.end {
		return nil // resumed after the last batch
	}
	it, err := sampler.NewEpoch(l.rows, l.cfg.sampler, l.start.Epoch)
	if err != nil {
		return err
	}
	it.Skip(l.start.Batch * l.cfg.BatchSize)
	open := it.OpenGroups() // already open at the resume point
	l.table.extend(append(open, it.Order()[it.Opened():]...))
	first := l.start.Batch
	var later <-chan built // epoch ep+2, being built
	for ep := l.start.Epoch; ep < l.end; ep++ {
		var next *sampler.Epoch
		if ep+1 < l.end {
			if next, err = d.await(ctx, later, ep+1); err != nil {
				return err
			}
			l.table.extend(next.Order())
		}
		later = nil
		if ep+2 < l.end {
			later = d.build(ep + 2)
		}
		d.announce(ctx)
		for _, g := range open {
			if err := d.open(ctx, g); err != nil {
				return err
			}
		}
		if err := d.epoch(ctx, it, ep, first); err != nil {
			return err
		}
		it, first, open = next, 0, nil
	}
	return nil
}

// built is an epoch's order built by build.
type built struct {
	e   *sampler.Epoch
	err error
}

// build builds epoch ep's order on a goroutine of its own, which the
// Loader's WaitGroup owns, so that the dispatcher need not stop handing out
// batches while it is built: a global shuffle of 2^19 samples takes 2.5–3.3
// ms, 7% of a warm epoch of 1 KiB rows, during which the workers would run
// dry. The order is built a whole epoch before it is dispatched (the plan
// announced at an epoch's start covers the next epoch too), so up to three
// epochs' orders are in memory at once.
func (d *dispatcher) build(ep int) <-chan built {
	ch := make(chan built, 1)
	d.l.wg.Go(func() {
		e, err := sampler.NewEpoch(d.l.rows, d.l.cfg.sampler, ep)
		ch <- built{e, err}
	})
	return ch
}

// await returns epoch ep's order: from ch, which build returned, or built
// here if ch is nil.
func (d *dispatcher) await(ctx context.Context, ch <-chan built, ep int) (*sampler.Epoch, error) {
	if ch == nil {
		return sampler.NewEpoch(d.l.rows, d.l.cfg.sampler, ep)
	}
	select {
	case b := <-ch:
		return b.e, b.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// epoch dispatches batches first.. of epoch ep from it, then reads the
// rest of it (a dropped last batch) for its events.
func (d *dispatcher) epoch(ctx context.Context, it *sampler.Epoch, ep, first int) error {
	l := d.l
	for b := first; b < l.perEpoch; b++ {
		var s *slot
		select {
		case s = <-l.free:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.reset(ep, b)
		if err := d.fill(ctx, s, it); err != nil {
			return err
		}
		l.ordered <- s // never blocks: there are as many places as slots
		l.todo <- s
	}
	for {
		if _, ok := it.Next(); !ok {
			break
		}
		if err := d.events(ctx, it.Events()); err != nil {
			return err
		}
		d.applyCloses()
	}
	return nil
}

// fill samples one batch into s and takes its references on the shards.
func (d *dispatcher) fill(ctx context.Context, s *slot, it *sampler.Epoch) error {
	d.serial++
	for len(s.batch.IDs) < d.l.cfg.BatchSize {
		smp, ok := it.Next()
		if !ok {
			break
		}
		evs := it.Events()
		k := opens(evs)
		if err := d.events(ctx, evs[:k]); err != nil {
			return err
		}
		g := d.cur[smp.Group]
		if g == nil {
			return fmt.Errorf("loader: internal error: sample %d of shard %d, which is not open", smp.ID, smp.Group)
		}
		if g.mark != d.serial {
			g.mark, g.slotIndex = d.serial, len(s.groups)
			s.groups = append(s.groups, g)
		}
		s.batch.IDs = append(s.batch.IDs, smp.ID)
		s.picks = append(s.picks, Pick{Shard: g.slotIndex, Row: smp.Row})
		if err := d.events(ctx, evs[k:]); err != nil {
			return err
		}
	}
	t := d.l.table
	t.mu.Lock()
	for _, g := range s.groups {
		g.refs++
	}
	s.refsHeld = true
	t.mu.Unlock()
	d.applyCloses()
	return nil
}

// opens returns the number of Opens at the start of evs: the sampler
// reports a position's Opens (to handle before its sample) before its
// Closes (after it).
func opens(evs []sampler.Event) int {
	k := 0
	for k < len(evs) && evs[k].Kind == sampler.Open {
		k++
	}
	return k
}

// events handles the Opens among evs and queues the Closes, which take
// effect (applyCloses) once the batch holds its references.
func (d *dispatcher) events(ctx context.Context, evs []sampler.Event) error {
	for _, ev := range evs {
		switch ev.Kind {
		case sampler.Open:
			if err := d.open(ctx, ev.Group); err != nil {
				return err
			}
		case sampler.Close:
			if d.cur[ev.Group] != nil {
				d.closes = append(d.closes, d.cur[ev.Group])
				d.cur[ev.Group] = nil
			}
		}
	}
	return nil
}

// open claims the next planned group, which is shard index.
func (d *dispatcher) open(ctx context.Context, index int) error {
	g, err := d.l.table.claim(d.seq, index)
	if err != nil {
		return err
	}
	d.cur[index] = g
	if p := d.l.cfg.Planner; p != nil {
		pos := d.planLen
		if i := int(d.seq - d.planBase); i < len(d.planPos) {
			pos = d.planPos[i]
		}
		if err := p.AdvancePlan(ctx, d.l.planID, pos); err != nil && ctx.Err() == nil {
			d.l.planError(err)
		}
		if now := time.Now(); now.Sub(d.reported) >= ReportInterval {
			d.reported = now
			d.l.reportStats(ctx)
		}
	}
	d.seq++
	return nil
}

// applyCloses drops the plan references of the shards closed since the
// last call.
func (d *dispatcher) applyCloses() {
	if len(d.closes) == 0 {
		return
	}
	t := d.l.table
	var dead []*group
	t.mu.Lock()
	for _, g := range d.closes {
		if g.planRef {
			g.planRef = false
			dead = t.unrefLocked(g, dead)
		}
	}
	t.mu.Unlock()
	clear(d.closes)
	d.closes = d.closes[:0]
	d.l.release(dead)
}

// announce tells the Planner the objects of the plan from the start of
// the current epoch (or resume point) on: this epoch and the next, shard
// by shard, each shard's objects as its opening acquires them
// (Reader.Objects: a token shard's are followed by those its windows
// spill into).
func (d *dispatcher) announce(ctx context.Context) {
	p := d.l.cfg.Planner
	if p == nil {
		return
	}
	t := d.l.table
	t.mu.Lock()
	shards := append([]int(nil), t.plan[d.seq-t.base:]...)
	t.mu.Unlock()
	d.planBase = d.seq
	d.planPos = d.planPos[:0]
	objs := make([]object.Object, 0, len(shards)*len(d.l.ds.Names))
	for _, g := range shards {
		d.planPos = append(d.planPos, len(objs))
		objs = append(objs, d.l.reader.Objects(g)...)
	}
	d.planLen = len(objs)
	if err := p.Plan(ctx, d.l.planID, objs); err != nil && ctx.Err() == nil {
		d.l.planError(err)
	}
}
