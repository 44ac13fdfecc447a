package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/object"
)

// newPinCmd builds pin, unpin or evict: the three act on every cached object
// under a prefix.
func newPinCmd(opts *cli.Options, verb string) *cobra.Command {
	short := map[string]string{
		"pin":   "Download (if needed) and pin every object under a prefix: never evicted",
		"unpin": "Unpin every object under a prefix",
		"evict": "Remove every cached object under a prefix (pinned ones are skipped; open ones go when closed)",
	}[verb]
	var hot bool
	cmd := &cobra.Command{
		Use:   verb + " gs://BUCKET/PREFIX",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := object.ParsePrefix(args[0])
			if err != nil {
				return err
			}
			var r pinResult
			err = withCache(cmd, opts,
				func(c *control.Client) (err error) {
					r, err = remotePin(cmd.Context(), c, verb, u, hot)
					return err
				},
				func(a *cli.Agent) (err error) {
					r, err = localPin(cmd.Context(), a, verb, u, hot)
					return err
				})
			if err != nil {
				return err
			}
			r.print(cmd, verb, u)
			return nil
		},
	}
	if verb == "pin" {
		cmd.Flags().BoolVar(&hot, "hot", false, "also promote the pinned objects to the shm tier")
	}
	return cmd
}

// pinResult is what pin, unpin and evict did.
type pinResult struct {
	n, pending, skipped int
}

func (r pinResult) print(cmd *cobra.Command, verb string, u object.URI) {
	out := cmd.OutOrStdout()
	past := map[string]string{"pin": "pinned", "unpin": "unpinned", "evict": "evicted"}[verb]
	fmt.Fprintf(out, "%s %d objects under %s", past, r.n, u)
	if r.pending > 0 {
		fmt.Fprintf(out, " (%d in use: deleted when their readers let go)", r.pending)
	}
	if r.skipped > 0 {
		fmt.Fprintf(out, " (%d pinned, skipped)", r.skipped)
	}
	fmt.Fprintln(out)
}

// remotePin asks the daemon.
func remotePin(ctx context.Context, c *control.Client, verb string, u object.URI, hot bool) (pinResult, error) {
	switch verb {
	case "pin":
		n, err := c.Pin(ctx, u.Bucket, u.Path, hot)
		return pinResult{n: n}, err
	case "unpin":
		n, err := c.Unpin(ctx, u.Bucket, u.Path)
		return pinResult{n: n}, err
	}
	r, err := c.Evict(ctx, u.Bucket, u.Path)
	return pinResult{n: r.Evicted, pending: r.Pending, skipped: r.Skipped}, err
}

// localPin works on the cache directory.
func localPin(ctx context.Context, a *cli.Agent, verb string, u object.URI, hot bool) (pinResult, error) {
	switch verb {
	case "pin":
		objs, err := listAll(ctx, a.Source, u)
		if err != nil {
			return pinResult{}, err
		}
		if err := a.Cache.Prefetch(ctx, objs, object.Plan, nil); err != nil {
			return pinResult{}, err
		}
		pin := a.Cache.Pin
		if hot {
			pin = a.Cache.PinHot
		}
		n, err := pin(ctx, u.Bucket, u.Path)
		return pinResult{n: n}, err
	case "unpin":
		n, err := a.Cache.Unpin(ctx, u.Bucket, u.Path)
		return pinResult{n: n}, err
	}
	r, err := a.Cache.Evict(ctx, u.Bucket, u.Path)
	return pinResult{n: r.Evicted, pending: r.Pending, skipped: r.Skipped}, err
}
