package loader

import (
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/stats"
)

// counters are the figures of Stats kept by goroutines other than Next's caller.
type counters struct {
	gather, gathered atomic.Int64
	opened, openTime atomic.Int64
	planErrors       atomic.Int64
	stageErrors      atomic.Int64
}

// timeline is what a slot's batch went through, for stall attribution.
type timeline struct {
	waits       []waitSpan // spans its worker waited for a shard
	gatherStart time.Time
	gatherEnd   time.Time
}

// waitSpan is a span a worker waited for a shard, with the ends of that
// shard's fetch and promote phases.
type waitSpan struct {
	from, to          time.Time
	fetched, promoted time.Time
}

// reset empties tl for a new batch.
func (tl *timeline) reset() {
	tl.waits = tl.waits[:0]
	tl.gatherStart, tl.gatherEnd = time.Time{}, time.Time{}
}

// overlap returns the length of [a0, a1) ∩ [b0, b1).
func overlap(a0, a1, b0, b1 time.Time) time.Duration {
	lo, hi := a0, a1
	if b0.After(lo) {
		lo = b0
	}
	if b1.Before(hi) {
		hi = b1
	}
	if !hi.After(lo) {
		return 0
	}
	return hi.Sub(lo)
}

// attribute splits the stall [t0, t1) of Next waiting for the batch with
// timeline tl into fetch, promote, gather and other.
func (tl *timeline) attribute(t0, t1 time.Time) (fetch, promote, gather, other time.Duration) {
	for _, w := range tl.waits {
		fetch += overlap(t0, t1, w.from, minTime(w.to, w.fetched))
		promote += overlap(t0, t1, maxTime(w.from, w.fetched), w.to)
	}
	gather = overlap(t0, t1, tl.gatherStart, tl.gatherEnd)
	other = t1.Sub(t0) - fetch - promote - gather
	return fetch, promote, gather, max(other, 0)
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// maxTime returns the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Stats returns a snapshot of what the Loader delivered and where Next
// waited, totals since New (see stats.Loader). Safe to call concurrently
// with Next.
func (l *Loader) Stats() stats.Loader {
	l.mu.Lock()
	s := l.stats
	l.mu.Unlock()
	s.Gather = time.Duration(l.counters.gather.Load())
	s.BytesGathered = l.counters.gathered.Load()
	s.ShardsOpened = l.counters.opened.Load()
	s.OpenTime = time.Duration(l.counters.openTime.Load())
	s.PlanErrors = l.counters.planErrors.Load()
	s.StageErrors = l.counters.stageErrors.Load()
	return s
}

// accountLocked adds a batch that Next waited for from t0 to t1 to the stats.
// The caller holds l.mu.
func (l *Loader) accountLocked(s *slot, t0, t1 time.Time) {
	st := &l.stats
	st.Batches++
	st.Samples += int64(len(s.batch.IDs))
	for _, a := range s.batch.Arrays {
		st.Bytes += int64(len(a.Data))
	}
	if s.batch.ZeroCopy {
		st.ZeroCopy++
	}
	if !t1.After(t0) {
		return
	}
	f, p, g, o := s.tl.attribute(t0, t1)
	st.Wait += t1.Sub(t0)
	st.WaitFetch += f
	st.WaitPromote += p
	st.WaitGather += g
	st.WaitOther += o
}
