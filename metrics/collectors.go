package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// desc is shorthand for a series description.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// metric is one series read from a stats value of type T: its
// description, its kind, the values of its own labels (the collector may
// append more, like the tier's name) and how to read its value. Each stats
// type has a table of them: exporting a new figure is one row.
type metric[T any] struct {
	desc   *prometheus.Desc
	kind   prometheus.ValueType
	labels []string
	value  func(T) float64
}

// gauge and counter return a row of a table.
func gauge[T any](d *prometheus.Desc, value func(T) float64, labels ...string) metric[T] {
	return metric[T]{desc: d, kind: prometheus.GaugeValue, labels: labels, value: value}
}

func counter[T any](d *prometheus.Desc, value func(T) float64, labels ...string) metric[T] {
	return metric[T]{desc: d, kind: prometheus.CounterValue, labels: labels, value: value}
}

// describe sends the descriptions of table, each once.
func describe[T any](ch chan<- *prometheus.Desc, table []metric[T]) {
	seen := make(map[*prometheus.Desc]bool, len(table))
	for _, m := range table {
		if !seen[m.desc] {
			seen[m.desc] = true
			ch <- m.desc
		}
	}
}

// collect sends every series of table read from v, with the label values
// extra appended to each row's own.
func collect[T any](ch chan<- prometheus.Metric, table []metric[T], v T, extra ...string) {
	for _, m := range table {
		labels := append(m.labels[:len(m.labels):len(m.labels)], extra...)
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(v), labels...)
	}
}

// tableCollector exports one table from a value read at scrape time.
type tableCollector[T any] struct {
	read  func() T // nil: nothing to export
	table []metric[T]
}

func (c *tableCollector[T]) Describe(ch chan<- *prometheus.Desc) { describe(ch, c.table) }

func (c *tableCollector[T]) Collect(ch chan<- prometheus.Metric) {
	if c.read != nil {
		collect(ch, c.table, c.read())
	}
}

// tierTable is every tier's series, labelled by tier.
var tierTable = []metric[stats.Tier]{
	gauge(desc("cacheagent_tier_bytes", "Space used by cached objects, in filesystem blocks.", "tier"),
		func(t stats.Tier) float64 { return float64(t.UsedBytes) }),
	gauge(desc("cacheagent_tier_max_bytes", "Byte budget of the tier.", "tier"),
		func(t stats.Tier) float64 { return float64(t.MaxBytes) }),
	gauge(desc("cacheagent_tier_pinned_bytes", "Space held by pinned objects.", "tier"),
		func(t stats.Tier) float64 { return float64(t.PinnedBytes) }),
	gauge(desc("cacheagent_tier_reserved_bytes", "Space reserved by fills in progress.", "tier"),
		func(t stats.Tier) float64 { return float64(t.ReservedBytes) }),
	gauge(desc("cacheagent_tier_in_use_bytes", "Space held by unpinned objects that are open (leases, reads).", "tier"),
		func(t stats.Tier) float64 { return float64(t.InUseBytes) }),
	gauge(desc("cacheagent_tier_pending_bytes", "Space of copies that left the cache while open, freed at their last close.", "tier"),
		func(t stats.Tier) float64 { return float64(t.PendingBytes) }),
	gauge(desc("cacheagent_tier_objects", "Cached objects.", "tier"),
		func(t stats.Tier) float64 { return float64(t.Entries) }),
	counter(desc("cacheagent_tier_hits_total", "Opens served from the tier.", "tier"),
		func(t stats.Tier) float64 { return float64(t.Hits) }),
	counter(desc("cacheagent_tier_misses_total", "Opens that had to fetch the object.", "tier"),
		func(t stats.Tier) float64 { return float64(t.Misses) }),
	counter(desc("cacheagent_tier_evictions_total", "Objects evicted from the tier.", "tier"),
		func(t stats.Tier) float64 { return float64(t.Evictions) }),
	counter(desc("cacheagent_tier_fills_total", "Objects downloaded into the tier.", "tier"),
		func(t stats.Tier) float64 { return float64(t.Fills) }),
	counter(desc("cacheagent_tier_fetched_bytes_total", "Bytes downloaded into the tier.", "tier"),
		func(t stats.Tier) float64 { return float64(t.BytesFetched) }),
	counter(desc("cacheagent_tier_revalidations_total", "Generation checks sent to the source for cached objects.", "tier"),
		func(t stats.Tier) float64 { return float64(t.Revalidations) }),
	counter(desc("cacheagent_tier_damaged_total", "Copies dropped because their file changed behind the cache's back.", "tier"),
		func(t stats.Tier) float64 { return float64(t.Damaged) }),
	counter(desc("cacheagent_tier_verify_bytes_total", "Bytes of the tier's copies read by verification (cacheagent verify, the scrub).", "tier"),
		func(t stats.Tier) float64 { return float64(t.VerifiedBytes) }),
	counter(desc("cacheagent_tier_verified_total", "Copies whose CRC32C verification found intact.", "tier"),
		func(t stats.Tier) float64 { return float64(t.Verified) }),
	counter(desc("cacheagent_tier_unverifiable_total", "Copies verified by size only: indexed without a CRC32C.", "tier"),
		func(t stats.Tier) float64 { return float64(t.Unverifiable) }),
	counter(desc("cacheagent_tier_corrupt_total", "Copies dropped because their bytes did not match their CRC32C.", "tier"),
		func(t stats.Tier) float64 { return float64(t.Corrupt) }),
}

