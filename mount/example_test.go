package mount_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/mount"
	"github.com/cacheagent/cacheagent/tier"
)

// ExampleMount serves gs://my-bucket/train/ at /mnt/gcs/my-bucket/train
// until SIGINT or SIGTERM.
func ExampleMount() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	src, err := fetch.NewGCS(ctx, fetch.GCSConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	dl, err := fetch.NewDownloader(src, fetch.Config{})
	if err != nil {
		log.Fatal(err)
	}
	cache, err := tier.Open(ctx, tier.Config{Dir: "/var/cache/cacheagent", Source: src, Downloader: dl})
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()
	srv, err := mount.Mount(ctx, "/mnt/gcs", mount.Config{
		Cache:  cache,
		Source: src,
		Roots:  []mount.Root{{Bucket: "my-bucket", Prefix: "train/"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
	if err := srv.Unmount(); err != nil {
		log.Print(err)
	}
	srv.Wait()
}
