package main

import (
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
)

// dialDaemon returns a client of the daemon on the configured socket, or
// nil if none answers there (see cli.DialDaemon).
func dialDaemon(cmd *cobra.Command, opts *cli.Options) (*control.Client, error) {
	return cli.DialDaemon(cmd.Context(), opts, cmd.Flags().Changed("cache-dir"))
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
