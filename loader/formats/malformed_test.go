package formats_test

import (
	"bytes"
	"context"
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/formats"
	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/mmapstore"
	mgidx "github.com/cacheagent/cacheagent/mmapstore/megatron"
	wds "github.com/cacheagent/cacheagent/mmapstore/webdataset"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// emuBucket is the emulator's bucket (GCS names have 3 to 222 characters).
const emuBucket = "bkt"

// TestMalformedShards reads malformed token and record shards from the
// GCS emulator through a real cache: building the dataset from them, and
// opening them in a Loader whose dataset was built from good versions of
// the same shards (the checks the Loader makes again when it maps a shard;
// for WebDataset both with the saved index of the good tar and indexing the
// tar itself). Each is an ErrDataset error naming the bad object, never a
// panic or a batch.
func TestMalformedShards(t *testing.T) {
	ctx := context.Background()
	emu, src := emulatorSource(t)
	c := cachetest.Cache(t, src, cachetest.NewDownloader(t, src), tier.Config{})
	store := mmapstore.New(c.Opener(), mmapstore.Config{MaxIdleMappings: -1, Revalidate: -1})
	cachetest.CloseAtEnd(t, "Store", store, mmapstore.ErrClosed)
	put := func(t *testing.T, prefix string, files map[string][]byte) map[string]object.Object {
		objs := make(map[string]object.Object)
		for n, b := range files {
			gen, err := emu.Put(emuBucket, prefix+n, b)
			if err != nil {
				t.Fatal(err)
			}
			objs[n] = object.Object{Bucket: emuBucket, Name: prefix + n, Generation: gen}
		}
		return objs
	}
	for _, m := range cachetest.MalformedDatasets(t) {
		t.Run(m.Name, func(t *testing.T) {
			env := loader.Env{Source: src, Records: loader.FromStore(store), Formats: formats.All}
			sp := spec.Spec{Format: m.Format, SeqLen: m.SeqLen, TokenDType: m.TokenDType, Pattern: m.Pattern}
			_ = put(t, "build-"+m.Name+"/", m.Files())
			sp.Data = "gs://" + emuBucket + "/build-" + m.Name + "/"
			_, err := loader.ResolveDataset(ctx, sp, env)
			checkNamesObject(t, "ResolveDataset", err, "gs://"+emuBucket+"/build-"+m.Name+"/"+m.Object)

			put(t, "good-"+m.Name+"/", m.Good)
			bad := put(t, "bad-"+m.Name+"/", m.Bad)
			sp.Data = "gs://" + emuBucket + "/good-" + m.Name + "/"
			ds, err := loader.ResolveDataset(ctx, sp, env)
			if err != nil {
				t.Fatalf("the good version: %v", err)
			}
			sh := &ds.Groups[0]
			for j, o := range sh.Objects {
				if b, ok := bad[path.Base(o.Name)]; ok {
					sh.Objects[j] = b
				}
			}
			indexes := []any{nil} // the Loader indexes the tar
			if x, ok := sh.Index.(*wds.Shard); ok && int64(len(m.Bad[m.Object])) != x.ObjectSize() {
				indexes = append(indexes, x) // the good tar's, of another size
			}
			for _, x := range indexes {
				sh.Index = x
				err := firstBatchError(t, store, ds)
				checkNamesObject(t, "Next", err, "gs://"+emuBucket+"/bad-"+m.Name+"/"+m.Object)
			}
		})
	}
	if n := store.Stats().Leases; n != 0 {
		t.Errorf("%d leases outstanding after every Loader closed", n)
	}
}

// emulatorSource starts an empty emulator and returns it with a GCS
// source over it, both closed when the test ends.
func emulatorSource(t *testing.T) (*emulator.Server, *fetch.GCS) {
	t.Helper()
	emu := cachetest.Emulator(t, emulator.Options{})
	src, err := fetch.NewGCS(context.Background(), fetch.GCSConfig{Endpoint: emu.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return emu, src
}

// firstBatchError runs a Loader of ds and returns what its first Next
// returned, failing the test if that is a batch.
func firstBatchError(t *testing.T, store *mmapstore.Store, ds loader.Dataset) error {
	t.Helper()
	l, err := loader.New(loader.FromStore(store), loader.Config{Dataset: ds, BatchSize: 1})
	if err != nil {
		return err
	}
	defer l.Close()
	b, err := l.Next(context.Background())
	if err == nil {
		b.Release()
		t.Fatalf("Next returned batch %v of a malformed shard", b.IDs)
	}
	return err
}

// checkNamesObject checks that err is an ErrDataset naming obj (with or
// without its generation).
func checkNamesObject(t *testing.T, what string, err error, obj string) {
	t.Helper()
	if !errors.Is(err, loader.ErrDataset) || !strings.Contains(err.Error(), obj) {
		t.Errorf("%s: %v; want ErrDataset naming %s", what, err, obj)
		return
	}
	t.Logf("%s: %v", what, err)
}

// TestMegatronIndexSizeFirst checks that building a Megatron dataset reads
// an .idx whole only once its header's counts fit its size: a foreign
// .idx, or one whose counts do not fit, costs a header read (of the
// emulator's bytes served), not its size in memory.
func TestMegatronIndexSizeFirst(t *testing.T) {
	ctx := context.Background()
	emu, src := emulatorSource(t)
	const big = 8 << 20
	header := cachetest.MegatronIndex([]int32{6, 4}, []int64{0, 12})[:mgidx.HeaderSize]
	for name, idx := range map[string][]byte{
		"counts":  append(bytes.Clone(header), make([]byte, big)...),
		"foreign": emulator.Pattern(1, big),
	} {
		t.Run(name, func(t *testing.T) {
			for n, b := range map[string][]byte{"a.bin": make([]byte, 20), "a.idx": idx} {
				if _, err := emu.Put(emuBucket, name+"/"+n, b); err != nil {
					t.Fatal(err)
				}
			}
			before := emu.BytesServed()
			_, err := loader.ResolveDataset(ctx, spec.Spec{Data: "gs://" + emuBucket + "/" + name + "/", Pattern: "*.{bin,idx}", SeqLen: 4},
				loader.Env{Source: src, Formats: formats.All})
			checkNamesObject(t, "ResolveDataset", err, "gs://"+emuBucket+"/"+name+"/a.idx")
			if n := emu.BytesServed() - before; n >= big {
				t.Errorf("%d bytes read; want the header only", n)
			}
		})
	}
}
