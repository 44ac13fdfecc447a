package daemon

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"unsafe"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/ring"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/object"
)

// A loader session's formats: how each dataset format's batches lie in
// the ring. Arrays of .npy datasets are the dataset's; token datasets have
// one array, "tokens"; a WebDataset field is two variable-length arrays,
// "<field>.offsets" and "<field>.data" (see control.LoaderSession.Arrays).

// Suffixes of a WebDataset field's ring arrays.
const (
	offsetsSuffix = ".offsets"
	dataSuffix    = ".data"
)

// loaderDataset builds req's dataset, reading the shards' headers through
// the daemon's source; WebDataset tars are indexed through store (once:
// the indexes are kept under the disk tier's directory, as `cacheagent
// loader` keeps them).
func (d *Daemon) loaderDataset(ctx context.Context, req control.LoaderRequest, store *mmapstore.Store) (loader.Dataset, error) {
	o := loader.Options{SeqLen: req.SeqLen, Records: loader.FromStore(store),
		Index: loader.DirIndex(filepath.Join(d.Config().Tiers.Disk.Dir, "wds-index"))}
	var err error
	if req.TokenDType != "" {
		if o.TokenDType, err = loader.ParseDType(req.TokenDType); err != nil {
			return loader.Dataset{}, fmt.Errorf("token_dtype: %w", err)
		}
	}
	o.Format = loader.GuessFormat(req.Pattern, req.TokenDType != "" || req.SeqLen != 0)
	if req.Format != "" {
		if o.Format, err = loader.ParseFormat(req.Format); err != nil {
			return loader.Dataset{}, err
		}
	}
	switch {
	case (req.Data == "") == (len(req.Manifest) == 0):
		return loader.Dataset{}, fmt.Errorf("%w: give either data (gs://BUCKET/PREFIX, with pattern) or manifest",
			loader.ErrConfig)
	case len(req.Manifest) > 0 && (req.Pattern != "" || req.Format != "" && o.Format != loader.FormatNPY):
		return loader.Dataset{}, fmt.Errorf("%w: a manifest lists .npy datasets, with no pattern; format %s needs data",
			loader.ErrConfig, o.Format)
	case len(req.Manifest) > 0:
		ds, err := loader.ParseManifest(req.Manifest)
		if err != nil {
			return ds, err
		}
		return ds.Resolve(ctx, d.src)
	case req.Pattern == "":
		return loader.Dataset{}, fmt.Errorf("%w: data needs a pattern (e.g. \"shard-*.{x,y}.npy\")", loader.ErrConfig)
	case o.Format == loader.FormatTokens || o.Format == loader.FormatMegatron:
		if o.SeqLen < 1 {
			return loader.Dataset{}, fmt.Errorf("%w: format %s needs seq_len", loader.ErrConfig, o.Format)
		}
	}
	u, err := object.ParsePrefix(req.Data)
	if err != nil {
		return loader.Dataset{}, fmt.Errorf("%w: data: %w", loader.ErrConfig, err)
	}
	return loader.FromPatternWith(ctx, d.src, u.Bucket, u.Path, req.Pattern, o)
}

// ringArrays returns the ring's arrays for a loader of cfg (its dataset,
// batch size, token output type and WebDataset field bound), then the ids.
func ringArrays(cfg loader.Config) ([]ring.ArraySpec, error) {
	ds := cfg.Dataset
	var out []ring.ArraySpec
	switch ds.Format {
	case loader.FormatTokens, loader.FormatMegatron:
		dt := cmp.Or(cfg.TokenOut, ds.Token.DType)
		bo := array.Little
		if dt.Size() == 1 {
			bo = array.NotApplicable
		}
		a, err := ringArray(loader.TokensName, loader.Spec{DType: dt, ByteOrder: bo, Row: []int{ds.Token.SeqLen + 1}})
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	case loader.FormatWebDataset:
		sizes, err := fieldSizes(ds, cfg.BatchSize, cfg.FieldBytes)
		if err != nil {
			return nil, err
		}
		for j, f := range ds.Fields {
			out = append(out, ring.ArraySpec{Name: f + offsetsSuffix, DType: "<i8", Row: []int{},
				Bytes: 8 * (cfg.BatchSize + 1)},
				ring.ArraySpec{Name: f + dataSuffix, DType: "|u1", Row: []int{}, Bytes: sizes[j]})
		}
	default:
		for j, name := range ds.Names {
			a, err := ringArray(name, ds.Specs[j])
			if err != nil {
				return nil, err
			}
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no arrays", loader.ErrDataset)
	}
	for _, a := range out {
		if a.Name == idsArray {
			return nil, fmt.Errorf("%w: an array is named %q, the name of the ids", loader.ErrDataset, idsArray)
		}
	}
	return append(out, ring.ArraySpec{Name: idsArray, DType: "<i8", Row: []int{}}), nil
}

// fieldSizes returns the data capacity of each WebDataset field: bound,
// or the loader's default.
func fieldSizes(ds loader.Dataset, batch, bound int) ([]int, error) {
	if bound > 0 {
		sizes := make([]int, len(ds.Fields))
		for j := range sizes {
			sizes[j] = bound
		}
		return sizes, nil
	}
	return ds.FieldBytes(batch)
}

// ringArray returns the ring's spec of a fixed-shape array.
func ringArray(name string, sp loader.Spec) (ring.ArraySpec, error) {
	ts, ok := sp.DType.Typestr(sp.ByteOrder)
	if !ok {
		return ring.ArraySpec{}, fmt.Errorf("%w: array %q: %s has no numpy type string", loader.ErrDataset, name, sp.DType)
	}
	return ring.ArraySpec{Name: name, DType: ts, Row: append([]int{}, sp.Row...)}, nil
}

// firstBuffer returns the first byte of b's first buffer: its first
// array's, or its first field's offsets.
func firstBuffer(b *loader.Batch) unsafe.Pointer {
	if len(b.Fields) > 0 {
		return unsafe.Pointer(unsafe.SliceData(b.Fields[0].Offsets))
	}
	return unsafe.Pointer(unsafe.SliceData(b.Arrays[0].Data))
}

// variableShapes returns the shapes of b's variable-length arrays, in the
// ring's order: each field's offsets and data.
func variableShapes(b *loader.Batch) [][]int {
	if len(b.Fields) == 0 {
		return nil
	}
	shapes := make([][]int, 0, 2*len(b.Fields))
	for _, f := range b.Fields {
		shapes = append(shapes, []int{len(f.Offsets)}, []int{len(f.Data)})
	}
	return shapes
}
