package main

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
)

func numCPU() int       { return runtime.NumCPU() }
func goVersion() string { return runtime.Version() }

// readerLabels name the readers in the table.
var readerLabels = map[string]string{
	readerDirect:     "direct GCS (`loader.Direct`)",
	readerDownload:   "download-then-read",
	readerAgent:      "agent",
	readerAgentAhead: "agent, lookahead = connections",
}

// isAgent reports whether reader reads through the daemon.
func isAgent(reader string) bool { return reader == readerAgent || reader == readerAgentAhead }

// meanSeconds returns the mean epoch time of reader's epochs from `from`
// on, and how many there were.
func (r *results) meanSeconds(reader string, from int) (float64, int) {
	var sum float64
	var n int
	for _, e := range r.epochs {
		if e.Reader == reader && e.Epoch >= from {
			sum += e.Seconds
			n++
		}
	}
	if n == 0 {
		return 0, 0
	}
	return sum / float64(n), n
}

// epoch returns reader's epoch n.
func (r *results) epoch(reader string, n int) (epochRecord, bool) {
	for _, e := range r.epochs {
		if e.Reader == reader && e.Epoch == n {
			return e, true
		}
	}
	return epochRecord{}, false
}

// markdown renders the section, markers included.
func (r *results) markdown() (string, error) {
	direct, n := r.meanSeconds(readerDirect, 1)
	if n == 0 || direct <= 0 {
		return "", errors.New("report: no direct-GCS epochs to compare with")
	}
	s := r.setup
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("%s\n## End to end against the alternatives (issue 8)\n\n", beginMarker)
	w("Command: `%s`. Run %s on %s.\n\n", r.command, r.date.Format("2006-01-02 15:04 MST"), r.machine)
	w("Link: %.0f ms to first byte and %.0f MB/s per connection (MB = 10^6 bytes), %d connections. ",
		s.FirstByteMS, float64(s.BytesPerSec)/1e6, s.Connections)
	w("Dataset: %d shards (%d objects, .npy x and y), %d samples, %.0f MiB. Go loader: batch %d, shard-window "+
		"shuffle, %d epochs per reader, every batch checked against the sample ids.\n",
		s.Shards, s.Objects, s.Samples, float64(s.Bytes)/(1<<20), s.Batch, s.Epochs)
	if s.SmallObjects > 0 {
		w("The daemon reads the %d objects of at most %d KiB (%.2f MB, %.2f%% of the bytes) on its small-object lane, up to "+
			"%d more connections beside the %d (`fetch.small_connections`, default as many): their time to first byte "+
			"would otherwise idle a connection each. The ideal counts the %d, which carry the rest.\n",
			s.SmallObjects, s.SmallMax>>10, float64(s.SmallBytes)/1e6, 100*float64(s.SmallBytes)/float64(s.Bytes),
			s.Connections, s.Connections, s.Connections)
	}
	for _, n := range r.notes {
		w("%s\n", n)
	}
	w("\n| reader | epoch | seconds | samples/s | MB from GCS | consumer stalled (fetch/promote/gather/other) | speed vs direct GCS |\n")
	w("|---|---|---|---|---|---|---|\n")
	for _, e := range r.epochs {
		label, ok := readerLabels[e.Reader]
		if !ok {
			label = e.Reader
		}
		ep := fmt.Sprint(e.Epoch)
		switch {
		case e.Reader == readerDownload && e.Epoch == 1:
			ep += fmt.Sprintf(" (copy %.2f s)", e.DownloadSec)
		case isAgent(e.Reader) && e.Epoch == 1:
			ep += " (cold)"
		case isAgent(e.Reader):
			ep += " (warm)"
		}
		w("| %s | %s | %.3f | %.0f | %.0f | %.0f%% (%.0f/%.0f/%.0f/%.0f) | %.2f× |\n", label, ep, e.Seconds,
			e.SamplesPerSec, float64(e.GCSBytes)/1e6, 100*e.StallShare, 100*e.StallFetch, 100*e.StallPromote,
			100*e.StallGather, 100*e.StallOther, direct/e.Seconds)
	}
	w("| link-limited ideal: dataset bytes / (%d × %.0f MB/s) | | %.3f | %.0f | | | %.2f× |\n",
		s.Connections, float64(s.BytesPerSec)/1e6, s.IdealSec, float64(s.Samples)/s.IdealSec, direct/s.IdealSec)
	if c := s.CeilingSec; c > 0 {
		w("| machine ceiling: %d plain streams, link unshaped, bytes discarded | | %.3f | | %.0f | | %.2f× |\n",
			s.Connections, c, float64(s.Bytes)/1e6, direct/c)
	}
	t := r.tmpfs
	w("\nPyTorch DataLoader (`bench/torch_peer.py`: torch %s, %d workers, persistent, prefetch_factor %d, "+
		"batch %d, memory-mapped .npy), %d samples in 3 epochs after a warm-up epoch; best of %d runs each, in alternating order:\n\n",
		t.Torch, t.Workers, t.PrefetchFactor, t.Batch, t.Samples, r.torchRuns)
	w("| files | samples/s | vs tmpfs |\n|---|---|---|\n")
	w("| copy on tmpfs | %.0f | 1.00× |\n", t.SamplesPerSec)
	w("| the agent's FUSE mount (warm) | %.0f | %.2f× |\n\n", r.mount.SamplesPerSec, ratio(r.mount.SamplesPerSec, t.SamplesPerSec))
	w("| target | measured | |\n|---|---|---|\n")
	for _, row := range r.targets(direct) {
		w("| %s | %s | %s |\n", row[0], row[1], row[2])
	}
	w("%s\n", endMarker)
	return b.String(), nil
}

