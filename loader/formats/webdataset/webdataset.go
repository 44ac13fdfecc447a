// Package webdataset is the loader's format of WebDataset tar shards,
// "webdataset": one tar per shard, its samples the tar's samples (members
// grouped by their name before the first dot), their fields variable-length
// bytes. A batch holds Batch.Fields, in Arrow's binary layout (offsets and
// data), copied into the batch's buffers or (Config.RecordViews) views of
// the mapping.
package webdataset

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/spec"
	wds "github.com/cacheagent/cacheagent/mmapstore/webdataset"
	"github.com/cacheagent/cacheagent/object"
)

// Format is the WebDataset format, "webdataset".
var Format loader.Format = wdsFormat{}

// wdsFormat is Format.
type wdsFormat struct{}

// Build implements loader.Format: each tar's member index comes from
// env.Index (validated with wds.UnmarshalShard against the listed size;
// rebuilt if it does not decode) or from scanning the tar acquired through
// env.Records, and is then saved to env.Index.
func (wdsFormat) Build(ctx context.Context, env loader.Env, loc loader.Location, _ spec.Spec) (loader.Dataset, error) {
	d, attrs, err := loader.ListFiles(ctx, env.Source, loc, "a WebDataset shard is one tar")
	if err != nil {
		return loader.Dataset{}, err
	}
	d.Format = Format
	err = loader.EachShard(ctx, len(d.Groups), func(ctx context.Context, i int) error {
		x, err := tarIndex(ctx, attrs[i], env)
		if err != nil {
			return err
		}
		d.Groups[i].Index, d.Groups[i].Rows = x, x.NumSamples()
		return nil
	})
	if err != nil {
		return loader.Dataset{}, err
	}
	for _, sh := range d.Groups {
		for _, f := range sh.Index.(*wds.Shard).Fields() {
			if !slices.Contains(d.Fields, f) {
				d.Fields = append(d.Fields, f)
			}
		}
	}
	return d, d.Validate()
}

// tarIndex returns the index of the tar a describes.
func tarIndex(ctx context.Context, a object.Attrs, env loader.Env) (*wds.Shard, error) {
	if env.Index != nil {
		if b, ok := env.Index.Load(a.Object); ok {
			if x, err := wds.UnmarshalShard(b, a.Size); err == nil {
				return x, nil
			}
		}
	}
	if env.Records == nil {
		return nil, fmt.Errorf("%w: %s has no saved index", loader.ErrNoRecords, a.Object)
	}
	ls, err := env.Records.Acquire(ctx, a.Object)
	if err != nil {
		return nil, fmt.Errorf("loader: acquire %s: %w", a.Object, err)
	}
	defer ls.Release()
	b, err := loader.LeaseBytes(ls, a.Object)
	if err != nil {
		return nil, err
	}
	x, err := wds.Index(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", loader.ErrDataset, a.Object, err)
	}
	if x.ObjectSize() != a.Size {
		return nil, fmt.Errorf("%w: %s is %d bytes; %d were listed", loader.ErrDataset, a.Object, x.ObjectSize(), a.Size)
	}
	if env.Index != nil {
		b, _ := x.MarshalBinary()
		if err := env.Index.Store(a.Object, b); err != nil {
			return nil, fmt.Errorf("loader: save the index of %s: %w", a.Object, err)
		}
	}
	return x, nil
}

// Check implements loader.Format.
func (wdsFormat) Check(d loader.Dataset) (loader.Dataset, error) {
	if len(d.Names) != 1 || len(d.Specs) != 0 {
		return d, fmt.Errorf("%w: a WebDataset shard is one tar object, with no array specs", loader.ErrDataset)
	}
	for i, n := range d.Fields {
		if n == "" || slices.Contains(d.Fields[:i], n) {
			return d, fmt.Errorf("%w: field name %q is empty or repeated", loader.ErrDataset, n)
		}
	}
	for i, g := range d.Groups {
		if _, ok := g.Index.(*wds.Shard); g.Index != nil && !ok {
			return d, fmt.Errorf("%w: shard %d's index is a %T, not a tar's", loader.ErrDataset, i, g.Index)
		}
	}
	return d, nil
}

// NewReader implements loader.Format.
func (wdsFormat) NewReader(d loader.Dataset, o loader.ReadOptions) (loader.Reader, error) {
	if o.TokenOut != 0 {
		return nil, fmt.Errorf("%w: token output type %s for a webdataset dataset", loader.ErrConfig, o.TokenOut)
	}
	r := &reader{ds: d, views: o.RecordViews, fixed: o.FixedFields}
	var sizes []int
	if o.FixedFields {
		if o.FieldBytes > 0 {
			sizes = make([]int, len(d.Fields))
			for j := range sizes {
				sizes[j] = o.FieldBytes
			}
		} else {
			var err error
			if sizes, err = FieldBytes(d, o.BatchSize); err != nil {
				return nil, err
			}
		}
	}
	for j, f := range d.Fields {
		fl := loader.FieldLayout{Name: f}
		if sizes != nil {
			fl.Bytes = sizes[j]
		}
		r.layout.Fields = append(r.layout.Fields, fl)
	}
	return r, nil
}

