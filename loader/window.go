package loader

import (
	"context"
	"fmt"
	"sort"

	"github.com/cacheagent/cacheagent/internal/memhint"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/mmapstore/megatron"
	"github.com/cacheagent/cacheagent/mmapstore/tokens"
	"github.com/cacheagent/cacheagent/object"
)

// segment is a run of a token dataset's stream that lies contiguously in
// one mapping: tokens [start, start+len(data)/itemsize) of the stream.
type segment struct {
	start int64
	data  []byte
	obj   object.Object // for errors
}

// BytesLease is a Lease that also lends the object's raw bytes, which the
// token and record formats read (mmapstore.Lease and Direct's leases are).
type BytesLease interface {
	Lease
	// Bytes returns the object's bytes, valid until Release.
	Bytes() []byte
}

// tokenOutputs returns a token dataset's batch array name and spec, of
// element type out (0: the tokens' own).
func tokenOutputs(d Dataset, out array.DType) ([]string, []Spec) {
	if out == 0 {
		out = d.Token.DType
	}
	bo := array.Little
	if out.Size() == 1 {
		bo = array.NotApplicable
	}
	return []string{TokensName}, []Spec{{DType: out, ByteOrder: bo, Row: []int{d.Token.SeqLen + 1}}}
}

// tokenEnd returns the end (exclusive) of the tokens the windows of shard
// gi read: up to L tokens past the shard's own, in the shards after it.
func (l *Loader) tokenEnd(gi int) int64 {
	L := int64(l.ds.Token.SeqLen)
	if l.rows[gi] == 0 {
		return l.tokStart[gi+1]
	}
	first := (l.tokStart[gi] + L - 1) / L
	return (first+int64(l.rows[gi])-1)*L + L + 1
}

// spillEnd returns the end (exclusive) of the shards an opening of shard
// gi reads: gi itself and, for a token dataset, the shards its last
// windows run into (up to L tokens past its end).
func (l *Loader) spillEnd(gi int) int {
	g := gi + 1
	if !l.ds.Format.tokens() {
		return g
	}
	end := l.tokenEnd(gi)
	for g < len(l.ds.Groups) && l.tokStart[g] < end {
		g++
	}
	return g
}

// openObjects returns the objects an opening of shard gi acquires, in
// order: the shard's own (in Dataset.Names order), then those of the
// shards its windows spill into. The plan announces them in this order
// and the Stager stages them all before the opening acquires any, so a
// window's second part is never a cold miss.
func (l *Loader) openObjects(gi int) []object.Object {
	end := l.spillEnd(gi)
	if end == gi+1 {
		return l.ds.Groups[gi].Objects
	}
	var objs []object.Object
	for g := gi; g < end; g++ {
		objs = append(objs, l.ds.Groups[g].Objects...)
	}
	return objs
}

// acquireTokens leases shard gi's objects and those of the shards its
// last windows run into, checks them against the dataset and returns the
// segments of the stream they hold. On error it releases what it acquired.
func (l *Loader) acquireTokens(ctx context.Context, gi int) ([]Lease, []segment, error) {
	var leases []Lease
	var segs []segment
	for g, end := gi, l.spillEnd(gi); g < end; g++ {
		objs := l.ds.Groups[g].Objects
		bytes := make([][]byte, len(objs))
		for j, o := range objs {
			ls, err := l.src.Acquire(ctx, o)
			if err != nil {
				return fail(leases, fmt.Errorf("loader: acquire shard %d (%s): %w", g, o, err))
			}
			leases = append(leases, ls)
			bl, ok := ls.(BytesLease)
			if !ok {
				return fail(leases, fmt.Errorf("%w: the Source's leases do not lend bytes (Bytes): %s cannot be read as %s",
					ErrConfig, o, l.ds.Format))
			}
			bytes[j] = bl.Bytes()
		}
		s, err := l.shardSegments(g, bytes)
		if err != nil {
			return fail(leases, err)
		}
		for k, ls := range leases[len(leases)-len(objs):] {
			populate(ls, bytes[k])
		}
		segs = append(segs, s...)
	}
	return leases, segs, nil
}

// fail releases leases and returns err.
func fail(leases []Lease, err error) ([]Lease, []segment, error) {
	for _, ls := range leases {
		ls.Release()
	}
	return nil, nil, err
}