// upperTierTable is the series of a tier above another (shm above disk),
// which promotes copies from it.
var upperTierTable = []metric[stats.Tier]{
	counter(desc("cacheagent_tier_promotions_total", "Objects copied into the tier from a slower one.", "tier"),
		func(t stats.Tier) float64 { return float64(t.Promotions) }),
	counter(desc("cacheagent_tier_promotions_skipped_total", "Promotions into the tier that did not fit.", "tier"),
		func(t stats.Tier) float64 { return float64(t.PromotionsSkipped) }),
}

// tierCollector reads every tier's stats at scrape time.
type tierCollector struct {
	src func() stats.Cache
}

func (c *tierCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, tierTable)
	describe(ch, upperTierTable)
}

func (c *tierCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src == nil {
		return
	}
	tiers := c.src().Tiers
	for i, t := range tiers {
		collect(ch, tierTable, t, t.Name)
		if i < len(tiers)-1 { // not the base tier
			collect(ch, upperTierTable, t, t.Name)
		}
	}
}

// retryCauses are every fetch.RetryCause, for labels.
var retryCauses = []fetch.RetryCause{fetch.CauseThrottled, fetch.CauseServer, fetch.CauseNetwork,
	fetch.CauseShortRead, fetch.CauseStall, fetch.CauseChecksum}

// Fetch series with several rows.
var (
	fetchObjects = desc("cacheagent_fetch_objects_total", "Whole-object downloads by result.", "result")
	fetchRetries = desc("cacheagent_fetch_retries_total", "Retries by cause.", "cause")
)

// fetchTable is the downloader's series.
var fetchTable = append([]metric[stats.Fetch]{
	counter(desc("cacheagent_fetch_bytes_total", "Object bytes written by downloads (retried attempts included)."),
		func(s stats.Fetch) float64 { return float64(s.Bytes) }),
	counter(fetchObjects, func(s stats.Fetch) float64 { return float64(s.Objects) }, "ok"),
	counter(fetchObjects, func(s stats.Fetch) float64 { return float64(s.Failures) }, "error"),
	counter(desc("cacheagent_fetch_ranges_total", "Range reads opened (attempts)."),
		func(s stats.Fetch) float64 { return float64(s.Ranges) }),
	counter(desc("cacheagent_fetch_crc_failures_total", "Downloaded objects whose CRC32C did not match."),
		func(s stats.Fetch) float64 { return float64(s.CRCFailures) }),
	counter(desc("cacheagent_fetch_stalls_total", "Range reads aborted for receiving no bytes."),
		func(s stats.Fetch) float64 { return float64(s.Stalls) }),
	counter(desc("cacheagent_fetch_splits_total", "Ranges split to give an otherwise idle connection their second half."),
		func(s stats.Fetch) float64 { return float64(s.Splits) }),
	gauge(desc("cacheagent_fetch_connections", "Connection slots in use."),
		func(s stats.Fetch) float64 { return float64(s.ConnsInUse) }),
	gauge(desc("cacheagent_fetch_connections_limit", "Connection budget."),
		func(s stats.Fetch) float64 { return float64(s.Connections) }),
	gauge(desc("cacheagent_fetch_waiting_slices", "Slices waiting for a connection slot (all priorities)."),
		func(s stats.Fetch) float64 { return float64(s.WaitingSlices - s.SmallWaiting) }),
	gauge(desc("cacheagent_fetch_small_connections", "Small-object lane slots in use."),
		func(s stats.Fetch) float64 { return float64(s.SmallConnsInUse) }),
	gauge(desc("cacheagent_fetch_small_waiting", "Small objects waiting for a small-object lane slot."),
		func(s stats.Fetch) float64 { return float64(s.SmallWaiting) }),
}, retryRows()...)

// retryRows returns a row of cacheagent_fetch_retries_total per cause.
func retryRows() []metric[stats.Fetch] {
	var rows []metric[stats.Fetch]
	for _, rc := range retryCauses {
		name := rc.String()
		rows = append(rows, counter(fetchRetries, func(s stats.Fetch) float64 { return float64(s.Retries[name]) }, name))
	}
	return rows
}

// Queue and daemon series.
var (
	queueInflight = desc("cacheagent_fetch_inflight", "Object downloads in progress (waiting for or holding connections), by current priority.", "priority")
	queuePending  = desc("cacheagent_prefetch_pending_objects", "Objects prefetch jobs have yet to finish, by priority.", "priority")
	sessionsDesc  = desc("cacheagent_lease_sessions", "Open lease sessions (client processes).")
	leasesDesc    = desc("cacheagent_leases", "Leases held by clients.")
	jobsDesc      = desc("cacheagent_jobs", "Jobs known to the daemon, by state.", "state")
)

