package main

import (
	"fmt"
	"time"

	"github.com/dustin/go-humanize"
)

// demoRowFormat lays out the demo's table.
const demoRowFormat = "%5s  %-12s %8s %10s %8s %7s %9s %6s %8s\n"

// printHeader prints the table's header.
func (r *demoRun) printHeader() {
	fmt.Fprintf(r.out, demoRowFormat, "epoch", "reader", "seconds", "samples/s", "stalled", "on GCS", "from GCS",
		"hits", "speedup")
}

// printRow prints one epoch's row. Speedups compare with the direct
// reader's epoch of the same number.
func (r *demoRun) printRow(e demoEpoch) {
	secs := e.elapsed.Seconds()
	speedup := "1.0×"
	if len(r.direct) >= e.epoch && e.reader != r.direct[e.epoch-1].reader {
		speedup = fmt.Sprintf("%.1f×", r.direct[e.epoch-1].elapsed.Seconds()/secs)
	}
	hits := "-"
	if e.opens > 0 {
		hits = fmt.Sprintf("%.0f%%", 100*float64(e.hits)/float64(e.opens))
	}
	fmt.Fprintf(r.out, demoRowFormat, fmt.Sprint(e.epoch), e.reader, fmt.Sprintf("%.3f", secs),
		humanize.Comma(int64(float64(e.samples)/secs)), percent(e.wait, e.elapsed), percent(e.waitFetch, e.elapsed),
		humanize.IBytes(uint64(e.gcsBytes)), hits, speedup)
}

// percent returns part as a share of whole.
func percent(part, whole time.Duration) string {
	return fmt.Sprintf("%.1f%%", 100*part.Seconds()/whole.Seconds())
}

// meanEpoch returns the mean duration of rows.
func meanEpoch(rows []demoEpoch) time.Duration {
	var d time.Duration
	for _, e := range rows {
		d += e.elapsed
	}
	return d / time.Duration(max(len(rows), 1))
}

// printSummary prints the warm speedup and the cold epoch against the
// link-limited ideal.
func (r *demoRun) printSummary() {
	fmt.Fprintln(r.out)
	direct := meanEpoch(r.direct)
	if len(r.cached) > 1 {
		warm := meanEpoch(r.cached[1:])
		fmt.Fprintf(r.out, "warm epochs (%s): %.1f× the direct reader's speed (mean epoch %.3f s vs %.3f s)\n",
			r.warmTier, direct.Seconds()/warm.Seconds(), warm.Seconds(), direct.Seconds())
	} else {
		fmt.Fprintln(r.out, "warm epochs: none (--epochs 1)")
	}
	cold := r.cached[0].elapsed
	fmt.Fprintf(r.out, "cold epoch: %.1f× the direct reader's speed (%.3f s vs %.3f s)\n", direct.Seconds()/cold.Seconds(),
		cold.Seconds(), direct.Seconds())
	if r.cfg.linkRate <= 0 {
		fmt.Fprintln(r.out, "cold epoch: unshaped link (--link-rate 0), no limit to compare with")
		return
	}
	ideal := time.Duration(float64(r.bytes) / (float64(r.cfg.connections) * float64(r.cfg.linkRate)) * float64(time.Second))
	fmt.Fprintf(r.out, "cold epoch: %.2f× the link-limited ideal of %.3f s (%s / (%d connections × %s/s))\n",
		cold.Seconds()/ideal.Seconds(), ideal.Seconds(), humanize.IBytes(uint64(r.bytes)), r.cfg.connections,
		humanize.Bytes(uint64(r.cfg.linkRate)))
}

// printLegend explains the table.
func (r *demoRun) printLegend() {
	fmt.Fprint(r.out, `
  seconds    the epoch's wall time, until its last batch was released
  samples/s  samples the loader delivered per second
  stalled    share of the epoch the consumer waited in Next for a batch;
             on GCS: the part spent waiting for a shard being downloaded
  from GCS   bytes the emulated GCS sent during the epoch (the direct reader starts
             the next epoch's first shards early, so its epochs share bytes)
  hits       share of the loader's shard openings that found the shard cached already
             (no wait for GCS); the direct reader has no cache
  speedup    the direct reader's time for the same epoch / this epoch's time
  ideal      dataset bytes / (connections × per-connection rate): the link's limit
`)
}