// FieldBytes returns, for each of a WebDataset dataset's fields, batch ×
// its largest member in the shards' indexes: the most bytes the field can
// hold in a batch of batch samples. Every shard must have its Index.
func FieldBytes(d loader.Dataset, batch int) ([]int, error) {
	largest := make([]int64, len(d.Fields))
	for gi, g := range d.Groups {
		x, ok := g.Index.(*wds.Shard)
		if !ok {
			return nil, fmt.Errorf("%w: shard %d (%s) has no index: set field_bytes (Config.FieldBytes)",
				loader.ErrConfig, gi, g.Objects[0])
		}
		for i := range x.NumSamples() {
			for _, f := range x.Sample(i).Fields {
				if j := slices.Index(d.Fields, f.Name); j >= 0 {
					largest[j] = max(largest[j], f.Size)
				}
			}
		}
	}
	out := make([]int, len(largest))
	for j, n := range largest {
		if n > 0 && int64(batch) > (1<<46)/n {
			return nil, fmt.Errorf("%w: field %q: %d samples of up to %d bytes", loader.ErrConfig, d.Fields[j], batch, n)
		}
		out[j] = int(max(int64(batch)*n, 1))
	}
	return out, nil
}

// reader is the WebDataset Reader.
type reader struct {
	ds     loader.Dataset
	layout loader.Layout
	views  bool // fields are views of the mappings
	fixed  bool // fields are gathered into fixed buffers
}

// shard is an opened tar: its lease, bytes and index.
type shard struct {
	leases []loader.Lease
	b      []byte
	x      *wds.Shard
}

// Leases implements loader.Shard.
func (s *shard) Leases() []loader.Lease { return s.leases }

// Layout implements loader.Reader: one variable-length field per
// Dataset.Fields.
func (r *reader) Layout() loader.Layout { return r.layout }

// Objects implements loader.Reader: the tar.
func (r *reader) Objects(i int) []object.Object { return r.ds.Groups[i].Objects }

// Open implements loader.Reader: it leases shard gi's tar and checks it
// against its index (built now if the dataset has none).
func (r *reader) Open(ctx context.Context, src loader.Source, gi int) (loader.Shard, error) {
	sh := r.ds.Groups[gi]
	o := sh.Objects[0]
	ls, err := src.Acquire(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("loader: acquire shard %d (%s): %w", gi, o, err)
	}
	leases := []loader.Lease{ls}
	b, err := loader.LeaseBytes(ls, o)
	if err != nil {
		return nil, loader.ReleaseAll(leases, err)
	}
	x, _ := sh.Index.(*wds.Shard)
	if x == nil {
		if x, err = wds.Index(b); err != nil {
			return nil, loader.ReleaseAll(leases, fmt.Errorf("%w: shard %d (%s): %w", loader.ErrDataset, gi, o, err))
		}
	}
	if x.ObjectSize() != int64(len(b)) || x.NumSamples() != sh.Rows {
		return nil, loader.ReleaseAll(leases, fmt.Errorf("%w: shard %d (%s) is %d bytes; its index describes %d bytes with %d samples, the dataset %d samples",
			loader.ErrDataset, gi, o, len(b), x.ObjectSize(), x.NumSamples(), sh.Rows))
	}
	loader.Populate(ls, b)
	return &shard{leases: leases, b: b, x: x}, nil
}

// Gather implements loader.Reader: it fills the batch's fields with copies
// into its buffers (Arrow's binary layout), or, with RecordViews, views of
// the mappings (the batch then keeps its shards). With fixed buffers, a
// field that outgrows its buffer fails the batch.
func (r *reader) Gather(g *loader.Gather) error {
	b := g.Batch
	for j, name := range r.ds.Fields {
		f := &b.Fields[j]
		if r.views {
			f.Views = f.Views[:0]
		} else {
			f.Offsets, f.Data = append(f.Offsets[:0], 0), f.Data[:0]
		}
		for i, p := range g.Picks {
			s := g.Shards[p.Shard].(*shard)
			v, ok := s.x.Sample(p.Row).Field(name)
			var val []byte
			if ok {
				val = s.b[v.Offset : v.Offset+v.Size : v.Offset+v.Size]
			}
			if r.views {
				f.Views = append(f.Views, val)
				continue
			}
			if r.fixed && len(val) > cap(f.Data)-len(f.Data) {
				return fmt.Errorf("%w: batch %d of epoch %d, field %q: sample %d (id %d) brings it past %d bytes",
					loader.ErrFieldBytes, b.Index, b.Epoch, name, i, b.IDs[i], cap(f.Data))
			}
			f.Data = append(f.Data, val...)
			f.Offsets = append(f.Offsets, int64(len(f.Data)))
		}
		g.Copied += int64(len(f.Data))
	}
	b.ZeroCopy, g.Keep = r.views, r.views
	return nil
}

// Name implements loader.Format.
func (wdsFormat) Name() string { return "webdataset" }

// Guess implements loader.Format: a pattern ending in .tar.
func (wdsFormat) Guess(sp spec.Spec) bool { return strings.HasSuffix(sp.Pattern, ".tar") }
