package loader

import (
	"context"
	"encoding/binary"
	"runtime"
	"time"
	"unsafe"

	"github.com/cacheagent/cacheagent/internal/memhint"
	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// work is a gathering goroutine: it gathers the batches the dispatcher
// sends, in any order, until ctx ends.
//
// A worker that readies the batch Next is blocked on yields its P at once,
// so that Next runs there now: the runtime queues the woken consumer on
// the worker's P, and otherwise it waits until the worker blocks or an idle
// P's thread wakes up to steal it, which on VMs whose idle vCPUs halt
// takes 100-250 µs, ten batches of small rows. Measured on the 2-vCPU
// development VM (`cacheagent bench loader`, warm 1 KiB rows, three
// alternated pairs): the global shuffle's epoch 0.049-0.053 s without the
// yield, 0.034-0.045 s with it; shard-window 0.045-0.051 s, 0.031-0.037 s.
func (l *Loader) work(ctx context.Context) {
	for {
		select {
		case s := <-l.todo:
			l.gather(ctx, s)
			s.ready <- struct{}{}
			if l.waiter.Load() == s {
				runtime.Gosched()
			}
		case <-ctx.Done():
			return
		}
	}
}

// gather waits for s's shards, then has the Reader fill its batch. On
// failure it sets s.err.
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
	ga := &s.gather
	ga.Picks, ga.Shards, ga.Copied, ga.Keep = s.picks, ga.Shards[:0], 0, false
	for _, g := range s.groups {
		ga.Shards = append(ga.Shards, g.shard)
	}
	if err := l.reader.Gather(ga); err != nil {
		s.err = err
	}
	clear(ga.Shards) // the shards may be unmapped once the batch lets go of them
	l.counters.gathered.Add(ga.Copied)
	if !ga.Keep || s.err != nil {
		l.dropRefs(s) // else the slot keeps its references until Release
	}
	s.tl.gatherEnd = time.Now()
	l.counters.gather.Add(int64(s.tl.gatherEnd.Sub(s.tl.gatherStart)))
	if l.cfg.OnBatch != nil {
		if err := l.cfg.OnBatch(ctx, &s.batch); err != nil {
			s.err = err
		}
	}
}

// copyRows copies g's rows into its buffers: one copy per run of
// consecutive rows of one shard, with the rows a few picks ahead
// prefetched so that the cache misses of small random rows overlap. Rows
// of at most a cache line (labels, typically) each cost a miss, and a page
// walk, for a few bytes, and with the large rows' copy between them and
// their turn they miss again: so they are all prefetched first, arrive
// while the large rows are copied, and are copied last (1 KiB rows with
// 8-byte labels, BenchmarkCopyBatch, alternated: 17.6-19.1 µs a batch of
// 256 before, 15.2-17.1 after). The copy loops read each shard's data from
// a flat table (srcs, kept in g.Scratch) rather than through the shards:
// the two extra dependent loads per row cost 8–13% of the copy rate of
// 1 KiB random rows.
func (r *rowReader) copyRows(g *Gather) {
	srcs, _ := g.Scratch.(*[][]byte)
	if srcs == nil {
		srcs = new([][]byte)
		g.Scratch = srcs
	}
	for j := range r.ds.Specs {
		if rs := r.rowSize[j]; rs > 0 && rs <= memhint.Line {
			for _, p := range g.Picks {
				memhint.Bytes(g.Shards[p.Shard].(*rowShard).arrays[j].Data[p.Row*rs : (p.Row+1)*rs])
			}
		}
	}
	for _, small := range [...]bool{false, true} {
		for j, spec := range r.ds.Specs {
			if rs := r.rowSize[j]; (rs <= memhint.Line) == small {
				g.Copied += r.copyArray(g, srcs, j, spec)
			}
		}
	}
	clear(*srcs) // the shards may be unmapped once the batch lets go of them
}

