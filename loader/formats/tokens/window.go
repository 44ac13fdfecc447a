package tokens

import (
	"context"
	"fmt"
	"sort"

	"github.com/cacheagent/cacheagent/internal/memhint"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/object"
)

// Segment is a run of a token dataset's stream that lies contiguously in
// one mapping: tokens [Start, Start+len(Data)/itemsize) of the stream.
type Segment struct {
	Start  int64
	Data   []byte
	Object object.Object // for errors
}

// SegmentsFunc parses shard g's objects (b: their bytes, in Dataset.Names
// order), checks them against d, and returns the segments of its tokens,
// the first starting at token start of the stream.
type SegmentsFunc func(d loader.Dataset, g int, b [][]byte, start int64) ([]Segment, error)

// FixStarts sets each segment's Start from the lengths of those before it,
// from first on, for tokens of size bytes.
func FixStarts(segs []Segment, first, size int64) []Segment {
	for i := range segs {
		segs[i].Start = first
		first += int64(len(segs[i].Data)) / size
	}
	return segs
}

// windowReader is the Reader of every token format: windows of the
// stream, from the segments its format's SegmentsFunc finds in each shard.
type windowReader struct {
	ds       loader.Dataset
	layout   loader.Layout
	out      array.DType // the batch's element type: the tokens', or wider
	rowSize  int
	tokStart []int64 // each shard's first token, then the total
	segments SegmentsFunc
}

// shard is an opened token shard: the segments of the tokens its windows
// read, its own and those of the shards they run into.
type shard struct {
	leases []loader.Lease
	segs   []Segment
}

// Leases implements loader.Shard.
func (s *shard) Leases() []loader.Lease { return s.leases }

// NewReader returns the Reader of a token dataset d (checked), whose
// shards' tokens segments finds.
func NewReader(d loader.Dataset, o loader.ReadOptions, segments SegmentsFunc) (loader.Reader, error) {
	out := o.TokenOut
	if out == 0 {
		out = d.Token.DType
	} else if !widens(d.Token.DType, out) {
		return nil, fmt.Errorf("%w: %s tokens cannot be output as %s (want int64, or int32 for tokens of at most 16 bits)",
			loader.ErrConfig, d.Token.DType, out)
	}
	bo := array.Little
	if out.Size() == 1 {
		bo = array.NotApplicable
	}
	sp := loader.Spec{DType: out, ByteOrder: bo, Row: []int{d.Token.SeqLen + 1}}
	r := &windowReader{ds: d, out: out, rowSize: sp.RowSize(), segments: segments,
		layout: loader.Layout{Arrays: []loader.ArrayLayout{{Name: ArrayName, Spec: sp}}}}
	r.tokStart = make([]int64, len(d.Groups)+1)
	for i, g := range d.Groups {
		r.tokStart[i+1] = r.tokStart[i] + g.Tokens
	}
	return r, nil
}

// Layout implements loader.Reader: one array, ArrayName.
func (r *windowReader) Layout() loader.Layout { return r.layout }

// tokenEnd returns the end (exclusive) of the tokens the windows of shard
// gi read: up to L tokens past the shard's own, in the shards after it.
func (r *windowReader) tokenEnd(gi int) int64 {
	L := int64(r.ds.Token.SeqLen)
	rows := r.ds.Groups[gi].Rows
	if rows == 0 {
		return r.tokStart[gi+1]
	}
	first := (r.tokStart[gi] + L - 1) / L
	return (first+int64(rows)-1)*L + L + 1
}

// spillEnd returns the end (exclusive) of the shards an opening of shard
// gi reads: gi itself and the shards its last windows run into (up to L
// tokens past its end).
func (r *windowReader) spillEnd(gi int) int {
	end := r.tokenEnd(gi)
	g := gi + 1
	for g < len(r.ds.Groups) && r.tokStart[g] < end {
		g++
	}
	return g
}

