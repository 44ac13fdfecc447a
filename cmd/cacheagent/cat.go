package main

import (
	"bufio"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/tier"
)

func newCatCmd(opts *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cat gs://BUCKET/OBJECT",
		Short: "Write an object's bytes to stdout, through the cache",
		Long: `cat serves the object from the cache, downloading it first if needed. The cached
generation is re-checked against GCS when it was last checked longer ago than
--revalidate (0: always), and a newer generation replaces it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := parseGS(args[0])
			if err != nil {
				return err
			}
			if u.Path == "" {
				return fmt.Errorf("%s names no object", args[0])
			}
			a, err := openAgent(cmd.Context(), opts)
			if err != nil {
				return err
			}
			defer a.Close()
			var oo []tier.OpenOption
			if cmd.Flags().Changed("revalidate") {
				oo = append(oo, tier.WithRevalidate(opts.revalidate))
			}
			h, err := a.cache.Open(cmd.Context(), fetch.Object{Bucket: u.Bucket, Name: u.Path}, oo...)
			if err != nil {
				return err
			}
			defer h.Close()
			w := bufio.NewWriterSize(cmd.OutOrStdout(), 1<<20)
			if _, err := io.Copy(w, io.NewSectionReader(h, 0, h.Size())); err != nil {
				return fmt.Errorf("write %s: %w", u, err)
			}
			return w.Flush()
		},
	}
	return cmd
}
