package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheagent/cacheagent/stats"
)

// checkpointTable is the checkpoint store's series.
var checkpointTable = []metric[stats.Checkpoints]{
	counter(desc("cacheagent_checkpoint_saves_total", "Checkpoint saves taken."),
		func(s stats.Checkpoints) float64 { return float64(s.Saves) }),
	counter(desc("cacheagent_checkpoint_commits_total", "Checkpoints committed (their manifest written)."),
		func(s stats.Checkpoints) float64 { return float64(s.Commits) }),
	counter(desc("cacheagent_checkpoint_restores_total", "Checkpoint restores served."),
		func(s stats.Checkpoints) float64 { return float64(s.Restores) }),
	gauge(desc("cacheagent_checkpoint_pending", "Checkpoint saves not committed yet."),
		func(s stats.Checkpoints) float64 { return float64(s.Pending) }),
	gauge(desc("cacheagent_checkpoint_dirty_bytes", "Bytes of checkpoints not uploaded yet, held in the cache's budget (never evicted)."),
		func(s stats.Checkpoints) float64 { return float64(s.DirtyBytes) }),
	counter(desc("cacheagent_checkpoint_uploaded_bytes_total", "Checkpoint bytes written to the bucket."),
		func(s stats.Checkpoints) float64 { return float64(s.UploadedBytes) }),
	counter(desc("cacheagent_checkpoint_replicated_bytes_total", "Checkpoint bytes sent to other members' replicas."),
		func(s stats.Checkpoints) float64 { return float64(s.ReplicatedBytes) }),
	counter(desc("cacheagent_checkpoint_retries_total", "Checkpoint upload requests retried after a transient error."),
		func(s stats.Checkpoints) float64 { return float64(s.Retries) }),
}

// checkpointFailures is the failed saves' series, by cause.
var checkpointFailures = desc("cacheagent_checkpoint_failures_total",
	"Checkpoint saves that failed for good, by cause (changed: a file changed after it was saved; conflict: another save owns the prefix; other).", "cause")

// checkpointCollector exports the checkpoint store's figures, read at
// scrape time.
type checkpointCollector struct {
	src func() stats.Checkpoints
}

func (c *checkpointCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, checkpointTable)
	ch <- checkpointFailures
}

func (c *checkpointCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src == nil {
		return
	}
	s := c.src()
	collect(ch, checkpointTable, s)
	for _, cause := range []string{"changed", "conflict", "other"} {
		ch <- prometheus.MustNewConstMetric(checkpointFailures, prometheus.CounterValue, float64(s.FailuresByCause[cause]), cause)
	}
}
