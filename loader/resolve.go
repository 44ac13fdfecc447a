package loader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/mmapstore/npy"
	"github.com/cacheagent/cacheagent/object"
)

const (
	// headerProbe is how much of an object a header read asks for first;
	// numpy's headers are 128 bytes for ordinary arrays.
	headerProbe = 4096
	// headerMax bounds the second read, for headers up to npy's limit.
	headerMax = 64<<10 + 16
	// HeaderParallelism bounds a dataset's concurrent header reads.
	HeaderParallelism = 16
)

// Resolve returns d with every unknown row count (Rows == 0) and the specs
// filled in from the objects' .npy headers, read from src with small
// ranged reads (not through the cache): all arrays of the groups with
// unknown rows, and the first group's if the specs are missing. It checks
// what it reads: the arrays of a group must have equal leading dimensions,
// and element types and row shapes must agree across groups and with any
// row count given. Groups whose rows were given are checked when the
// loader opens them. d is not modified. Errors wrap ErrDataset, or the
// source's errors (object.ErrNotFound for a missing shard).
func (d Dataset) Resolve(ctx context.Context, src object.Source) (Dataset, error) {
	if err := d.Validate(); err != nil {
		return Dataset{}, err
	}
	out := Dataset{Names: slices.Clone(d.Names), Groups: slices.Clone(d.Groups), Specs: slices.Clone(d.Specs)}
	var idx []int
	for i, g := range out.Groups {
		if g.Rows == 0 || (i == 0 && len(out.Specs) == 0) {
			idx = append(idx, i)
		}
	}
	hs, err := readHeaders(ctx, src, out, idx, nil)
	if err != nil {
		return Dataset{}, err
	}
	return out, out.apply(idx, hs)
}

// readHeaders reads the headers of every object of the groups idx. Objects
// found in listed are not stat'ed first.
func readHeaders(ctx context.Context, src object.Source, d Dataset, idx []int,
	listed map[object.Object]object.Attrs) ([][]npy.Header, error) {
	hs := make([][]npy.Header, len(idx))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(HeaderParallelism)
	for k, gi := range idx {
		hs[k] = make([]npy.Header, len(d.Names))
		for j, o := range d.Groups[gi].Objects {
			g.Go(func() error {
				a, ok := listed[o]
				if !ok {
					var err error
					if a, err = src.Stat(ctx, o); err != nil {
						return fmt.Errorf("loader: shard %d array %s: %w", gi, d.Names[j], err)
					}
				}
				h, err := readHeader(ctx, src, a)
				if err != nil {
					return fmt.Errorf("shard %d array %s: %w", gi, d.Names[j], err)
				}
				hs[k][j] = h
				return nil
			})
		}
	}
	return hs, g.Wait()
}

// readHeader reads and checks the .npy header of the object a describes.
func readHeader(ctx context.Context, src object.Source, a object.Attrs) (npy.Header, error) {
	b, err := ReadPrefix(ctx, src, a, headerProbe)
	if err != nil {
		return npy.Header{}, err
	}
	h, err := npy.ParseHeader(b)
	if errors.Is(err, npy.ErrTruncated) && int64(len(b)) < a.Size {
		if b, err = ReadPrefix(ctx, src, a, headerMax); err != nil {
			return npy.Header{}, err
		}
		h, err = npy.ParseHeader(b)
	}
	if err != nil {
		return npy.Header{}, fmt.Errorf("%w: %s: %w", ErrDataset, a.Object, err)
	}
	if int64(h.DataOffset)+int64(h.DataSize) != a.Size {
		return npy.Header{}, fmt.Errorf("%w: %s is %d bytes; its header describes %d",
			ErrDataset, a.Object, a.Size, h.DataOffset+h.DataSize)
	}
	if err := checkLayout(h.Shape, h.Order); err != nil {
		return npy.Header{}, fmt.Errorf("%s: %w", a.Object, err)
	}
	return h, nil
}

// ReadPrefix reads up to n bytes from the start of a, with one ranged read
// (not through the cache): formats read their shards' headers with it.
func ReadPrefix(ctx context.Context, src object.Source, a object.Attrs, n int64) ([]byte, error) {
	n = min(n, a.Size)
	r, err := src.NewRangeReader(ctx, a.Object, 0, n)
	if err != nil {
		return nil, fmt.Errorf("loader: read header of %s: %w", a.Object, err)
	}
	defer r.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("loader: read header of %s: %w", a.Object, err)
	}
	return b, nil
}

// checkLayout reports whether an array of this shape and order has rows
// that are contiguous byte ranges in C layout, which the loader copies.
func checkLayout(shape []int, order array.Order) error {
	if len(shape) == 0 {
		return fmt.Errorf("%w: a 0-d array has no rows", ErrDataset)
	}
	if order == array.Fortran {
		for _, d := range shape[1:] {
			if d > 1 {
				return fmt.Errorf("%w: Fortran-order array of shape %v: rows are not contiguous", ErrDataset, shape)
			}
		}
	}
	return nil
}

// specOf returns the spec of an array with this header.
func specOf(dt array.DType, bo array.ByteOrder, shape []int) Spec {
	return Spec{DType: dt, ByteOrder: bo, Row: slices.Clone(shape[1:])}
}

// apply sets the rows and specs of groups idx from their headers hs,
// checking leading dimensions within each group and specs across groups.
func (d *Dataset) apply(idx []int, hs [][]npy.Header) error {
	for k, gi := range idx {
		g := &d.Groups[gi]
		rows := -1
		for j, h := range hs[k] {
			o := g.Objects[j]
			if rows >= 0 && h.Shape[0] != rows {
				return fmt.Errorf("%w: shard %d: array %s (%s) has %d rows but %s (%s) has %d",
					ErrDataset, gi, d.Names[j], o, h.Shape[0], d.Names[0], g.Objects[0], rows)
			}
			rows = h.Shape[0]
			s := specOf(h.DType, h.ByteOrder, h.Shape)
			if len(d.Specs) < len(d.Names) {
				d.Specs = append(d.Specs, s)
			} else if !d.Specs[j].equal(s) {
				return fmt.Errorf("%w: shard %d: array %s (%s) holds %s; other shards hold %s",
					ErrDataset, gi, d.Names[j], o, s, d.Specs[j])
			}
		}
		if g.Rows != 0 && g.Rows != rows {
			return fmt.Errorf("%w: shard %d (%s) has %d rows; the manifest says %d",
				ErrDataset, gi, g.Objects[0], rows, g.Rows)
		}
		g.Rows = rows
	}
	return nil
}
