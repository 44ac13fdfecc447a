package main

import (
	"fmt"
	"io"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/daemon"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// newVerifyCmd builds verify: read cached copies and check them against
// their CRC32C, through the daemon (POST /v1/verify, synchronous) or
// standalone on the cache directory.
func newVerifyCmd(opts *cli.Options) *cobra.Command {
	var asJSON bool
	var rate string
	cmd := &cobra.Command{
		Use:   "verify [gs://BUCKET/PREFIX]",
		Short: "Check cached copies (every one, or those under a prefix) against their CRC32C; drop the corrupt ones",
		Long: "verify reads every cached copy (disk and shm) of the objects under the prefix, or of every cached\n" +
			"object, and compares its CRC32C with the one recorded when it was downloaded. A copy that differs is\n" +
			"dropped (a copy in use stays readable by its reader until released) and fetched again when next\n" +
			"read. Objects from sources without CRC32C (a local directory) are checked by size only.\n" +
			"It exits 0 when the check ran to its end, whatever it found.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := control.VerifyRequest{}
			if len(args) == 1 {
				u, err := object.ParsePrefix(args[0])
				if err != nil {
					return err
				}
				req.Bucket, req.Prefix = u.Bucket, u.Path
			}
			if rate != "" {
				n, err := daemon.ParseSize(rate)
				if err != nil {
					return fmt.Errorf("--rate: %w", err)
				}
				req.Rate = int64(n)
			}
			var rep control.VerifyReport
			err := withCache(cmd, opts,
				func(c *control.Client) (err error) {
					rep, err = c.Verify(cmd.Context(), req, nil)
					return err
				},
				func(a *cli.Agent) error {
					res, err := a.Cache.Verify(cmd.Context(), tier.VerifyOptions{Bucket: req.Bucket, Prefix: req.Prefix,
						Rate: req.Rate})
					rep = daemon.VerifyReport(res, err)
					return err
				})
			if err != nil {
				return err
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), rep)
			}
			printVerify(cmd.OutOrStdout(), args, rep)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().StringVar(&rate, "rate", "", "read at most this many bytes per second, e.g. 200MiB (default: unlimited)")
	return cmd
}

// printVerify prints a verification report.
func printVerify(w io.Writer, args []string, rep control.VerifyReport) {
	what := "the cache"
	if len(args) == 1 {
		what = args[0]
	}
	fmt.Fprintf(w, "verified %s: %d objects, %d copies, %s read\n", what, rep.Objects, rep.Copies,
		humanize.IBytes(uint64(rep.Bytes)))
	fmt.Fprintf(w, "  intact %d, size only (no CRC32C at the source) %d, corrupt %d, damaged %d, gone meanwhile %d\n",
		rep.Verified, rep.Unverifiable, rep.Corrupt, rep.Damaged, rep.Skipped)
	if len(rep.Dropped) == 0 {
		return
	}
	fmt.Fprintln(w, "dropped (fetched again when next read):")
	for _, d := range rep.Dropped {
		fmt.Fprintf(w, "  %s (%s): %s\n", d.Object.Object(), d.Tier, d.Reason)
	}
	if n := rep.Corrupt + rep.Damaged; n > int64(len(rep.Dropped)) {
		fmt.Fprintf(w, "  … and %d more\n", n-int64(len(rep.Dropped)))
	}
}
