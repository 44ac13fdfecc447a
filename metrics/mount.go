package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheagent/cacheagent/stats"
)

// mountTable is the FUSE mount's series.
var mountTable = []metric[stats.Mount]{
	counter(desc("cacheagent_mount_opens_total", "File opens the kernel asked the mount for."),
		func(s stats.Mount) float64 { return float64(s.Opens) }),
	counter(desc("cacheagent_mount_open_errors_total", "File opens through the mount that failed, interrupted ones included."),
		func(s stats.Mount) float64 { return float64(s.OpenErrors) }),
	gauge(desc("cacheagent_mount_open_files", "Files open through the mount."),
		func(s stats.Mount) float64 { return float64(s.OpenFiles) }),
	counter(desc("cacheagent_mount_reads_total", "Reads the daemon served through the mount (none with passthrough)."),
		func(s stats.Mount) float64 { return float64(s.Reads) }),
	counter(desc("cacheagent_mount_read_bytes_total", "Bytes those reads asked for."),
		func(s stats.Mount) float64 { return float64(s.ReadBytes) }),
	counter(desc("cacheagent_mount_listings_total", "Bucket listings the mount made."),
		func(s stats.Mount) float64 { return float64(s.Listings) }),
	counter(desc("cacheagent_mount_list_errors_total", "Bucket listings of the mount that failed."),
		func(s stats.Mount) float64 { return float64(s.ListErrors) }),
	gauge(desc("cacheagent_mount_buckets", "Buckets the mount shows."),
		func(s stats.Mount) float64 { return float64(s.Buckets) }),
	gauge(desc("cacheagent_mount_passthrough", "1 if the kernel reads the mount's open files from the cache itself (FUSE passthrough)."),
		func(s stats.Mount) float64 { return flag(s.Passthrough) }),
	gauge(desc("cacheagent_mount_skips_opens", "1 if the kernel opens the mount's files without asking the daemon (mount.open skip, or auto's choice)."),
		func(s stats.Mount) float64 { return flag(s.Open == "skip") }),
}

// flag is 1 for true.
func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// optionalCollector exports one table from a value read at scrape time,
// or nothing while read reports none.
type optionalCollector[T any] struct {
	read  func() (T, bool) // nil: nothing to export
	table []metric[T]
}

func (c *optionalCollector[T]) Describe(ch chan<- *prometheus.Desc) { describe(ch, c.table) }

func (c *optionalCollector[T]) Collect(ch chan<- prometheus.Metric) {
	if c.read == nil {
		return
	}
	if v, ok := c.read(); ok {
		collect(ch, c.table, v)
	}
}
