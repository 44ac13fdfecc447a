package loader

import (
	"context"
	"fmt"
	"slices"

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

// NewReader implements Format: a row reader over the shards' .npy arrays.
func (npyFormat) NewReader(d Dataset, o ReadOptions) (Reader, error) {
	return NewRowReader(d, o, openNPY)
}

// openNPY acquires each array of shard gi as a .npy file.
func openNPY(ctx context.Context, src Source, d Dataset, gi int) ([]Lease, []array.Array, error) {
	sh := d.Groups[gi]
	leases := make([]Lease, 0, len(sh.Objects))
	arrays := make([]array.Array, len(sh.Objects))
	for j, o := range sh.Objects {
		ls, err := src.Acquire(ctx, o)
		if err != nil {
			return nil, nil, ReleaseAll(leases, fmt.Errorf("loader: acquire shard %d array %s: %w", gi, d.Names[j], err))
		}
		leases = append(leases, ls)
		if arrays[j], err = ls.Array(); err != nil {
			return nil, nil, ReleaseAll(leases, fmt.Errorf("loader: shard %d array %s: %w", gi, d.Names[j], err))
		}
		Populate(ls, arrays[j].Data)
	}
	return leases, arrays, nil
}

// RowOpener acquires shard i of d through src and returns the leases it
// took (populated: Populate) and the shard's arrays, one per
// Dataset.Names, a sample per row (leading index). The row reader checks
// them against the dataset.
type RowOpener func(ctx context.Context, src Source, d Dataset, i int) ([]Lease, []array.Array, error)

// NewRowReader returns the Reader of a dataset of fixed-shape arrays, a
// sample per row: d.Names with d.Specs (known: see Dataset.Resolve), each
// shard's arrays opened by open. A batch holds one array per name, its
// samples' rows back to back; a batch that is a contiguous run of rows of
// one shard aliases the shard's mapping instead (Batch.ZeroCopy, unless
// CopyAlways). NPY reads with it, and so can any format whose shards hold
// such arrays (safetensors).
func NewRowReader(d Dataset, o ReadOptions, open RowOpener) (Reader, error) {
	switch {
	case !d.resolved():
		return nil, fmt.Errorf("%w: row counts or specs unknown: call Dataset.Resolve", ErrDataset)
	case o.TokenOut != 0:
		return nil, fmt.Errorf("%w: token output type %s for a %s dataset", ErrConfig, o.TokenOut, d.format().Name())
	}
	r := &rowReader{ds: d, open: open, copyAlways: o.CopyAlways, rowSize: make([]int, len(d.Specs))}
	for j, sp := range d.Specs {
		r.rowSize[j] = sp.RowSize()
		r.layout.Arrays = append(r.layout.Arrays, ArrayLayout{Name: d.Names[j], Spec: sp})
	}
	return r, nil
}

// rowReader is the Reader of NewRowReader.
type rowReader struct {
	ds         Dataset
	open       RowOpener
	layout     Layout
	rowSize    []int
	copyAlways bool
}

// rowShard is an opened shard of a row reader: its arrays, index-aligned
// with Dataset.Names.
type rowShard struct {
	leases []Lease
	arrays []array.Array
}

// Leases implements Shard.
func (s *rowShard) Leases() []Lease { return s.leases }

// Layout implements Reader.
func (r *rowReader) Layout() Layout { return r.layout }

// Objects implements Reader: the shard's objects, each once (a format may
// hold several arrays in one object).
func (r *rowReader) Objects(i int) []object.Object {
	objs := r.ds.Groups[i].Objects
	for j := 1; j < len(objs); j++ {
		if slices.Contains(objs[:j], objs[j]) {
			return uniq(objs)
		}
	}
	return objs
}

// uniq returns objs without repeats, in order.
func uniq(objs []object.Object) []object.Object {
	var out []object.Object
	for _, o := range objs {
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// Open implements Reader: it opens shard gi and checks every array against
// the dataset.
func (r *rowReader) Open(ctx context.Context, src Source, gi int) (Shard, error) {
	leases, arrays, err := r.open(ctx, src, r.ds, gi)
	if err != nil {
		return nil, err
	}
	if len(arrays) != len(r.ds.Names) {
		return nil, ReleaseAll(leases, fmt.Errorf("%w: shard %d opened %d arrays for %d names", ErrDataset, gi, len(arrays), len(r.ds.Names)))
	}
	for j, a := range arrays {
		if err := r.check(gi, j, r.ds.Groups[gi].Objects[j], a); err != nil {
			return nil, ReleaseAll(leases, err)
		}
	}
	return &rowShard{leases: leases, arrays: arrays}, nil
}

// check verifies that array a, the object o of name j in shard gi, is what
// the dataset says.
func (r *rowReader) check(gi, j int, o object.Object, a array.Array) error {
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
func (r *rowReader) Gather(g *Gather) error {
	if r.zeroCopy(g) {
		g.Batch.ZeroCopy, g.Keep = true, true
		return nil
	}
	r.copyRows(g)
	return nil
}

// zeroCopy makes g's arrays views of its shard if the batch is one
// contiguous run of rows of one shard, and reports whether it did.
func (r *rowReader) zeroCopy(g *Gather) bool {
	if r.copyAlways || len(g.Shards) != 1 {
		return false
	}
	row0 := g.Picks[0].Row
	for i, p := range g.Picks {
		if p.Row != row0+i {
			return false
		}
	}
	n, sh := len(g.Picks), g.Shards[0].(*rowShard)
	for j, a := range sh.arrays {
		rs := r.rowSize[j]
		g.Shapes[j][0] = n
		g.Batch.Arrays[j] = array.Array{DType: a.DType, Shape: g.Shapes[j], Order: array.C,
			ByteOrder: a.ByteOrder, Data: a.Data[row0*rs : (row0+n)*rs : (row0+n)*rs],
			Offset: a.Offset + int64(row0*rs)}
	}
	return true
}
