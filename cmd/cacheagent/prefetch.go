package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

func newPrefetchCmd(opts *cli.Options) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "prefetch gs://BUCKET/PREFIX",
		Short: "Download every object under a prefix into the cache",
		Long: `prefetch lists gs://BUCKET/PREFIX and downloads every object that is not cached yet.
Through the daemon it starts a job and returns its id; with --wait it follows the
job to its end. Standalone it always waits. While it waits, it shows a progress
bar on a terminal (objects, bytes, rate, ETA).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := object.ParsePrefix(args[0])
			if err != nil {
				return err
			}
			return withCache(cmd, opts,
				func(c *control.Client) error { return remotePrefetch(cmd.Context(), c, u, wait, cmd) },
				func(a *cli.Agent) error { return runPrefetch(cmd.Context(), a, u, cmd.ErrOrStderr()) })
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "through the daemon, wait for the job to finish (standalone always waits)")
	return cmd
}

// remotePrefetch starts a prefetch job in the daemon and, with wait,
// follows it, drawing its progress, until it ends.
func remotePrefetch(ctx context.Context, c *control.Client, u object.URI, wait bool, cmd *cobra.Command) error {
	j, err := c.Prefetch(ctx, u.Bucket, u.Path, object.Warm)
	if err != nil {
		return err
	}
	if !wait {
		fmt.Fprintf(cmd.OutOrStdout(), "job %s: prefetching %s in the daemon\n", j.ID, u)
		return nil
	}
	w := cmd.ErrOrStderr()
	var rep *progressReporter
	start := time.Now()
	final, err := c.WatchJob(ctx, j.ID, func(j control.Job) {
		if rep == nil && j.State != control.JobListing {
			rep = newProgressReporter(w, j.Progress.Bytes)
		}
		if rep != nil {
			rep.update(tierProgress(j.Progress))
		}
	})
	if rep != nil {
		rep.finish()
	}
	if ctx.Err() != nil {
		fmt.Fprintf(w, "job %s goes on in the daemon\n", j.ID)
		return err
	}
	if err != nil {
		return err
	}
	printPrefetchSummary(w, u, tierProgress(final.Progress), time.Since(start))
	if final.State != control.JobDone {
		return fmt.Errorf("prefetch %s: job %s %s: %s", u, final.ID, final.State, final.Error)
	}
	return nil
}

// tierProgress converts a job's progress for the progress reporter.
func tierProgress(p control.Progress) tier.Progress {
	return tier.Progress{Objects: p.Objects, Bytes: p.Bytes, ObjectsDone: p.ObjectsDone, BytesDone: p.BytesDone,
		BytesFetched: p.BytesFetched, Cached: p.Cached, Failed: p.Failed, Listing: p.Listing}
}

// listAll collects the attributes of every object under u.
func listAll(ctx context.Context, src object.Source, u object.URI) ([]object.Attrs, error) {
	var objs []object.Attrs
	for a, err := range src.List(ctx, u.Bucket, u.Path) {
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", u, err)
		}
		objs = append(objs, a)
	}
	return objs, nil
}

// runPrefetch prefetches u's objects as they are listed.
func runPrefetch(ctx context.Context, a *cli.Agent, u object.URI, w io.Writer) error {
	rep := newProgressReporter(w, 0)
	start := time.Now()
	err := a.Cache.PrefetchSeq(ctx, a.Source.List(ctx, u.Bucket, u.Path), object.Warm, 0, rep.update)
	rep.finish()
	printPrefetchSummary(w, u, rep.last, time.Since(start))
	return err
}

// printPrefetchSummary prints the line that ends a prefetch.
func printPrefetchSummary(w io.Writer, u object.URI, p tier.Progress, el time.Duration) {
	fmt.Fprintf(w, "prefetched %s: %d objects, %s (%d already cached), %s fetched in %s (%s/s)\n",
		u, p.Objects, humanize.IBytes(uint64(p.Bytes)), p.Cached,
		humanize.IBytes(uint64(p.BytesFetched)), el.Round(time.Millisecond),
		humanize.IBytes(uint64(float64(p.BytesFetched)/max(el.Seconds(), 1e-9))))
}

// progressReporter draws a progress bar on a terminal and prints a line every
// ten seconds otherwise.
type progressReporter struct {
	w         io.Writer
	bar       *progressbar.ProgressBar // nil when w is not a terminal
	last      tier.Progress
	lastPrint time.Time
}

func newProgressReporter(w io.Writer, bytes int64) *progressReporter {
	r := &progressReporter{w: w, lastPrint: time.Now()}
	r.last.Bytes = bytes
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		r.bar = progressbar.NewOptions64(bytes,
			progressbar.OptionSetWriter(w),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowCount(),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetDescription("objects"),
		)
	}
	return r
}

// update shows p. While the objects are still being listed, their totals
// grow and are shown with a "+".
func (r *progressReporter) update(p tier.Progress) {
	more := ""
	if p.Listing {
		more = "+"
	}
	if r.bar != nil {
		if p.Bytes != r.last.Bytes {
			r.bar.ChangeMax64(p.Bytes)
		}
		r.last = p
		r.bar.Describe(fmt.Sprintf("objects %d/%d%s", p.ObjectsDone, p.Objects, more))
		_ = r.bar.Set64(p.BytesDone)
		return
	}
	r.last = p
	if time.Since(r.lastPrint) >= 10*time.Second {
		r.lastPrint = time.Now()
		fmt.Fprintf(r.w, "prefetch: %d/%d%s objects, %s/%s%s\n", p.ObjectsDone, p.Objects, more,
			humanize.IBytes(uint64(p.BytesDone)), humanize.IBytes(uint64(p.Bytes)), more)
	}
}

func (r *progressReporter) finish() {
	if r.bar != nil {
		_ = r.bar.Finish()
		fmt.Fprintln(r.w)
	}
}
