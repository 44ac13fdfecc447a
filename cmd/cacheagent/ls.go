package main

import (
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/daemon"
	"github.com/cacheagent/cacheagent/object"
)

// lsEntry is one row of `cacheagent ls`.
type lsEntry = control.Object

func newLsCmd(opts *cli.Options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls gs://BUCKET/PREFIX",
		Short: "List objects under a prefix with the tier that holds each",
		Long: `ls lists gs://BUCKET/PREFIX at the source and shows, for each object, which tier
holds its live generation (shm, disk or none). If the source cannot be listed, it
shows what the cache holds and says so.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := object.ParsePrefix(args[0])
			if err != nil {
				return err
			}
			var res control.ListResult
			err = withCache(cmd, opts,
				func(c *control.Client) (err error) {
					res, err = c.List(cmd.Context(), u.Bucket, u.Path)
					return err
				},
				func(a *cli.Agent) (err error) {
					res, err = daemon.ListObjects(cmd.Context(), a.Source, a.Cache, u.Bucket, u.Path)
					return err
				})
			if err != nil {
				return err
			}
			if res.Warning != "" {
				slog.Warn(res.Warning)
			}
			return printObjects(cmd.OutOrStdout(), res.Objects, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printObjects prints ls rows as a table or JSON.
func printObjects(w io.Writer, rows []lsEntry, asJSON bool) error {
	if asJSON {
		return cli.WriteJSON(w, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tSIZE\tGENERATION\tNAME")
	for _, r := range rows {
		tierCol := r.Tier
		if r.Pinned {
			tierCol += "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%q\n", tierCol, humanize.IBytes(uint64(r.Size)), r.Generation, r.Name)
	}
	return tw.Flush()
}
