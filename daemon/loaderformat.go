package daemon

import (
	"fmt"
	"unsafe"

	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/ring"
)

// A loader session's ring holds each batch as its Loader's Layout says,
// whatever the dataset's format: the layout's fixed-size arrays, then two
// variable-length arrays per field, "<field>.offsets" and "<field>.data"
// (see control.LoaderSession.Arrays), then the samples' ids.

// Suffixes of a field's ring arrays.
const (
	offsetsSuffix = ".offsets"
	dataSuffix    = ".data"
)

// ringArrays returns the ring's arrays for batches of layout, of up to
// batch samples, then the ids.
func ringArrays(layout loader.Layout, batch int) ([]ring.ArraySpec, error) {
	var out []ring.ArraySpec
	for _, a := range layout.Arrays {
		ts, ok := a.DType.Typestr(a.ByteOrder)
		if !ok {
			return nil, fmt.Errorf("%w: array %q: %s has no numpy type string", loader.ErrDataset, a.Name, a.DType)
		}
		out = append(out, ring.ArraySpec{Name: a.Name, DType: ts, Row: append([]int{}, a.Row...)})
	}
	for _, f := range layout.Fields {
		out = append(out, ring.ArraySpec{Name: f.Name + offsetsSuffix, DType: "<i8", Row: []int{}, Bytes: 8 * (batch + 1)},
			ring.ArraySpec{Name: f.Name + dataSuffix, DType: "|u1", Row: []int{}, Bytes: f.Bytes})
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

// firstBuffer returns the first byte of b's first buffer: its first
// array's, or its first field's offsets.
func firstBuffer(b *loader.Batch) unsafe.Pointer {
	if len(b.Arrays) > 0 {
		return unsafe.Pointer(unsafe.SliceData(b.Arrays[0].Data))
	}
	return unsafe.Pointer(unsafe.SliceData(b.Fields[0].Offsets))
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
