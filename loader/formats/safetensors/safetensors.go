// Package safetensors is the loader's format of safetensors shards,
// "safetensors": one .safetensors file per shard, whose tensors are the
// dataset's arrays (by name, the same in every shard), a sample per row of
// their leading dimension. It reads like NPY (loader.NewRowReader): a batch
// holds one array per tensor, its samples' rows back to back, or a view of
// the shard's mapping when the batch is a contiguous run of its rows.
//
// It is also the example of what adding a format takes: this package and
// one line in package formats.
package safetensors

import (
	"context"
	"fmt"
	"strings"

	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	st "github.com/cacheagent/cacheagent/mmapstore/safetensors"
	"github.com/cacheagent/cacheagent/object"
)

// Format is the safetensors format, "safetensors".
var Format loader.Format = format{}

// format is Format.
type format struct{}

// Build implements loader.Format: it reads each file's header (ranged
// reads of its length, then of the header, not through the cache) and
// takes the first shard's tensors, in data order, as the dataset's arrays:
// every shard must hold the same tensors with the same element types and
// row shapes, and its tensors equal leading dimensions. A shard's arrays
// are all its one object.
func (format) Build(ctx context.Context, env loader.Env, loc loader.Location, _ spec.Spec) (loader.Dataset, error) {
	d, attrs, err := loader.ListFiles(ctx, env.Source, loc, "a safetensors shard is one file")
	if err != nil {
		return loader.Dataset{}, err
	}
	headers := make([]*st.File, len(d.Groups))
	err = loader.EachShard(ctx, len(d.Groups), func(ctx context.Context, i int) (err error) {
		headers[i], err = header(ctx, env.Source, attrs[i])
		return err
	})
	if err != nil {
		return loader.Dataset{}, err
	}
	first := headers[0]
	if len(first.Names) == 0 {
		return loader.Dataset{}, fmt.Errorf("%w: %s holds no tensor", loader.ErrDataset, d.Groups[0].Objects[0])
	}
	out := loader.Dataset{Format: Format, Names: first.Names, Groups: make([]loader.Group, len(d.Groups))}
	for _, name := range first.Names {
		a := first.Tensors[name]
		if len(a.Shape) == 0 {
			return loader.Dataset{}, fmt.Errorf("%w: %s: tensor %q is a scalar: no rows", loader.ErrDataset, d.Groups[0].Objects[0], name)
		}
		out.Specs = append(out.Specs, loader.Spec{DType: a.DType, ByteOrder: a.ByteOrder, Row: a.Shape[1:]})
	}
	for i, h := range headers {
		o := d.Groups[i].Objects[0]
		rows, err := rowsOf(out, h, o)
		if err != nil {
			return loader.Dataset{}, err
		}
		objs := make([]object.Object, len(out.Names))
		for j := range objs {
			objs[j] = o
		}
		out.Groups[i] = loader.Group{Objects: objs, Rows: rows}
	}
	return out, nil
}

// header reads and parses the header of the safetensors file a describes.
func header(ctx context.Context, src object.Source, a object.Attrs) (*st.File, error) {
	b, err := loader.ReadPrefix(ctx, src, a, 8)
	if err != nil {
		return nil, err
	}
	n, err := st.HeaderSize(b)
	if err == nil && n > int64(len(b)) {
		if b, err = loader.ReadPrefix(ctx, src, a, n); err != nil {
			return nil, err
		}
	}
	var f *st.File
	if err == nil {
		f, err = st.ParseHeader(b, a.Size)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", loader.ErrDataset, a.Object, err)
	}
	return f, nil
}

// rowsOf checks that shard file h (object o) holds d's tensors, and returns
// their common leading dimension.
func rowsOf(d loader.Dataset, h *st.File, o object.Object) (int, error) {
	if len(h.Names) != len(d.Names) {
		return 0, fmt.Errorf("%w: %s holds tensors %v; the dataset's are %v", loader.ErrDataset, o, h.Names, d.Names)
	}
	rows := -1
	for j, name := range d.Names {
		a, ok := h.Tensors[name]
		if !ok {
			return 0, fmt.Errorf("%w: %s has no tensor %q", loader.ErrDataset, o, name)
		}
		if len(a.Shape) == 0 {
			return 0, fmt.Errorf("%w: %s: tensor %q is a scalar: no rows", loader.ErrDataset, o, name)
		}
		if got := (loader.Spec{DType: a.DType, ByteOrder: a.ByteOrder, Row: a.Shape[1:]}); got.String() != d.Specs[j].String() {
			return 0, fmt.Errorf("%w: %s: tensor %q holds %s; other shards hold %s", loader.ErrDataset, o, name, got, d.Specs[j])
		}
		if rows >= 0 && a.Shape[0] != rows {
			return 0, fmt.Errorf("%w: %s: tensor %q has %d rows but %q has %d", loader.ErrDataset, o, name, a.Shape[0], d.Names[0], rows)
		}
		rows = a.Shape[0]
	}
	return rows, nil
}

// Check implements loader.Format: as NPY, specs for every tensor; every
// array of a shard is its one file.
func (format) Check(d loader.Dataset) (loader.Dataset, error) {
	for i, g := range d.Groups {
		for _, o := range g.Objects[1:] {
			if o != g.Objects[0] {
				return d, fmt.Errorf("%w: safetensors shard %d names two files (%s, %s)", loader.ErrDataset, i, g.Objects[0], o)
			}
		}
	}
	return loader.NPY.Check(d)
}

// NewReader implements loader.Format.
func (format) NewReader(d loader.Dataset, o loader.ReadOptions) (loader.Reader, error) {
	return loader.NewRowReader(d, o, open)
}

// open acquires shard gi's file and returns its tensors in Dataset.Names
// order.
func open(ctx context.Context, src loader.Source, d loader.Dataset, gi int) ([]loader.Lease, []array.Array, error) {
	o := d.Groups[gi].Objects[0]
	ls, err := src.Acquire(ctx, o)
	if err != nil {
		return nil, nil, fmt.Errorf("loader: acquire shard %d (%s): %w", gi, o, err)
	}
	leases := []loader.Lease{ls}
	b, err := loader.LeaseBytes(ls, o)
	if err != nil {
		return nil, nil, loader.ReleaseAll(leases, err)
	}
	f, err := st.Parse(b)
	if err != nil {
		return nil, nil, loader.ReleaseAll(leases, fmt.Errorf("%w: shard %d (%s): %w", loader.ErrDataset, gi, o, err))
	}
	arrays := make([]array.Array, len(d.Names))
	for j, name := range d.Names {
		a, ok := f.Tensors[name]
		if !ok {
			return nil, nil, loader.ReleaseAll(leases, fmt.Errorf("%w: shard %d (%s) has no tensor %q", loader.ErrDataset, gi, o, name))
		}
		arrays[j] = a
	}
	loader.Populate(ls, b)
	return leases, arrays, nil
}

// Name implements loader.Format.
func (format) Name() string { return "safetensors" }

// Guess implements loader.Format: a pattern ending in .safetensors.
func (format) Guess(sp spec.Spec) bool { return strings.HasSuffix(sp.Pattern, ".safetensors") }
