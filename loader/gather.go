package loader

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// work is a gathering goroutine: it gathers the batches the dispatcher
// sends, in any order, until ctx ends.
func (l *Loader) work(ctx context.Context) {
	for {
		select {
		case s := <-l.todo:
			l.gather(ctx, s)
			s.ready <- struct{}{}
		case <-ctx.Done():
			return
		}
	}
}

// gather waits for s's shards, then fills its arrays: views of the shard
// (zero-copy) or copies of the rows. On failure it sets s.err.
func (l *Loader) gather(ctx context.Context, s *slot) {
	for _, g := range s.groups {
		select {
		case <-g.ready:
			continue
		default:
		}
		from := time.Now()
		select {
		case <-g.ready:
		case <-ctx.Done():
			s.err = ctx.Err()
			l.dropRefs(s)
			return
		}
		s.tl.waits = append(s.tl.waits, waitSpan{from: from, to: time.Now(), fetched: g.fetched, promoted: g.promoted})
	}
	for _, g := range s.groups {
		if g.err != nil {
			s.err = g.err
			l.dropRefs(s)
			return
		}
	}
	s.tl.gatherStart = time.Now()
	if l.zeroCopy(s) {
		s.batch.ZeroCopy = true // the slot keeps its reference until Release
	} else {
		l.copyRows(s)
		l.dropRefs(s)
	}
	s.tl.gatherEnd = time.Now()
	l.counters.gather.Add(int64(s.tl.gatherEnd.Sub(s.tl.gatherStart)))
	if l.cfg.OnBatch != nil {
		if err := l.cfg.OnBatch(ctx, &s.batch); err != nil {
			s.err = err
		}
	}
}

// zeroCopy makes s's arrays views of its shard if s is one contiguous run
// of rows of one shard, and reports whether it did.
func (l *Loader) zeroCopy(s *slot) bool {
	if l.cfg.CopyAlways || len(s.groups) != 1 {
		return false
	}
	row0 := s.picks[0].row
	for i, p := range s.picks {
		if p.row != row0+i {
			return false
		}
	}
	n, g := len(s.picks), s.groups[0]
	for j, a := range g.arrays {
		rs := l.rowSize[j]
		s.shapes[j][0] = n
		s.batch.Arrays[j] = array.Array{DType: a.DType, Shape: s.shapes[j], Order: array.C,
			ByteOrder: a.ByteOrder, Data: a.Data[row0*rs : (row0+n)*rs : (row0+n)*rs],
			Offset: a.Offset + int64(row0*rs)}
	}
	return true
}

// copyRows copies s's rows into its buffers, one copy per run of
// consecutive rows of one shard.
func (l *Loader) copyRows(s *slot) {
	n := len(s.picks)
	var copied int64
	for j, spec := range l.ds.Specs {
		rs := l.rowSize[j]
		dst := s.bufs[j][: n*rs : n*rs]
		var sink byte
		for i := 0; i < n; {
			p := s.picks[i]
			k := i + 1
			for k < n && s.picks[k].g == p.g && s.picks[k].row == p.row+(k-i) {
				k++
			}
			if k+1 < n && rs > 0 {
				// Touch the row after next so its page walk and first
				// cache line overlap this copy.
				q := s.picks[k+1]
				sink ^= s.groups[q.g].arrays[j].Data[q.row*rs]
			}
			src := s.groups[p.g].arrays[j].Data
			copy(dst[i*rs:k*rs], src[p.row*rs:(p.row+k-i)*rs])
			i = k
		}
		touched.Store(uint32(sink))
		copied += int64(len(dst))
		s.shapes[j][0] = n
		s.batch.Arrays[j] = array.Array{DType: spec.DType, Shape: s.shapes[j], Order: array.C,
			ByteOrder: spec.ByteOrder, Data: dst}
	}
	l.counters.gathered.Add(copied)
}

// touched keeps the prefetching loads of copyRows from being optimised
// away.
var touched atomic.Uint32

// dropRefs drops the references s holds on its shards, if it still holds
// them, and releases the shards that were the last.
func (l *Loader) dropRefs(s *slot) {
	l.table.mu.Lock()
	var dead []*group
	if s.refsHeld {
		s.refsHeld = false
		for _, g := range s.groups {
			dead = l.table.unrefLocked(g, dead)
		}
	}
	l.table.mu.Unlock()
	l.release(dead)
}

// releaseSlot takes back a slot the consumer released.
func (l *Loader) releaseSlot(s *slot) {
	l.held.Add(-1)
	l.dropRefs(s)
	select {
	case l.free <- s:
	default: // cannot happen: there are as many places as slots
	}
}