// priorities are every object.Priority, for labels.
var priorities = []object.Priority{object.Warm, object.Plan, object.Demand}

// queueCollector reports queue depths, leases and jobs at scrape time.
type queueCollector struct {
	src      Sources
	inflight *inflight
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{queueInflight, queuePending, sessionsDesc, leasesDesc, jobsDesc} {
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	byPrio := c.inflight.byPriority()
	for _, p := range priorities {
		gauge(queueInflight, byPrio[p], p.String())
	}
	if c.src.Pending != nil {
		pending := c.src.Pending()
		for _, p := range priorities {
			gauge(queuePending, pending[p], p.String())
		}
	}
	if c.src.Leases != nil {
		s, l := c.src.Leases()
		gauge(sessionsDesc, s)
		gauge(leasesDesc, l)
	}
	if c.src.Jobs != nil {
		for state, n := range c.src.Jobs() {
			gauge(jobsDesc, n, state)
		}
	}
}

// planTable is the series of the announced plans and the planner.
var planTable = []metric[stats.Plan]{
	gauge(desc("cacheagent_plans", "Announced access plans."),
		func(s stats.Plan) float64 { return float64(s.Plans) }),
	gauge(desc("cacheagent_plan_objects", "Distinct objects in the announced plans."),
		func(s stats.Plan) float64 { return float64(s.Objects) }),
	counter(desc("cacheagent_plan_prefetched_objects_total", "Objects the planner fetched ahead of readers."),
		func(s stats.Plan) float64 { return float64(s.Prefetched) }),
	counter(desc("cacheagent_plan_prefetched_bytes_total", "Bytes the planner fetched ahead of readers."),
		func(s stats.Plan) float64 { return float64(s.PrefetchedBytes) }),
	counter(desc("cacheagent_plan_listings_total", "Directories the planner listed to learn its objects' attributes."),
		func(s stats.Plan) float64 { return float64(s.Listings) }),
	counter(desc("cacheagent_plan_listed_objects_total", "Objects the planner fetched by their listed attributes, without a metadata request."),
		func(s stats.Plan) float64 { return float64(s.Listed) }),
	gauge(desc("cacheagent_plan_fetch_rate_bytes", "Measured rate of the planner's fetches, bytes per second."),
		func(s stats.Plan) float64 { return s.FetchRate }),
	gauge(desc("cacheagent_plan_consume_rate_bytes", "Measured rate at which readers advance through plans, bytes per second."),
		func(s stats.Plan) float64 { return s.ConsumeRate }),
	gauge(desc("cacheagent_plan_lookahead_bytes", "Bytes ahead of the readers the planner last aimed to hold."),
		func(s stats.Plan) float64 { return float64(s.Lookahead) }),
}

// loaderStall is the loaders' stall time, by cause.
var loaderStall = desc("cacheagent_loader_stall_seconds_total", "Time loaders' consumers waited for a batch, by what it waited for (fetch, promote, gather, other).", "cause")

// loaderTable is the series of the totals over every loader that reports
// to the daemon, with no per-loader labels.
var loaderTable = []metric[stats.Loader]{
	counter(loaderStall, func(s stats.Loader) float64 { return s.WaitFetch.Seconds() }, "fetch"),
	counter(loaderStall, func(s stats.Loader) float64 { return s.WaitPromote.Seconds() }, "promote"),
	counter(loaderStall, func(s stats.Loader) float64 { return s.WaitGather.Seconds() }, "gather"),
	counter(loaderStall, func(s stats.Loader) float64 { return s.WaitOther.Seconds() }, "other"),
	counter(desc("cacheagent_loader_samples_total", "Samples loaders delivered."),
		func(s stats.Loader) float64 { return float64(s.Samples) }),
	counter(desc("cacheagent_loader_batches_total", "Batches loaders delivered."),
		func(s stats.Loader) float64 { return float64(s.Batches) }),
	counter(desc("cacheagent_loader_bytes_total", "Bytes of the batches loaders delivered."),
		func(s stats.Loader) float64 { return float64(s.Bytes) }),
}

// loaderPlans counts the plans whose loaders report.
var loaderPlans = desc("cacheagent_loader_plans", "Announced plans whose loaders report their stats.")

// loaderCollector reads the loaders' reported totals at scrape time.
type loaderCollector struct {
	src func() (reporting int, totals stats.Loader)
}

func (c *loaderCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, loaderTable)
	ch <- loaderPlans
}

func (c *loaderCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src == nil {
		return
	}
	n, totals := c.src()
	collect(ch, loaderTable, totals)
	ch <- prometheus.MustNewConstMetric(loaderPlans, prometheus.GaugeValue, float64(n))
}
