package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/fetch"
)

// newPinCmd builds pin, unpin or evict: the three act on every cached object
// under a prefix.
func newPinCmd(opts *options, verb string) *cobra.Command {
	short := map[string]string{
		"pin":   "Download (if needed) and pin every object under a prefix: never evicted",
		"unpin": "Unpin every object under a prefix",
		"evict": "Remove every cached object under a prefix (pinned ones are skipped; open ones go at their last close)",
	}[verb]
	return &cobra.Command{
		Use:   verb + " gs://BUCKET/PREFIX",
		Short: short,
		Args:  cobra.ExactArgs(1),
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
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			switch verb {
			case "pin":
				objs, err := listAll(ctx, a.src, u)
				if err != nil {
					return err
				}
				if err := a.cache.Prefetch(ctx, objs, fetch.Plan, nil); err != nil {
					return err
				}
				n, err := a.cache.Pin(ctx, u.Bucket, u.Path)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "pinned %d objects under %s\n", n, u)
			case "unpin":
				n, err := a.cache.Unpin(ctx, u.Bucket, u.Path)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "unpinned %d objects under %s\n", n, u)
			case "evict":
				res, err := a.cache.Evict(ctx, u.Bucket, u.Path)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "evicted %d objects under %s", res.Evicted, u)
				if res.Pending > 0 {
					fmt.Fprintf(out, "; %d in use, removed at their last close", res.Pending)
				}
				if res.Skipped > 0 {
					fmt.Fprintf(out, "; %d pinned, skipped (unpin first)", res.Skipped)
				}
				fmt.Fprintln(out)
			}
			return nil
		},
	}
}