// targets returns the targets as rows: target, measured, verdict.
// The verdicts judge the agent with the loader's default configuration;
// the lookahead variant is shown beside it.
func (r *results) targets(direct float64) [][3]string {
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	ahead := func(format string, f func(reader string) (float64, bool)) string {
		if x, ok := f(readerAgentAhead); ok {
			return "; lookahead = connections: " + fmt.Sprintf(format, x)
		}
		return ""
	}
	var rows [][3]string
	warm := func(reader string) (float64, bool) {
		m, n := r.meanSeconds(reader, 2)
		return direct / m, n > 0 && m > 0
	}
	if x, ok := warm(readerAgent); ok {
		m, n := r.meanSeconds(readerAgent, 2)
		rows = append(rows, [3]string{fmt.Sprintf("agent warm epoch ≥ %.0f× the direct-GCS epoch", targetWarm),
			fmt.Sprintf("**%.1f×** (mean of %d warm epochs %.3f s vs direct GCS %.3f s%s)", x, n, m, direct,
				ahead("%.1f×", warm)), verdict(x >= targetWarm)})
	} else {
		rows = append(rows, [3]string{"agent warm epoch", "no warm epoch measured", "**not met**"})
	}
	cold := func(reader string) (float64, bool) {
		e, ok := r.epoch(reader, 1)
		return e.Seconds / r.setup.IdealSec, ok && r.setup.IdealSec > 0
	}
	if x, ok := cold(readerAgent); ok {
		e, _ := r.epoch(readerAgent, 1)
		copied := ""
		if d, ok := r.epoch(readerDownload, 1); ok && d.DownloadSec > 0 {
			copied = fmt.Sprintf("; a plain parallel copy over the same link: %.2f×", d.DownloadSec/r.setup.IdealSec)
		}
		rows = append(rows, [3]string{fmt.Sprintf("agent cold epoch ≤ %.2f× the link-limited ideal", targetCold),
			fmt.Sprintf("**%.2f×** (%.3f s vs %.3f s%s%s)", x, e.Seconds, r.setup.IdealSec, ahead("%.2f×", cold), copied),
			verdict(x <= targetCold)})
	} else {
		rows = append(rows, [3]string{"agent cold epoch", "not measured", "**not met**"})
	}
	x := ratio(r.mount.SamplesPerSec, r.tmpfs.SamplesPerSec)
	rows = append(rows, [3]string{fmt.Sprintf("PyTorch through the mount (warm) ≥ %.1f× PyTorch on tmpfs", targetTorch),
		fmt.Sprintf("**%.2f×** (%.0f vs %.0f samples/s)", x, r.mount.SamplesPerSec, r.tmpfs.SamplesPerSec),
		verdict(x >= targetTorch)})
	return rows
}

// ratio returns a/b, or 0 if b is not positive.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}
