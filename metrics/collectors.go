package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheagent/cacheagent/fetch"
)

// desc is shorthand for a series description.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// Tier series, labelled by tier.
var (
	tierBytes      = desc("cacheagent_tier_bytes", "Space used by cached objects, in filesystem blocks.", "tier")
	tierMax        = desc("cacheagent_tier_max_bytes", "Byte budget of the tier.", "tier")
	tierPinned     = desc("cacheagent_tier_pinned_bytes", "Space held by pinned objects.", "tier")
	tierReserved   = desc("cacheagent_tier_reserved_bytes", "Space reserved by fills in progress.", "tier")
	tierInUse      = desc("cacheagent_tier_in_use_bytes", "Space held by unpinned objects that are open (leases, reads).", "tier")
	tierPending    = desc("cacheagent_tier_pending_bytes", "Space of copies that left the cache while open, freed at their last close.", "tier")
	tierObjects    = desc("cacheagent_tier_objects", "Cached objects.", "tier")
	tierHits       = desc("cacheagent_tier_hits_total", "Opens served from the tier.", "tier")
	tierMisses     = desc("cacheagent_tier_misses_total", "Opens that had to fetch the object.", "tier")
	tierEvictions  = desc("cacheagent_tier_evictions_total", "Objects evicted from the tier.", "tier")
	tierPromotions = desc("cacheagent_tier_promotions_total", "Objects copied into the tier from a slower one.", "tier")
	tierPromoSkips = desc("cacheagent_tier_promotions_skipped_total", "Promotions into the tier that did not fit.", "tier")
	tierDamaged    = desc("cacheagent_tier_damaged_total", "Copies dropped because their file changed behind the cache's back.", "tier")
	tierFills      = desc("cacheagent_tier_fills_total", "Objects downloaded into the tier.", "tier")
	tierFetched    = desc("cacheagent_tier_fetched_bytes_total", "Bytes downloaded into the tier.", "tier")
	tierRevalid    = desc("cacheagent_tier_revalidations_total", "Generation checks sent to the source for cached objects.", "tier")
)

// tierCollector reads every tier's stats at scrape time.
type tierCollector struct {
	src func() []TierStats
}

func (c *tierCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{tierBytes, tierMax, tierPinned, tierReserved, tierInUse, tierPending,
		tierObjects, tierHits, tierMisses, tierEvictions, tierPromotions, tierPromoSkips, tierDamaged, tierFills,
		tierFetched, tierRevalid} {
		ch <- d
	}
}

func (c *tierCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src == nil {
		return
	}
	for _, t := range c.src() {
		gauge := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), t.Tier)
		}
		counter := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), t.Tier)
		}
		gauge(tierBytes, t.UsedBytes)
		gauge(tierMax, t.MaxBytes)
		gauge(tierPinned, t.PinnedBytes)
		gauge(tierReserved, t.ReservedBytes)
		gauge(tierInUse, t.InUseBytes)
		gauge(tierPending, t.PendingBytes)
		gauge(tierObjects, t.Objects)
		counter(tierHits, t.Hits)
		counter(tierMisses, t.Misses)
		counter(tierEvictions, t.Evictions)
		counter(tierFills, t.Fills)
		counter(tierFetched, t.BytesFetched)
		counter(tierRevalid, t.Revalidations)
		counter(tierDamaged, t.Damaged)
		if t.HasPromotions {
			counter(tierPromotions, t.Promotions)
			counter(tierPromoSkips, t.PromotionsSkipped)
		}
	}
}

// Fetch series.
var (
	fetchBytes   = desc("cacheagent_fetch_bytes_total", "Object bytes written by downloads (retried attempts included).")
	fetchObjects = desc("cacheagent_fetch_objects_total", "Whole-object downloads by result.", "result")
	fetchRanges  = desc("cacheagent_fetch_ranges_total", "Range reads opened (attempts).")
	fetchRetries = desc("cacheagent_fetch_retries_total", "Retries by cause.", "cause")
	fetchCRC     = desc("cacheagent_fetch_crc_failures_total", "Downloaded objects whose CRC32C did not match.")
	fetchStalls  = desc("cacheagent_fetch_stalls_total", "Range reads aborted for receiving no bytes.")
	fetchSplits  = desc("cacheagent_fetch_splits_total", "Ranges split to give an otherwise idle connection their second half.")
	fetchConns   = desc("cacheagent_fetch_connections", "Connection slots in use.")
	fetchLimit   = desc("cacheagent_fetch_connections_limit", "Connection budget.")
	fetchWaiting = desc("cacheagent_fetch_waiting_slices", "Slices waiting for a connection slot (all priorities).")
	fetchSmall   = desc("cacheagent_fetch_small_connections", "Small-object lane slots in use.")
	fetchSmallW  = desc("cacheagent_fetch_small_waiting", "Small objects waiting for a small-object lane slot.")
)

// retryCauses are every fetch.RetryCause, for labels.
var retryCauses = []fetch.RetryCause{fetch.CauseThrottled, fetch.CauseServer, fetch.CauseNetwork,
	fetch.CauseShortRead, fetch.CauseStall, fetch.CauseChecksum}

// fetchCollector reads the downloader's counters at scrape time.
type fetchCollector struct {
	src Sources
}

