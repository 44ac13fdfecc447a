package loader

import (
	"context"
	"fmt"

	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/object"
)

// NPY is the loader's own format, and the default: shards of fixed-shape
// .npy arrays, one sample per row, the arrays of a shard named by the
// pattern's braces (see FromPattern) or listed in a manifest. A batch
// holds one array per name, its samples' rows back to back; a batch that
// is a contiguous run of rows of one shard aliases the shard's mapping
// instead (Batch.ZeroCopy).
var NPY Format = npyFormat{}

// npyFormat is NPY.
type npyFormat struct{}

// Name implements Format.
func (npyFormat) Name() string { return "npy" }

// Guess implements Format: NPY is the fallback.
func (npyFormat) Guess(spec.Spec) bool { return true }

// Build implements Format: FromPattern.
func (npyFormat) Build(ctx context.Context, env Env, loc Location, _ spec.Spec) (Dataset, error) {
	return FromPattern(ctx, env.Source, loc.Bucket, loc.Prefix, loc.Pattern)
}

// Check implements Format: specs, if present, for every name, each with a
// valid element type and row shape.
func (npyFormat) Check(d Dataset) (Dataset, error) {
	if d.Specs == nil {
		return d, nil
	}
	if len(d.Specs) != len(d.Names) {
		return d, fmt.Errorf("%w: %d specs for %d arrays", ErrDataset, len(d.Specs), len(d.Names))
	}
	for j, s := range d.Specs {
		if _, ok := array.DataSize(s.DType, s.Row); !ok {
			return d, fmt.Errorf("%w: array %s: invalid spec %s", ErrDataset, d.Names[j], s)
		}
	}
	return d, nil
}

// NewReader implements Format.
func (npyFormat) NewReader(d Dataset, o ReadOptions) (Reader, error) {
	switch {
	case !d.resolved():
		return nil, fmt.Errorf("%w: row counts or specs unknown: call Dataset.Resolve", ErrDataset)
	case o.TokenOut != 0:
		return nil, fmt.Errorf("%w: token output type %s for a npy dataset", ErrConfig, o.TokenOut)
	}
	r := &npyReader{ds: d, copyAlways: o.CopyAlways, rowSize: make([]int, len(d.Specs))}
	for j, sp := range d.Specs {
		r.rowSize[j] = sp.RowSize()
		r.layout.Arrays = append(r.layout.Arrays, ArrayLayout{Name: d.Names[j], Spec: sp})
	}
	return r, nil
}

// npyReader is NPY's Reader.
type npyReader struct {
	ds         Dataset
	layout     Layout
	rowSize    []int
	copyAlways bool
}

// npyShard is an opened NPY shard: its arrays, index-aligned with
// Dataset.Names.
type npyShard struct {
	leases []Lease
	arrays []array.Array
}

// Leases implements Shard.
func (s *npyShard) Leases() []Lease { return s.leases }

// Layout implements Reader.
func (r *npyReader) Layout() Layout { return r.layout }

// Objects implements Reader: the shard's arrays.
func (r *npyReader) Objects(i int) []object.Object { return r.ds.Groups[i].Objects }

// Open implements Reader: it leases every array of shard gi and checks it
// against the dataset.
func (r *npyReader) Open(ctx context.Context, src Source, gi int) (Shard, error) {
	sh := r.ds.Groups[gi]
	s := &npyShard{leases: make([]Lease, 0, len(sh.Objects)), arrays: make([]array.Array, len(sh.Objects))}
	for j, o := range sh.Objects {
		ls, err := src.Acquire(ctx, o)
		if err != nil {
			return nil, Release(s.leases, fmt.Errorf("loader: acquire shard %d array %s: %w", gi, r.ds.Names[j], err))
		}
		s.leases = append(s.leases, ls)
		a, err := ls.Array()
		if err != nil {
			return nil, Release(s.leases, fmt.Errorf("loader: shard %d array %s: %w", gi, r.ds.Names[j], err))
		}
		if err := r.check(gi, j, o, a); err != nil {
			return nil, Release(s.leases, err)
		}
		Populate(ls, a.Data)
		s.arrays[j] = a
	}
	return s, nil
}

// check verifies that array a, the object o of name j in shard gi, is what
// the dataset says.
func (r *npyReader) check(gi, j int, o object.Object, a array.Array) error {
	if err := checkLayout(a.Shape, a.Order); err != nil {
		return fmt.Errorf("shard %d array %s (%s): %w", gi, r.ds.Names[j], o, err)
	}
	if s := specOf(a.DType, a.ByteOrder, a.Shape); !s.equal(r.ds.Specs[j]) {
		return fmt.Errorf("%w: shard %d array %s (%s) holds %s; the dataset says %s",
			ErrDataset, gi, r.ds.Names[j], o, s, r.ds.Specs[j])
	}
	if rows := r.ds.Groups[gi].Rows; a.Shape[0] != rows {
		return fmt.Errorf("%w: shard %d array %s (%s) has %d rows; the dataset says %d",
			ErrDataset, gi, r.ds.Names[j], o, a.Shape[0], rows)
	}
	return nil
}

// Gather implements Reader: views of the shard (zero-copy) when the batch
// is one contiguous run of rows of one shard, else copies of the rows.
func (r *npyReader) Gather(g *Gather) error {
	if r.zeroCopy(g) {
		g.Batch.ZeroCopy, g.Keep = true, true
		return nil
	}
	r.copyRows(g)
	return nil
}

// zeroCopy makes g's arrays views of its shard if the batch is one
// contiguous run of rows of one shard, and reports whether it did.
func (r *npyReader) zeroCopy(g *Gather) bool {
	if r.copyAlways || len(g.Shards) != 1 {
		return false
	}
	row0 := g.Picks[0].Row
	for i, p := range g.Picks {
		if p.Row != row0+i {
			return false
		}
	}
	n, sh := len(g.Picks), g.Shards[0].(*npyShard)
	for j, a := range sh.arrays {
		rs := r.rowSize[j]
		g.Shapes[j][0] = n
		g.Batch.Arrays[j] = array.Array{DType: a.DType, Shape: g.Shapes[j], Order: array.C,
			ByteOrder: a.ByteOrder, Data: a.Data[row0*rs : (row0+n)*rs : (row0+n)*rs],
			Offset: a.Offset + int64(row0*rs)}
	}
	return true
}
