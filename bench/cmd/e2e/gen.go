package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/cacheagent/cacheagent/loader/synth"
)

// gen is `e2e gen`: it writes the synthetic dataset.
func gen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	var (
		dir      = fs.String("dir", "", "directory to write DIR/BUCKET/PREFIX/shard-*.{x,y}.npy into (required)")
		bucket   = fs.String("bucket", "bench", "bucket name")
		prefix   = fs.String("prefix", "train/", "object name prefix")
		shards   = fs.Int("shards", 32, "number of shards")
		rows     = fs.Int("rows", 2000, "rows (samples) per shard")
		rowBytes = fs.Int("row-bytes", 16384, "bytes of each sample's x row (y adds 8)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *dir == "":
		return errors.New("gen: -dir is required")
	case *bucket == "":
		return errors.New("gen: -bucket is empty")
	case *shards <= 0 || *rows <= 0 || *rowBytes <= 0:
		return fmt.Errorf("gen: -shards %d, -rows %d, -row-bytes %d: all must be positive", *shards, *rows, *rowBytes)
	case int64(*shards)*int64(*rows)*int64(*rowBytes) > 64<<30:
		return fmt.Errorf("gen: %d × %d × %d bytes is more than 64 GiB", *shards, *rows, *rowBytes)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	if err := synth.Uniform(*shards, *rows, *rowBytes).WriteDir(*dir, *bucket, *prefix); err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	return nil
}
