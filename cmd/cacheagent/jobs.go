package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
)

func newJobsCmd(opts *cli.Options) *cobra.Command {
	var asJSON, wait, cancel bool
	cmd := &cobra.Command{
		Use:   "jobs [ID]",
		Short: "List the daemon's prefetch jobs, or show, follow (--wait) or cancel one",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dialDaemon(cmd, opts)
			if err != nil {
				return err
			}
			if c == nil {
				return fmt.Errorf("jobs: no daemon answers on %s: %w", opts.Config().Control.Socket, control.ErrUnavailable)
			}
			defer c.Close()
			ctx := cmd.Context()
			var js []control.Job
			switch {
			case len(args) == 0:
				js, err = c.Jobs(ctx)
			case cancel:
				err = c.CancelJob(ctx, args[0])
				if err == nil {
					var j control.Job
					j, err = c.Job(ctx, args[0])
					js = []control.Job{j}
				}
			case wait:
				var j control.Job
				j, err = c.WatchJob(ctx, args[0], nil)
				js = []control.Job{j}
			default:
				var j control.Job
				j, err = c.Job(ctx, args[0])
				js = []control.Job{j}
			}
			if err != nil {
				return err
			}
			if err := printJobs(cmd.OutOrStdout(), js, asJSON); err != nil {
				return err
			}
			if j := js[0]; wait && j.State != control.JobDone { // so that `jobs ID --wait && train` waits for a done job
				return fmt.Errorf("jobs: job %s %s: %s", j.ID, j.State, j.Error)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.BoolVar(&wait, "wait", false, "wait for job ID to finish")
	f.BoolVar(&cancel, "cancel", false, "cancel job ID")
	return cmd
}

// printJobs prints jobs as a table or JSON.
func printJobs(w io.Writer, js []control.Job, asJSON bool) error {
	if asJSON {
		return cli.WriteJSON(w, js)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tPRIORITY\tSTATE\tOBJECTS\tBYTES\tFETCHED\tURI\tERROR")
	for _, j := range js {
		p := j.Progress
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s/%s\t%s\t%q\t%s\n", j.ID, j.Kind, j.Priority, j.State,
			p.ObjectsDone, p.Objects, humanize.IBytes(uint64(p.BytesDone)), humanize.IBytes(uint64(p.Bytes)),
			humanize.IBytes(uint64(p.BytesFetched)), j.URI, j.Error)
	}
	return tw.Flush()
}
