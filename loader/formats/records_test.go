package formats_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cacheagent/cacheagent/bench/loadertest"
	"github.com/cacheagent/cacheagent/bench/testenv"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/formats"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/object"
)

// TestRecordsPython reads WebDataset shards Python's tarfile wrote and
// compares every field of every sample with what tarfile reads, copied and
// as views, rank sharded; the second listing reads the saved indexes.
func TestRecordsPython(t *testing.T) {
	testenv.NeedPython(t)
	tmp := t.TempDir()
	testenv.RunPython(t, "testdata/wds_dataset.py", filepath.Join(tmp, "d"))
	b, err := os.ReadFile(filepath.Join(tmp, "d", "expect.json"))
	if err != nil {
		t.Fatal(err)
	}
	var expect []struct {
		Key    string            `json:"key"`
		Fields map[string]string `json:"fields"`
	}
	if err := json.Unmarshal(b, &expect); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(tmp, "d", "expect.json"))
	e := loadertest.New(t)
	e.PutTree(t, filepath.Join(tmp, "d"), "wds/")
	idx := &countingIndex{IndexCache: loader.DirIndex(filepath.Join(tmp, "index"))}
	env := e.LoaderEnv(formats.All...)
	env.Index = idx
	sp := spec.Spec{Data: "gs://" + loadertest.Bucket + "/wds/", Pattern: "shard-*.tar"}
	ds, err := loader.ResolveDataset(context.Background(), sp, env)
	if err != nil {
		t.Fatal(err)
	}
	if _, n := ds.Rows(); n != int64(len(expect)) || strings.Join(ds.Fields, ",") != "txt,json,bin" || idx.stored.Load() != 3 {
		t.Fatalf("%d samples, fields %v, %d indexes saved; want %d, txt,json,bin, 3", n, ds.Fields, idx.stored.Load(), len(expect))
	}
	// Again, from the saved indexes only (no Source to index from).
	env.Records = nil
	again, err := loader.ResolveDataset(context.Background(), sp, env)
	if err != nil {
		t.Fatalf("from saved indexes: %v", err)
	}
	ds = again
	// A corrupt saved index is rebuilt.
	saved, _ := filepath.Glob(filepath.Join(tmp, "index", "*.wdsidx"))
	if len(saved) != 3 {
		t.Fatalf("%d saved indexes", len(saved))
	}
	if err := os.WriteFile(saved[0], []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	env.Records = e.Source()
	if _, err := loader.ResolveDataset(context.Background(), sp, env); err != nil || idx.stored.Load() != 4 {
		t.Fatalf("corrupt index: %v, %d stores; want a rebuild", err, idx.stored.Load())
	}
	for _, views := range []bool{false, true} {
		for rank := range 2 {
			cfg := loader.Config{Dataset: ds, BatchSize: 3, Shuffle: sampler.Global, Seed: 4, Rank: rank, World: 2, RecordViews: views}
			l, err := loader.New(e.Source(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			for {
				b, err := l.Next(context.Background())
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				for j, f := range b.Fields {
					for i, id := range b.IDs {
						var got []byte
						if views {
							got = f.Views[i]
						} else {
							got = f.Data[f.Offsets[i]:f.Offsets[i+1]]
						}
						if want := expect[id].Fields[ds.Fields[j]]; hex.EncodeToString(got) != want {
							t.Fatalf("sample %d (%s) field %s: %x; tarfile reads %s", id, expect[id].Key, f.Name, got, want)
						}
					}
				}
				b.Release()
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// countingIndex counts Stores.
type countingIndex struct {
	loader.IndexCache
	stored atomic.Int32
}

func (c *countingIndex) Store(o object.Object, b []byte) error {
	c.stored.Add(1)
	return c.IndexCache.Store(o, b)
}
