// Command gcsemu serves a synthetic dataset from the in-process GCS emulator
// on loopback, shaped like a GCS link, for benchmarks that measure the agent
// as a separate process (its RSS, its CLI). It prints the endpoint on the
// first line of stdout and serves until SIGINT or SIGTERM.
//
//	go run ./bench/cmd/gcsemu -objects 8 -size 64MiB -first-byte 20ms -rate 100MB
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/emulator"
)

func main() {
	var (
		bucket    = flag.String("bucket", "bench", "bucket name")
		prefix    = flag.String("prefix", "data/", "object name prefix")
		objects   = flag.Int("objects", 8, "number of objects")
		size      = flag.String("size", "64MiB", "size of each object")
		firstByte = flag.Duration("first-byte", 20*time.Millisecond, "time to first byte of each response")
		rate      = flag.String("rate", "100MB", "bytes per second per connection (0: unshaped)")
		dir       = flag.String("dir", "", "keep objects in files under this directory (each request then costs O(1), not O(objects); no versioning)")
	)
	flag.Parse()
	if err := run(*bucket, *prefix, *objects, *size, *firstByte, *rate, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "gcsemu:", err)
		os.Exit(1)
	}
}

func run(bucket, prefix string, objects int, size string, firstByte time.Duration, rate, dir string) error {
	n, err := humanize.ParseBytes(size)
	if err != nil {
		return fmt.Errorf("-size: %w", err)
	}
	bps, err := humanize.ParseBytes(rate)
	if err != nil {
		return fmt.Errorf("-rate: %w", err)
	}
	objs := make([]fakestorage.Object, objects)
	for i := range objs {
		objs[i] = fakestorage.Object{
			ObjectAttrs: fakestorage.ObjectAttrs{BucketName: bucket, Name: fmt.Sprintf("%sobj-%05d", prefix, i)},
			Content:     emulator.Pattern(uint64(i)+1, int(n)),
		}
	}
	s, err := emulator.Start(emulator.Options{Objects: objs, Dir: dir,
		Shape: emulator.Shape{FirstByte: firstByte, BytesPerSec: int64(bps)}})
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Println(s.Endpoint())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}
