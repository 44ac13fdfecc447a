// Command cacheagent caches Google Cloud Storage objects on local NVMe for ML
// training jobs: a daemon (serve) and a CLI that works through the daemon or
// standalone on the same cache directory.
//
// See docs/architecture.md for the design and README.md for a quick start.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cacheagent: %v\n", err)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}
