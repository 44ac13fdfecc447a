package formats_test

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/bench/loadertest"
	"github.com/cacheagent/cacheagent/bench/testenv"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/formats"
	"github.com/cacheagent/cacheagent/loader/formats/tokens"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// tokenBatch is what a test keeps of a token batch.
type tokenBatch struct {
	epoch, index int
	ids          []int64
	windows      [][]uint16
}

// drainTokens reads every batch of a Loader of cfg over e.
func drainTokens(t *testing.T, e *loadertest.Env, cfg loader.Config) []tokenBatch {
	t.Helper()
	return drainTokensFrom(t, e.Source(), cfg)
}

// drainTokensFrom reads every batch of a Loader of cfg over src.
func drainTokensFrom(t *testing.T, src loader.Source, cfg loader.Config) []tokenBatch {
	t.Helper()
	l, err := loader.New(src, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	var out []tokenBatch
	for {
		b, err := l.Next(context.Background())
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("Next after %d batches: %v", len(out), err)
		}
		a, ok := b.Array(tokens.ArrayName)
		if !ok || len(b.Names) != 1 || a.Shape[0] != b.Len() || a.Shape[1] != cfg.Dataset.Token.SeqLen+1 || b.ZeroCopy {
			t.Fatalf("batch %d: names %v, shape %v, zero-copy %v", len(out), b.Names, a.Shape, b.ZeroCopy)
		}
		if want := cmp.Or(cfg.TokenOut, cfg.Dataset.Token.DType); a.DType != want {
			t.Fatalf("batch %d: tokens of %s; want %s", len(out), a.DType, want)
		}
		v, err := uint16Tokens(a)
		if err != nil {
			t.Fatal(err)
		}
		tb := tokenBatch{epoch: b.Epoch, index: b.Index, ids: slices.Clone(b.IDs)}
		w := a.Shape[1]
		for i := range b.Len() {
			tb.windows = append(tb.windows, slices.Clone(v[i*w:(i+1)*w]))
		}
		out = append(out, tb)
		b.Release()
	}
}

// uint16Tokens returns a's tokens, uint16 or widened to int32 or int64
// (Config.TokenOut), as uint16s; a widened token out of range is an error.
func uint16Tokens(a array.Array) ([]uint16, error) {
	var wide []int64
	switch a.DType {
	case array.Uint16:
		return a.Uint16s()
	case array.Int32:
		v, err := a.Int32s()
		if err != nil {
			return nil, err
		}
		for _, x := range v {
			wide = append(wide, int64(x))
		}
	default:
		v, err := a.Int64s()
		if err != nil {
			return nil, err
		}
		wide = v
	}
	out := make([]uint16, len(wide))
	for i, x := range wide {
		if x < 0 || x > 0xffff {
			return nil, fmt.Errorf("token %d of %s: %d is not a uint16", i, a.DType, x)
		}
		out[i] = uint16(x)
	}
	return out, nil
}

// checkWindows checks every batch's windows against want, by id, and its
// ids against IDs(cfg).
func checkWindows(t *testing.T, cfg loader.Config, got []tokenBatch, want [][]uint16) {
	t.Helper()
	seq, err := loader.IDs(cfg)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for b := range seq {
		if i >= len(got) || !slices.Equal(got[i].ids, b.IDs) || got[i].epoch != b.Epoch || got[i].index != b.Index {
			t.Fatalf("batch %d: loader gave %v; IDs gives %d/%d %v", i, got[min(i, len(got)-1)], b.Epoch, b.Index, b.IDs)
		}
		i++
	}
	if i != len(got) {
		t.Fatalf("%d batches; IDs gives %d", len(got), i)
	}
	for _, b := range got {
		for k, id := range b.ids {
			if id < 0 || id >= int64(len(want)) || !slices.Equal(b.windows[k], want[id]) {
				t.Fatalf("batch %d/%d: window %d = %v; want %v", b.epoch, b.index, id, b.windows[k], want[min(id, int64(len(want)-1))])
			}
		}
	}
}

// TestTokenWindowsPython reads token datasets numpy wrote (raw uint16
// files, llm.c shards, Megatron .bin/.idx with out-of-order sequences)
// and compares every window, across file and document boundaries, with
// what numpy reads, in every mode, rank sharded, and resumed.
func TestTokenWindowsPython(t *testing.T) {
	testenv.NeedPython(t, "numpy")
	const L = 16
	tmp := t.TempDir()
	testenv.RunPython(t, "testdata/token_datasets.py", filepath.Join(tmp, "d"), "16")
	b, err := os.ReadFile(filepath.Join(tmp, "d", "expect.json"))
	if err != nil {
		t.Fatal(err)
	}
	var expect map[string][][]uint16
	if err := json.Unmarshal(b, &expect); err != nil {
		t.Fatal(err)
	}
	e := loadertest.New(t)
	for _, tc := range []struct {
		name, pattern string
		sp            spec.Spec
	}{
		{"raw", "shard-*.bin", spec.Spec{Format: "tokens", TokenDType: "uint16", SeqLen: L}},
		{"llmc", "shard-*.bin", spec.Spec{SeqLen: L}}, // the format guessed
		{"megatron", "shard-*.{bin,idx}", spec.Spec{SeqLen: L}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.PutTree(t, filepath.Join(tmp, "d", tc.name), tc.name+"/")
			ds, err := build(e, tc.name+"/", tc.pattern, tc.sp)
			if err != nil {
				t.Fatal(err)
			}
			want := expect[tc.name]
			if _, n := ds.Rows(); n != int64(len(want)) {
				t.Fatalf("%d windows; numpy has %d", n, len(want))
			}
			for _, cfg := range []loader.Config{
				{BatchSize: 4, Shuffle: sampler.Sequential, Epochs: 2},
				{BatchSize: 3, Shuffle: sampler.Global, Seed: 5, Rank: 1, World: 2, Epochs: 2},
				{BatchSize: 5, Shuffle: sampler.ShardWindow, Window: 2, Seed: 9, Rank: 0, World: 3},
			} {
				cfg.Dataset = ds
				all := drainTokens(t, e, cfg)
				checkWindows(t, cfg, all, want)
				cfg.Resume = &loader.State{Epoch: 0, Batch: 1}
				rest := drainTokens(t, e, cfg)
				checkWindows(t, cfg, rest, want)
				if len(rest) != len(all)-1 || !slices.EqualFunc(rest, all[1:], func(a, b tokenBatch) bool {
					return slices.Equal(a.ids, b.ids)
				}) {
					t.Fatalf("%v: resumed at batch 1, got other batches", cfg.Shuffle)
				}
			}
		})
	}
}

