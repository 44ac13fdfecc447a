package loader_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/synth"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/tier"
)

// Example reads two epochs of a dataset of x/y shards through an
// in-process cache, in batches of 4 for rank 0 of 2, and resumes from a
// saved state.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "loader-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// A local directory stands in for gs://data/train/: 3 shards of 6 samples.
	if err := synth.Uniform(3, 6, 16).WriteDir(filepath.Join(dir, "src"), "data", "train/"); err != nil {
		log.Fatal(err)
	}
	src, err := fetch.NewDir(filepath.Join(dir, "src"))
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	dl, err := fetch.NewDownloader(src, fetch.Config{})
	if err != nil {
		log.Fatal(err)
	}
	cache, err := tier.Open(ctx, tier.Config{Dir: filepath.Join(dir, "cache"), Source: src, Downloader: dl})
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()
	store := mmapstore.New(cache.Opener(), mmapstore.Config{})
	defer store.Close()

	ds, err := loader.FromPattern(ctx, src, "data", "train/", "shard-*.{x,y}.npy")
	if err != nil {
		log.Fatal(err)
	}
	cfg := loader.Config{Dataset: ds, BatchSize: 4, Seed: 7, Window: 2, Rank: 0, World: 2, Epochs: 2,
		Planner: cache, Stager: cache.Stager()}
	l, err := loader.New(loader.FromStore(store), cfg)
	if err != nil {
		log.Fatal(err)
	}
	var saved loader.State
	for {
		b, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		y, _ := b.Array("y")
		ids, _ := y.Int64s()
		fmt.Println(b.Epoch, b.Index, len(ids) == b.Len())
		checkpoint := b.Epoch == 0 && b.Index == 1
		b.Release() // b must not be used after this
		if checkpoint {
			saved = l.State() // resumes after batch 1
		}
	}
	if err := l.Close(); err != nil {
		log.Fatal(err)
	}
	cfg.Resume = &saved
	r, err := loader.New(loader.FromStore(store), cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	b, err := r.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("resumed at", b.Epoch, b.Index)
	b.Release()
	// Output:
	// 0 0 true
	// 0 1 true
	// 0 2 true
	// 1 0 true
	// 1 1 true
	// 1 2 true
	// resumed at 0 2
}
