package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/internal/cli"
)

// dialTimeout bounds reaching the daemon: a socket that accepts but does
// not answer is a wedged daemon, not a missing one.
const dialTimeout = 5 * time.Second

// dialDaemon returns a client of the daemon on the configured socket, or
// nil if none answers there (the caller works standalone). A daemon that
// serves another cache directory than an explicit --cache-dir is not used.
func dialDaemon(cmd *cobra.Command, opts *cli.Options) (*control.Client, error) {
	socket := opts.Config().Control.Socket
	ctx, cancel := context.WithTimeout(cmd.Context(), dialTimeout)
	defer cancel()
	c, err := control.Dial(ctx, socket)
	switch {
	case errors.Is(err, control.ErrUnavailable):
		slog.Debug("no daemon answers; working standalone", "socket", socket, "err", err)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("daemon socket %s: %w", socket, err)
	}
	if cmd.Flags().Changed("cache-dir") && !cli.SameDir(c.Info().CacheDir, opts.Config().Tiers.Disk.Dir) {
		slog.Debug("the daemon serves another cache dir; working standalone",
			"daemon_dir", c.Info().CacheDir, "cache_dir", opts.Config().Tiers.Disk.Dir)
		c.Close()
		return nil, nil
	}
	return c, nil
}

// withCache runs remote through the daemon when one answers, and local on
// the cache directory otherwise.
func withCache(cmd *cobra.Command, opts *cli.Options, remote func(*control.Client) error, local func(*cli.Agent) error) error {
	c, err := dialDaemon(cmd, opts)
	if err != nil {
		return err
	}
	if c != nil {
		defer c.Close()
		return remote(c)
	}
	a, err := cli.OpenAgent(cmd.Context(), opts.Config())
	if err != nil {
		return err
	}
	defer a.Close()
	return local(a)
}
