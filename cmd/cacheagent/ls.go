package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
)

// lsEntry is one row of `cacheagent ls`.
type lsEntry struct {
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	Size       int64  `json:"size"`
	Tier       string `json:"tier"` // shm, disk or none
	Pinned     bool   `json:"pinned,omitempty"`
	// CachedGeneration is set when the cache holds another generation than the live one.
	CachedGeneration int64 `json:"cached_generation,omitempty"`
}

func newLsCmd(opts *options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls gs://BUCKET/PREFIX",
		Short: "List objects under a prefix with the tier that holds each",
		Long: `ls lists gs://BUCKET/PREFIX at the source and shows, for each object, which tier
holds its live generation (shm, disk or none). If the source cannot be listed, it
shows what the cache holds and says so.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := parseGS(args[0])
			if err != nil {
				return err
			}
			a, err := openAgent(cmd.Context(), opts)
			if err != nil {
				return err
			}
			defer a.Close()
			rows, err := lsRows(cmd, a, u)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIER\tSIZE\tGENERATION\tNAME")
			for _, r := range rows {
				tierCol := r.Tier
				if r.Pinned {
					tierCol += "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%q\n", tierCol, humanize.IBytes(uint64(r.Size)), r.Generation, r.Name)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func lsRows(cmd *cobra.Command, a *agent, u gsURI) ([]lsEntry, error) {
	cached := make(map[string]lsEntry)
	for _, e := range a.cache.Entries(u.Bucket, u.Path) {
		cached[e.Attrs.Name] = lsEntry{Name: e.Attrs.Name, Generation: e.Attrs.Generation,
			Size: e.Attrs.Size, Tier: e.Tier, Pinned: e.Pinned}
	}
	objs, err := listAll(cmd.Context(), a.src, u)
	if err != nil {
		if cmd.Context().Err() != nil {
			return nil, err
		}
		slog.Warn("source not listable; showing cached objects only", "err", err)
		rows := make([]lsEntry, 0, len(cached))
		for _, e := range a.cache.Entries(u.Bucket, u.Path) {
			rows = append(rows, cached[e.Attrs.Name])
		}
		return rows, nil
	}
	rows := make([]lsEntry, 0, len(objs))
	for _, o := range objs {
		r := lsEntry{Name: o.Name, Generation: o.Generation, Size: o.Size, Tier: "none"}
		if c, ok := cached[o.Name]; ok {
			r.Pinned = c.Pinned
			if c.Generation == o.Generation {
				r.Tier = c.Tier
			} else {
				r.CachedGeneration = c.Generation
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}