func (c *fetchCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{fetchBytes, fetchObjects, fetchRanges, fetchRetries, fetchCRC,
		fetchStalls, fetchSplits, fetchConns, fetchLimit, fetchWaiting, fetchSmall, fetchSmallW} {
		ch <- d
	}
}

func (c *fetchCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src.Connections != nil {
		ch <- prometheus.MustNewConstMetric(fetchLimit, prometheus.GaugeValue, float64(c.src.Connections()))
	}
	if c.src.Fetch == nil {
		return
	}
	s := c.src.Fetch()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(fetchBytes, s.Bytes)
	counter(fetchObjects, s.Objects, "ok")
	counter(fetchObjects, s.Failures, "error")
	counter(fetchRanges, s.Ranges)
	for _, rc := range retryCauses {
		counter(fetchRetries, s.Retries[rc], rc.String())
	}
	counter(fetchCRC, s.CRCFailures)
	counter(fetchStalls, s.Stalls)
	counter(fetchSplits, s.Splits)
	ch <- prometheus.MustNewConstMetric(fetchConns, prometheus.GaugeValue, float64(s.Conns))
	ch <- prometheus.MustNewConstMetric(fetchWaiting, prometheus.GaugeValue, float64(s.Waiting))
	ch <- prometheus.MustNewConstMetric(fetchSmall, prometheus.GaugeValue, float64(s.SmallConns))
	ch <- prometheus.MustNewConstMetric(fetchSmallW, prometheus.GaugeValue, float64(s.SmallWaiting))
}

// Queue and daemon series.
var (
	queueInflight = desc("cacheagent_fetch_inflight", "Object downloads in progress (waiting for or holding connections), by current priority.", "priority")
	queuePending  = desc("cacheagent_prefetch_pending_objects", "Objects prefetch jobs have yet to finish, by priority.", "priority")
	sessionsDesc  = desc("cacheagent_lease_sessions", "Open lease sessions (client processes).")
	leasesDesc    = desc("cacheagent_leases", "Leases held by clients.")
	jobsDesc      = desc("cacheagent_jobs", "Jobs known to the daemon, by state.", "state")
)

// priorities are every fetch.Priority, for labels.
var priorities = []fetch.Priority{fetch.Warm, fetch.Plan, fetch.Demand}

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

// Plan series.
var (
	planPlans       = desc("cacheagent_plans", "Announced access plans.")
	planObjects     = desc("cacheagent_plan_objects", "Distinct objects in the announced plans.")
	planPrefetched  = desc("cacheagent_plan_prefetched_objects_total", "Objects the planner fetched ahead of readers.")
	planPrefBytes   = desc("cacheagent_plan_prefetched_bytes_total", "Bytes the planner fetched ahead of readers.")
	planFetchRate   = desc("cacheagent_plan_fetch_rate_bytes", "Measured rate of the planner's fetches, bytes per second.")
	planConsumeRate = desc("cacheagent_plan_consume_rate_bytes", "Measured rate at which readers advance through plans, bytes per second.")
	planLookahead   = desc("cacheagent_plan_lookahead_bytes", "Bytes ahead of the readers the planner last aimed to hold.")
)

// planCollector reads the plans' figures at scrape time.
type planCollector struct {
	src func() PlanStats
}

func (c *planCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{planPlans, planObjects, planPrefetched, planPrefBytes, planFetchRate,
		planConsumeRate, planLookahead} {
		ch <- d
	}
}

func (c *planCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src == nil {
		return
	}
	s := c.src()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	gauge(planPlans, float64(s.Plans))
	gauge(planObjects, float64(s.Objects))
	ch <- prometheus.MustNewConstMetric(planPrefetched, prometheus.CounterValue, float64(s.Prefetched))
	ch <- prometheus.MustNewConstMetric(planPrefBytes, prometheus.CounterValue, float64(s.PrefetchedBytes))
	gauge(planFetchRate, s.FetchRate)
	gauge(planConsumeRate, s.ConsumeRate)
	gauge(planLookahead, float64(s.Lookahead))
}

// Loader series: totals over every loader that reports to the daemon, with
// no per-loader labels.
var (
	loaderStall   = desc("cacheagent_loader_stall_seconds_total", "Time loaders' consumers waited for a batch, by what it waited for (fetch, promote, gather, other).", "cause")
	loaderSamples = desc("cacheagent_loader_samples_total", "Samples loaders delivered.")
	loaderBatches = desc("cacheagent_loader_batches_total", "Batches loaders delivered.")
	loaderBytes   = desc("cacheagent_loader_bytes_total", "Bytes of the batches loaders delivered.")
	loaderPlans   = desc("cacheagent_loader_plans", "Announced plans whose loaders report their stats.")
)

// loaderCollector reads the loaders' reported totals at scrape time.
type loaderCollector struct {
	src func() LoaderStats
}

func (c *loaderCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{loaderStall, loaderSamples, loaderBatches, loaderBytes, loaderPlans} {
		ch <- d
	}
}

func (c *loaderCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src == nil {
		return
	}
	s := c.src()
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	counter(loaderStall, s.FetchSeconds, "fetch")
	counter(loaderStall, s.PromoteSeconds, "promote")
	counter(loaderStall, s.GatherSeconds, "gather")
	counter(loaderStall, s.OtherSeconds, "other")
	counter(loaderSamples, float64(s.Samples))
	counter(loaderBatches, float64(s.Batches))
	counter(loaderBytes, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(loaderPlans, prometheus.GaugeValue, float64(s.Plans))
}
