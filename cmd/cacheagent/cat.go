package main

import (
	"bufio"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

func newCatCmd(opts *cli.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cat gs://BUCKET/OBJECT",
		Short: "Write an object's bytes to stdout, through the cache",
		Long: `cat serves the object from the cache, downloading it first if needed. The cached
generation is re-checked against GCS when it was last checked longer ago than
--revalidate (0: always), and a newer generation replaces it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := object.ParseObject(args[0])
			if err != nil {
				return err
			}
			w := bufio.NewWriterSize(cmd.OutOrStdout(), 1<<20)
			err = withCache(cmd, opts,
				func(c *control.Client) error {
					var reval *time.Duration
					if cmd.Flags().Changed("revalidate") {
						reval = &opts.Revalidate
					}
					_, err := c.Read(cmd.Context(), o, w, reval)
					return err
				},
				func(a *cli.Agent) error { return localCat(cmd, opts, a, o, w) })
			if err != nil {
				return err
			}
			return w.Flush()
		},
	}
	return cmd
}

// localCat copies o from the cache to w.
func localCat(cmd *cobra.Command, opts *cli.Options, a *cli.Agent, o object.Object, w io.Writer) error {
	var oo []tier.OpenOption
	if cmd.Flags().Changed("revalidate") {
		oo = append(oo, tier.WithRevalidate(opts.Revalidate))
	}
	h, err := a.Cache.Open(cmd.Context(), o, oo...)
	if err != nil {
		return err
	}
	defer h.Close()
	if _, err := io.Copy(w, io.NewSectionReader(h, 0, h.Size())); err != nil {
		return fmt.Errorf("write %s: %w", o, err)
	}
	return nil
}