// shardSegments parses shard g's objects (bytes, in Names order) and
// returns the segments of its tokens, checked against the dataset.
func (l *Loader) shardSegments(g int, bytes [][]byte) ([]segment, error) {
	sh, dt := l.ds.Groups[g], l.ds.Token.DType
	if l.ds.Format == FormatTokens {
		o := sh.Objects[0]
		f, err := tokens.Detect(bytes[0], dt)
		if err != nil {
			return nil, fmt.Errorf("%w: shard %d (%s): %w", ErrDataset, g, o, err)
		}
		if f.DType != dt || int64(f.NumTokens()) != sh.Tokens {
			return nil, fmt.Errorf("%w: shard %d (%s) holds %d %s tokens; the dataset says %d %s",
				ErrDataset, g, o, f.NumTokens(), f.DType, sh.Tokens, dt)
		}
		b, _ := f.Bytes(0, f.NumTokens())
		return []segment{{start: l.tokStart[g], data: b, obj: o}}, nil
	}
	binObj, idxObj := l.ds.megatronObjects(g)
	bin, idx := bytes[0], bytes[1]
	if l.ds.Names[0] != "bin" {
		bin, idx = idx, bin
	}
	x, err := megatron.ParseIndex(idx)
	if err != nil {
		return nil, fmt.Errorf("%w: shard %d (%s): %w", ErrDataset, g, idxObj, err)
	}
	if x.DType != dt || x.TotalTokens() != sh.Tokens {
		return nil, fmt.Errorf("%w: shard %d (%s) holds %d %s tokens; the dataset says %d %s",
			ErrDataset, g, idxObj, x.TotalTokens(), x.DType, sh.Tokens, dt)
	}
	if err := x.Validate(int64(len(bin))); err != nil {
		return nil, fmt.Errorf("%w: shard %d: %s against %s: %w", ErrDataset, g, idxObj, binObj, err)
	}
	// Sequences in index order, merged into maximal contiguous runs of
	// the .bin (all of it, for the datasets Megatron's builder writes).
	var segs []segment
	size := int64(x.ItemSize)
	var runOff, runEnd int64 // the current run's bytes in bin
	for i := range x.NumSequences() {
		off, n := x.Sequence(i)
		if n == 0 {
			continue
		}
		if k := len(segs) - 1; k >= 0 && off == runEnd {
			runEnd += n * size
			segs[k].data = bin[runOff:runEnd:runEnd]
			continue
		}
		runOff, runEnd = off, off+n*size
		segs = append(segs, segment{data: bin[runOff:runEnd:runEnd], obj: binObj})
	}
	return fixStarts(segs, l.tokStart[g], size), nil
}

// fixStarts sets each segment's start from the lengths of those before
// it, from first on.
func fixStarts(segs []segment, first, size int64) []segment {
	for i := range segs {
		segs[i].start = first
		first += int64(len(segs[i].data)) / size
	}
	return segs
}

// copyWindows copies s's windows into its buffer: window id k is tokens
// [kL, kL+L+1) of the stream, read from the segments of its shard (which
// include the start of the shards after it). Windows overlap by a token,
// so a batch is never a view of the mapping: it is always copied.
func (l *Loader) copyWindows(s *slot) error {
	L := int64(l.ds.Token.SeqLen)
	item := l.ds.Token.DType.Size()
	rs := l.rowSize[0]
	n := len(s.picks)
	dst := s.bufs[0][: n*rs : n*rs]
	for i, p := range s.picks {
		if i+1 < n {
			q := s.picks[i+1]
			prefetchWindow(s.groups[q.g].segs, s.batch.IDs[i+1]*L, item)
		}
		if err := l.copyWindow(dst[i*rs:(i+1)*rs], s.groups[p.g].segs, s.batch.IDs[i]*L, item); err != nil {
			return fmt.Errorf("loader: window %d: %w", s.batch.IDs[i], err)
		}
	}
	s.shapes[0][0] = n
	s.batch.Arrays[0] = array.Array{DType: l.specs[0].DType, Shape: s.shapes[0], Order: array.C,
		ByteOrder: l.specs[0].ByteOrder, Data: dst}
	l.counters.gathered.Add(int64(len(dst)))
	return nil
}

// find returns the index of the segment holding token t, or len(segs).
func find(segs []segment, t int64, item int) int {
	return sort.Search(len(segs), func(j int) bool {
		return segs[j].start+int64(len(segs[j].data)/item) > t
	})
}

// prefetchWindow hints the first line of the window at token t.
func prefetchWindow(segs []segment, t int64, item int) {
	if j := find(segs, t, item); j < len(segs) && segs[j].start <= t {
		off := (t - segs[j].start) * int64(item)
		memhint.Bytes(segs[j].data[off : off+1])
	}
}

// copyTokens fills dst with the tokens from t on, across segments.
func copyTokens(dst []byte, segs []segment, t int64, item int) error {
	j := find(segs, t, item)
	for len(dst) > 0 {
		if j >= len(segs) || segs[j].start > t {
			return fmt.Errorf("%w: token %d is in no mapped segment (a gap in the stream)", ErrDataset, t)
		}
		c := copy(dst, segs[j].data[(t-segs[j].start)*int64(item):])
		dst = dst[c:]
		t += int64(c / item)
		j++
	}
	return nil
}
