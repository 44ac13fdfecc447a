package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
)

// statusReport is what `cacheagent status --json` prints.
type statusReport = control.Status

func newStatusCmd(opts *cli.Options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show tiers, usage and hit ratios (and, through the daemon, fetches, jobs and leases)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rep statusReport
			err := withCache(cmd, opts,
				func(c *control.Client) (err error) {
					rep, err = c.Status(cmd.Context())
					return err
				},
				func(a *cli.Agent) error {
					rep = statusReport{CacheDir: opts.Config().Tiers.Disk.Dir, Tiers: a.Cache.Stats().Tiers}
					return nil
				})
			if err != nil {
				return err
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), rep)
			}
			return printStatus(cmd.OutOrStdout(), rep)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printStatus prints a status report as tables.
func printStatus(w io.Writer, rep statusReport) error {
	if rep.PID != 0 {
		fmt.Fprintf(w, "daemon pid %d, %s, up %s, socket %s, metrics %s\n", rep.PID, rep.Version,
			time.Since(rep.Started).Round(time.Second), rep.Socket, orNone(rep.MetricsAddr))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tENTRIES\tUSED\tMAX\tUSE%\tPINNED\tHITS\tDIR")
	for _, t := range rep.Tiers {
		pct := 0.0
		if t.MaxBytes > 0 {
			pct = 100 * float64(t.UsedBytes) / float64(t.MaxBytes)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.1f\t%s\t%.1f%%\t%s\n", t.Name, t.Entries,
			humanize.IBytes(uint64(t.UsedBytes)), humanize.IBytes(uint64(t.MaxBytes)), pct,
			humanize.IBytes(uint64(t.PinnedBytes)), 100*t.HitRatio, t.Dir)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if f := rep.Fetch; f != nil {
		fmt.Fprintf(w, "fetch: %d/%d connections (+%d for small objects), %d slices waiting; %d objects, %s, %d failures, %d CRC failures\n",
			f.ConnsInUse, f.Connections, f.SmallConnsInUse, f.WaitingSlices, f.Objects, humanize.IBytes(uint64(f.Bytes)),
			f.Failures, f.CRCFailures)
	}
	if rep.PID != 0 {
		fmt.Fprintf(w, "jobs: %s; %d lease sessions, %d leases; %d loader sessions; %d plans\n", jobCounts(rep.Jobs),
			rep.Sessions, rep.Leases, rep.LoaderSessions, rep.Plans)
	}
	if m := rep.Mount; m != nil {
		fmt.Fprintf(w, "mount: %s (open: %s, passthrough: %v), %d buckets; %d opens (%d failed), %d files open, %d reads (%s)\n",
			m.Path, m.Open, m.Passthrough, m.Buckets, m.Opens, m.OpenErrors, m.OpenFiles, m.Reads,
			humanize.IBytes(uint64(m.ReadBytes)))
	}
	if f := rep.Fleet; f != nil {
		fmt.Fprintf(w, "fleet: %s in a fleet of %d alive, %d suspect, %d dead (cacheagent fleet status)\n",
			f.Self, f.Members["alive"], f.Members["suspect"], f.Members["dead"])
	}
	return nil
}

// jobCounts formats job counts by state.
func jobCounts(m map[control.JobState]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for s, n := range m {
		parts = append(parts, fmt.Sprintf("%d %s", n, s))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// orNone returns s, or "none" if it is empty.
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
