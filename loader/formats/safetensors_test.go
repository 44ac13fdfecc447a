package formats_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/bench/loadertest"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// safetensorsShard returns a safetensors file of rows samples from first
// on: "x", rows of 24 bytes each holding the sample's id, and "y", the ids
// as int64 (written after x, so the dataset's arrays are x, y).
func safetensorsShard(first, rows int) []byte {
	const xb = 24
	x, y := make([]byte, rows*xb), make([]byte, rows*8)
	for i := range rows {
		binary.LittleEndian.PutUint64(x[i*xb:], uint64(first+i))
		binary.LittleEndian.PutUint64(y[i*8:], uint64(first+i))
	}
	hdr, _ := json.Marshal(map[string]any{
		"__metadata__": map[string]string{"format": "pt"},
		"x":            map[string]any{"dtype": "U8", "shape": []int{rows, xb}, "data_offsets": []int{0, len(x)}},
		"y":            map[string]any{"dtype": "I64", "shape": []int{rows}, "data_offsets": []int{len(x), len(x) + len(y)}},
	})
	for len(hdr)%8 != 0 {
		hdr = append(hdr, ' ')
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	return append(append(append(b, hdr...), x...), y...)
}

// TestSafetensors reads a dataset of safetensors shards (the format
// guessed from the pattern) in every mode, rank sharded, and checks every
// row of every batch against its id; a shard whose tensors disagree is an
// error naming it.
func TestSafetensors(t *testing.T) {
	e := loadertest.New(t)
	rows := []int{7, 12, 1, 9}
	first := 0
	for i, n := range rows {
		e.Dir.Put(t, loadertest.Bucket, "st/shard-"+string(rune('a'+i))+".safetensors", safetensorsShard(first, n))
		first += n
	}
	ds, err := build(e, "st/", "shard-*.safetensors", spec.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.FormatName() != "safetensors" || strings.Join(ds.Names, ",") != "x,y" {
		t.Fatalf("format %s, arrays %v; want safetensors x,y", ds.FormatName(), ds.Names)
	}
	if _, n := ds.Rows(); n != int64(first) {
		t.Fatalf("%d samples; want %d", n, first)
	}
	for _, cfg := range []loader.Config{
		{BatchSize: 4, Shuffle: sampler.Sequential, Epochs: 2},
		{BatchSize: 3, Shuffle: sampler.Global, Seed: 5, Rank: 1, World: 2},
		{BatchSize: 5, Shuffle: sampler.ShardWindow, Window: 2, Seed: 9, CopyAlways: true},
	} {
		cfg.Dataset = ds
		seen, zeroCopy := 0, 0
		loadertest.Drain(t, loadertest.Open(t, e.Source(), cfg), func(b *loader.Batch) {
			x, _ := b.Array("x")
			y, _ := b.Array("y")
			ys, err := y.Int64s()
			if err != nil || x.DType != array.Uint8 || x.Shape[1] != 24 {
				t.Fatalf("batch %d/%d: x %v %v, y: %v", b.Epoch, b.Index, x.DType, x.Shape, err)
			}
			for i, id := range b.IDs {
				row, _ := x.Row(i)
				if int64(binary.LittleEndian.Uint64(row)) != id || ys[i] != id || !bytes.Equal(row[8:], make([]byte, 16)) {
					t.Fatalf("batch %d/%d sample %d: x %v, y %d; want id %d", b.Epoch, b.Index, i, row, ys[i], id)
				}
			}
			seen += b.Len()
			if b.ZeroCopy {
				zeroCopy++
			}
		})
		if seen == 0 || (cfg.Shuffle == sampler.Sequential && zeroCopy == 0) || (cfg.CopyAlways && zeroCopy != 0) {
			t.Errorf("%v: %d samples, %d zero-copy batches", cfg.Shuffle, seen, zeroCopy)
		}
	}

	// A shard whose tensors differ from the first's names it.
	e.Dir.Put(t, loadertest.Bucket, "bad/shard-a.safetensors", safetensorsShard(0, 3))
	odd := safetensorsShard(0, 3)
	odd[bytes.Index(odd, []byte(`"U8"`))+2] = '1' // "U1": an unknown dtype
	e.Dir.Put(t, loadertest.Bucket, "bad/shard-b.safetensors", odd)
	if _, err := build(e, "bad/", "shard-*.safetensors", spec.Spec{}); !errors.Is(err, loader.ErrDataset) ||
		!strings.Contains(err.Error(), "bad/shard-b.safetensors") {
		t.Errorf("a bad shard: %v; want ErrDataset naming it", err)
	}
}
