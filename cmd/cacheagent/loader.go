package main

import (
	"bufio"
	"errors"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/mmapstore"
)

// newLoaderCmd groups the loader's commands.
func newLoaderCmd(opts *cli.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "loader",
		Short: "Inspect what the Go loader reads",
	}
	cmd.AddCommand(newLoaderIDsCmd(opts), newLoaderDumpCmd(opts))
	return cmd
}

// newLoaderIDsCmd is `cacheagent loader ids`.
func newLoaderIDsCmd(opts *cli.Options) *cobra.Command {
	var lf cli.LoaderFlags
	cmd := &cobra.Command{
		Use:   "ids --data gs://BUCKET/PREFIX [--pattern P] --batch N --seed S --epoch E --rank R --world W",
		Short: "Print the sample ids of each batch a rank reads, one batch per line",
		Long: `ids prints, one line per batch and in order, the ids of the samples a loader with
these settings returns (ids number the rows of all shards, in shard order; for token
datasets, --format tokens|megatron with --seq-len, they are window ids; for WebDataset
tars, global sample indices, the tars indexed through the cache once). It lists
the dataset and reads each shard's .npy header with a small ranged read, but reads no
data: the order depends only on the row counts and the settings, and is the same on
every machine. --resume-batch K starts at batch K of --epoch, as a resumed run does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			src, err := fetch.NewGCS(ctx, opts.Config().Fetch.GCS())
			if err != nil {
				return err
			}
			defer src.Close()
			// Most formats need only listings and headers; a format that
			// must read whole shards to number the samples (WebDataset's
			// tar indexes, unless saved) reads them through the cache.
			idx := wdsIndex(opts)
			cfg, err := lf.Resolve(ctx, src, nil, idx)
			if errors.Is(err, loader.ErrNoRecords) {
				ids := func(s *mmapstore.Store) error {
					defer s.Close()
					if cfg, err = lf.Resolve(ctx, src, loader.FromStore(s), idx); err != nil {
						return err
					}
					return printIDs(cmd, cfg)
				}
				return withCache(cmd, opts, func(c *control.Client) error {
					return ids(mmapstore.New(c, mmapstore.Config{}))
				}, func(a *cli.Agent) error {
					return ids(mmapstore.New(a.Cache.Opener(), mmapstore.Config{}))
				})
			}
			if err != nil {
				return err
			}
			return printIDs(cmd, cfg)
		},
	}
	lf.Register(cmd.Flags())
	return cmd
}

// printIDs prints the batches of cfg, one line of space-separated ids each.
func printIDs(cmd *cobra.Command, cfg loader.Config) error {
	seq, err := loader.IDs(cfg)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	var line []byte
	for b := range seq {
		line = line[:0]
		for i, id := range b.IDs {
			if i > 0 {
				line = append(line, ' ')
			}
			line = strconv.AppendInt(line, id, 10)
		}
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	return w.Flush()
}
