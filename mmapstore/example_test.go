package mmapstore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

func ExampleStore_Acquire() {
	ctx := context.Background()
	// A local directory stands in for GCS: <root>/<bucket>/<name>.
	root, err := os.MkdirTemp("", "mmapstore-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	npyFile, err := os.ReadFile("npy/testdata/f4_lt_3x4_C_v1.npy")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "bkt", "train"), 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bkt", "train", "x.npy"), npyFile, 0o644); err != nil {
		log.Fatal(err)
	}
	src, err := fetch.NewDir(root)
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	dl, err := fetch.NewDownloader(src, fetch.Config{})
	if err != nil {
		log.Fatal(err)
	}
	cache, err := tier.Open(ctx, tier.Config{Dir: filepath.Join(root, "cache"), Source: src, Downloader: dl})
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()

	s := mmapstore.New(cache.Opener(), mmapstore.Config{})
	defer s.Close()
	l, err := s.Acquire(ctx, object.Object{Bucket: "bkt", Name: "train/x.npy"})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release()
	a, err := l.Array()
	if err != nil {
		log.Fatal(err)
	}
	row, err := a.Row(1) // aliases the mapping: valid until Release
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.DType, a.Shape, a.Order, len(row))
	// Output: float32 [3 4] C 16
}
