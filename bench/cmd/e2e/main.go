// Command e2e is the Go side of bench/e2e.sh, the end-to-end
// benchmark of cacheagent against the alternatives (issue 8). It has three
// subcommands:
//
//	e2e gen -dir DIR [-shards N -rows N -row-bytes N]
//	    writes a synthetic .npy shard dataset (loader/synth) into DIR in
//	    fake-gcs-server's -data layout: DIR/BUCKET/PREFIX/shard-*.{x,y}.npy.
//
//	e2e run -endpoint URL -stats URL -socket PATH -download-dir DIR …
//	    reads that dataset from a GCS endpoint (the shaping proxy,
//	    bench/cmd/gcsproxy) for -epochs epochs with the Go loader, once
//	    per reader: direct GCS (loader.Direct, every epoch from GCS),
//	    download-then-read (copy every object with -connections parallel
//	    streams, then read the local files; the copy is part of epoch 1) and
//	    the agent (a client of the daemon's socket: epoch 1 cold, later
//	    epochs warm). It prints one JSON line describing the setup, with the
//	    link-limited ideal epoch, then one JSON line per epoch.
//
//	e2e report -results FILE -torch-mount FILE -torch-tmpfs FILE -doc FILE …
//	    turns those lines and bench/torch_peer.py's two reports into a
//	    markdown table with ratios and the targets, and writes it into
//	    the doc between the e2e markers (appending the section if absent).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: e2e gen|run|report [flags] (-h for each)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "gen":
		err = gen(args)
	case "run":
		err = run(ctx, args, os.Stdout, os.Stderr)
	case "report":
		err = report(args)
	default:
		err = fmt.Errorf("unknown subcommand %q: want gen, run or report", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		stop()
		os.Exit(1)
	}
}
