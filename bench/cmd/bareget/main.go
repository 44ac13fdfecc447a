// Command bareget is the baseline of the small-object benchmarks: a bare
// client that lists a prefix and GETs every object on as many keep-alive
// connections, discarding the bytes, as a program reading a bucket without
// any cache would. It prints one line: objects, bytes, seconds, objects/s
// and the CPU seconds it used.
//
//	bareget -endpoint http://127.0.0.1:PORT/storage/v1/ -connections 32 gs://bench/data/
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/cacheagent/cacheagent/bench/bare"
	"github.com/cacheagent/cacheagent/internal/cputime"
	"github.com/cacheagent/cacheagent/object"
)

func main() {
	endpoint := flag.String("endpoint", "", "the emulator's JSON API endpoint (…/storage/v1/)")
	conns := flag.Int("connections", 32, "GETs in flight")
	flag.Parse()
	if flag.NArg() != 1 || *endpoint == "" {
		fmt.Fprintln(os.Stderr, "usage: bareget -endpoint URL [-connections N] gs://BUCKET/PREFIX")
		os.Exit(2)
	}
	if err := run(context.Background(), *endpoint, *conns, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "bareget:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, endpoint string, conns int, uri string) error {
	u, err := object.ParsePrefix(uri)
	if err != nil {
		return err
	}
	cpu0 := cputime.Self()
	res, err := bare.Read(ctx, endpoint, conns, u.Bucket, u.Path)
	if err != nil {
		return err
	}
	secs := res.Elapsed.Seconds()
	fmt.Printf("objects %d bytes %d seconds %.3f objects/s %.1f cpu-seconds %.3f\n",
		res.Objects, res.Bytes, secs, float64(res.Objects)/secs, (cputime.Self() - cpu0).Seconds())
	return nil
}