// copyArray copies g's rows of array j into its buffer and returns the
// bytes copied.
func (r *rowReader) copyArray(g *Gather, srcs *[][]byte, j int, spec Spec) int64 {
	n := len(g.Picks)
	*srcs = (*srcs)[:0]
	for _, sh := range g.Shards {
		*srcs = append(*srcs, sh.(*rowShard).arrays[j].Data)
	}
	rs := r.rowSize[j]
	dst := g.Buffers[j][: n*rs : n*rs]
	switch rs {
	case 8:
		copyWords[uint64](g.Picks, *srcs, dst)
	case 4:
		copyWords[uint32](g.Picks, *srcs, dst)
	default:
		copyRuns(g.Picks, *srcs, rs, dst)
	}
	g.Shapes[j][0] = n
	g.Batch.Arrays[j] = array.Array{DType: spec.DType, Shape: g.Shapes[j], Order: array.C,
		ByteOrder: spec.ByteOrder, Data: dst}
	return int64(len(dst))
}

const (
	// prefetchLead is how far ahead of the copy, in bytes of rows, the
	// gather prefetches small rows: enough misses in flight to cover the
	// memory's latency (and, for rows of a random page each, its page
	// walk), few enough that the rows are still in cache when copied.
	// Measured (BenchmarkCopyRuns, random rows of 64 mapped shm shards):
	// 256 B rows copy fastest 16 ahead, 1 KiB rows 8 ahead, 4 KiB rows 1–2.
	prefetchLead = 8 << 10
	// prefetchAheadMax bounds how many picks ahead a row is prefetched.
	prefetchAheadMax = 16
	// prefetchRowMax is the largest row prefetched: past a few pages the
	// hardware's stream prefetcher does better on its own.
	prefetchRowMax = 4 << 10
	// prefetchWords is how many picks ahead a 4- or 8-byte row (a label,
	// typically) is prefetched, if copyRows's first pass has not brought
	// it in yet: each costs a cache miss for a few bytes.
	prefetchWords = 32
)

// prefetchAhead returns how many picks ahead of the copy rows of rs bytes
// are prefetched; 0 for rows too large to prefetch.
func prefetchAhead(rs int) int {
	if rs <= 0 || rs > prefetchRowMax {
		return 0
	}
	return min(max(prefetchLead/rs, 1), prefetchAheadMax)
}

// copyRuns copies the rows picks name, of rs bytes each, from srcs (the
// data of each pick's shard, by Pick.Shard) into dst: one copy per run of
// consecutive rows of one shard, small rows prefetched prefetchAhead(rs)
// picks ahead of the copy.
func copyRuns(picks []Pick, srcs [][]byte, rs int, dst []byte) {
	n := len(picks)
	ahead := prefetchAhead(rs)
	for _, q := range picks[:min(ahead, n)] {
		memhint.Bytes(srcs[q.Shard][q.Row*rs : (q.Row+1)*rs])
	}
	for i := 0; i < n; {
		p := picks[i]
		k := i + 1
		for k < n && picks[k].Shard == p.Shard && picks[k].Row == p.Row+(k-i) {
			k++
		}
		if ahead > 0 && k+ahead-1 < n {
			q := picks[k+ahead-1]
			memhint.Bytes(srcs[q.Shard][q.Row*rs : (q.Row+1)*rs])
		}
		copy(dst[i*rs:k*rs], srcs[p.Shard][p.Row*rs:(p.Row+k-i)*rs])
		i = k
	}
}

// copyWords copies the rows picks name, each one T, from srcs into dst, a
// word at a time rather than a memmove call each.
func copyWords[T uint32 | uint64](picks []Pick, srcs [][]byte, dst []byte) {
	w := int(unsafe.Sizeof(T(0)))
	out := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(dst))), len(dst)/w)
	for i, p := range picks {
		if i+prefetchWords < len(picks) {
			q := picks[i+prefetchWords]
			memhint.Bytes(srcs[q.Shard][q.Row*w : (q.Row+1)*w])
		}
		src := srcs[p.Shard][p.Row*w : (p.Row+1)*w]
		if w == 8 { // binary loads compile to one move where unaligned loads are allowed
			out[i] = T(binary.NativeEndian.Uint64(src))
		} else {
			out[i] = T(binary.NativeEndian.Uint32(src))
		}
	}
}

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