// Objects implements loader.Reader: the shard's own objects (in
// Dataset.Names order), then those of the shards its windows spill into.
// The plan announces them in this order and the Stager stages them all
// before the opening acquires any, so a window's second part is never a
// cold miss.
func (r *windowReader) Objects(gi int) []object.Object {
	end := r.spillEnd(gi)
	if end == gi+1 {
		return r.ds.Groups[gi].Objects
	}
	var objs []object.Object
	for g := gi; g < end; g++ {
		objs = append(objs, r.ds.Groups[g].Objects...)
	}
	return objs
}

// Open implements loader.Reader: it leases shard gi's objects and those
// of the shards its last windows run into, and finds the segments of the
// stream they hold.
func (r *windowReader) Open(ctx context.Context, src loader.Source, gi int) (loader.Shard, error) {
	s := &shard{}
	for g, end := gi, r.spillEnd(gi); g < end; g++ {
		objs := r.ds.Groups[g].Objects
		bytes := make([][]byte, len(objs))
		for j, o := range objs {
			ls, err := src.Acquire(ctx, o)
			if err != nil {
				return nil, loader.ReleaseAll(s.leases, fmt.Errorf("loader: acquire shard %d (%s): %w", g, o, err))
			}
			s.leases = append(s.leases, ls)
			if bytes[j], err = loader.LeaseBytes(ls, o); err != nil {
				return nil, loader.ReleaseAll(s.leases, err)
			}
		}
		segs, err := r.segments(r.ds, g, bytes, r.tokStart[g])
		if err != nil {
			return nil, loader.ReleaseAll(s.leases, err)
		}
		for k, ls := range s.leases[len(s.leases)-len(objs):] {
			loader.Populate(ls, bytes[k])
		}
		s.segs = append(s.segs, segs...)
	}
	return s, nil
}

// Gather implements loader.Reader: window id k is tokens [kL, kL+L+1) of
// the stream, read from the segments of its shard (which include the
// start of the shards after it). Windows overlap by a token, so a batch is
// never a view of the mapping: it is always copied.
func (r *windowReader) Gather(g *loader.Gather) error {
	L := int64(r.ds.Token.SeqLen)
	item := r.ds.Token.DType.Size()
	rs := r.rowSize
	n := len(g.Picks)
	ids := g.Batch.IDs
	dst := g.Buffers[0][: n*rs : n*rs]
	for i, p := range g.Picks {
		if i+1 < n {
			q := g.Picks[i+1]
			prefetchWindow(g.Shards[q.Shard].(*shard).segs, ids[i+1]*L, item)
		}
		if err := r.copyWindow(dst[i*rs:(i+1)*rs], g.Shards[p.Shard].(*shard).segs, ids[i]*L, item); err != nil {
			return fmt.Errorf("loader: window %d: %w", ids[i], err)
		}
	}
	sp := r.layout.Arrays[0].Spec
	g.Shapes[0][0] = n
	g.Batch.Arrays[0] = array.Array{DType: sp.DType, Shape: g.Shapes[0], Order: array.C, ByteOrder: sp.ByteOrder, Data: dst}
	g.Copied = int64(len(dst))
	return nil
}

// find returns the index of the segment holding token t, or len(segs).
func find(segs []Segment, t int64, item int) int {
	return sort.Search(len(segs), func(j int) bool {
		return segs[j].Start+int64(len(segs[j].Data)/item) > t
	})
}

// prefetchWindow hints the first line of the window at token t.
func prefetchWindow(segs []Segment, t int64, item int) {
	if j := find(segs, t, item); j < len(segs) && segs[j].Start <= t {
		off := (t - segs[j].Start) * int64(item)
		memhint.Bytes(segs[j].Data[off : off+1])
	}
}

// copyTokens fills dst with the tokens from t on, across segments.
func copyTokens(dst []byte, segs []Segment, t int64, item int) error {
	j := find(segs, t, item)
	for len(dst) > 0 {
		if j >= len(segs) || segs[j].Start > t {
			return fmt.Errorf("%w: token %d is in no mapped segment (a gap in the stream)", loader.ErrDataset, t)
		}
		c := copy(dst, segs[j].Data[(t-segs[j].Start)*int64(item):])
		dst = dst[c:]
		t += int64(c / item)
		j++
	}
	return nil
}