// TestTokenWindowsGo checks windows of raw files, some shorter than a
// window, against the files concatenated, and the window count.
func TestTokenWindowsGo(t *testing.T) {
	const L = 8
	e := loadertest.New(t)
	ds, want := putTokenFiles(t, e, []int{3, 20, 1, 2, 9, 17}, L)
	cfg := loader.Config{Dataset: ds, BatchSize: 2, Shuffle: sampler.Global, Seed: 3, World: 2, Rank: 1, Epochs: 3}
	checkWindows(t, cfg, drainTokens(t, e, cfg), want)
	cfg.Shuffle, cfg.Window = sampler.ShardWindow, 1
	checkWindows(t, cfg, drainTokens(t, e, cfg), want)
	for _, out := range []array.DType{array.Int64, array.Int32} {
		cfg.TokenOut = out // widened as gathered, across file boundaries
		checkWindows(t, cfg, drainTokens(t, e, cfg), want)
	}
	cfg.TokenOut = array.Uint8
	if _, err := loader.New(e.Source(), cfg); !errors.Is(err, loader.ErrConfig) {
		t.Errorf("New with TokenOut uint8 = %v; want ErrConfig", err)
	}
}

// putTokenFiles writes raw uint16 files tok/part-a.bin, part-b.bin… of
// the given token counts into d and returns their dataset with windows of
// L, and its windows.
func putTokenFiles(t *testing.T, e *loadertest.Env, sizes []int, L int) (loader.Dataset, [][]uint16) {
	t.Helper()
	var stream []uint16
	for i, n := range sizes {
		b := make([]byte, 2*n)
		for k := range n {
			v := uint16(len(stream) + 1000*i)
			stream = append(stream, v)
			binary.LittleEndian.PutUint16(b[2*k:], v)
		}
		e.Dir.Put(t, loadertest.Bucket, "tok/part-"+string(rune('a'+i))+".bin", b)
	}
	ds, err := build(e, "tok/", "part-*.bin", spec.Spec{Format: "tokens", TokenDType: "uint16", SeqLen: L})
	if err != nil {
		t.Fatal(err)
	}
	var want [][]uint16
	for k := 0; k*L+L+1 <= len(stream); k++ {
		want = append(want, stream[k*L:k*L+L+1])
	}
	if _, n := ds.Rows(); n != tokens.NumWindows(int64(len(stream)), L) || n != int64(len(want)) {
		t.Fatalf("%d windows; want %d", n, len(want))
	}
	return ds, want
}

// TestTokenErrors checks that malformed token datasets are errors naming
// the object.
func TestTokenErrors(t *testing.T) {
	e := loadertest.New(t)
	e.Dir.Put(t, loadertest.Bucket, "odd/a.bin", []byte{1, 2, 3})
	hdr := make([]byte, 1024+4)
	binary.LittleEndian.PutUint32(hdr, 20240520)
	binary.LittleEndian.PutUint32(hdr[4:], 1)
	binary.LittleEndian.PutUint32(hdr[8:], 5) // 5 tokens, 2 follow
	e.Dir.Put(t, loadertest.Bucket, "short/a.bin", hdr)
	idx := cachetest.MegatronIndex([]int32{4}, []int64{0})
	e.Dir.Put(t, loadertest.Bucket, "mt/a.idx", idx)
	e.Dir.Put(t, loadertest.Bucket, "mt/a.bin", []byte{1, 0, 2, 0}) // 2 tokens of 4
	for _, tc := range []struct{ prefix, pattern, obj string }{
		{"odd/", "*.bin", "odd/a.bin"},
		{"short/", "*.bin", "short/a.bin"},
		{"mt/", "*.{bin,idx}", "mt/a.idx"},
	} {
		_, err := build(e, tc.prefix, tc.pattern, spec.Spec{TokenDType: "uint16", SeqLen: 4})
		if !errors.Is(err, loader.ErrDataset) || !strings.Contains(err.Error(), tc.obj) {
			t.Errorf("%s: %v; want ErrDataset naming %s", tc.prefix, err, tc.obj)
		}
	}
}

// build resolves the dataset of the objects under prefix of the test
// bucket matching pattern, as sp says, with every format.
func build(e *loadertest.Env, prefix, pattern string, sp spec.Spec) (loader.Dataset, error) {
	sp.Data, sp.Pattern = "gs://"+loadertest.Bucket+"/"+prefix, pattern
	return loader.ResolveDataset(context.Background(), sp, e.LoaderEnv(formats.All...))
}
