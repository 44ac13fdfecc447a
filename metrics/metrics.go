// Package metrics exposes the daemon's state to Prometheus: collectors that
// read the cache's and the downloader's counters at scrape time (nothing is
// counted twice), a fetch latency histogram from a Downloader wrapper, and
// an HTTP handler for /metrics, /healthz and /readyz.
//
// Every series is named cacheagent_*; see docs/operations.md for the list.
// Metrics is safe for concurrent use.
package metrics

import (
	"net/http"
	"runtime"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cacheagent/cacheagent/fetch"
)

// TierStats is one tier's usage and counters at scrape time.
type TierStats struct {
	// Tier is the tier's name: disk or shm.
	Tier string
	// Objects is the number of cached objects.
	Objects int64
	// UsedBytes, MaxBytes, PinnedBytes, ReservedBytes, InUseBytes and
	// PendingBytes are the tier's space, in filesystem blocks.
	UsedBytes, MaxBytes, PinnedBytes, ReservedBytes, InUseBytes, PendingBytes int64
	// Hits (opens the tier served), Misses (opens it could not serve),
	// Evictions, Fills, BytesFetched, Revalidations and Damaged (copies
	// dropped because their file changed behind the cache's back) are
	// cumulative counters.
	Hits, Misses, Evictions, Fills, BytesFetched, Revalidations, Damaged int64
	// Promotions counts copies into this tier from a slower one and
	// PromotionsSkipped those that did not fit; valid only if
	// HasPromotions.
	Promotions, PromotionsSkipped int64
	HasPromotions                 bool
}

// Sources are read at every scrape. Nil fields export nothing.
type Sources struct {
	// Tiers returns every tier's stats.
	Tiers func() []TierStats
	// Fetch returns the downloader's counters.
	Fetch func() fetch.Stats
	// Connections returns the downloader's connection budget.
	Connections func() int
	// Pending returns the objects that prefetch jobs have yet to finish, by
	// priority.
	Pending func() map[fetch.Priority]int
	// Leases returns the lease sessions and the leases they hold.
	Leases func() (sessions, leases int)
	// Jobs returns the number of jobs by state.
	Jobs func() map[string]int
	// Plans returns the announced plans' figures.
	Plans func() PlanStats
	// Loaders returns the totals that loaders reported through their
	// plans.
	Loaders func() LoaderStats
}

// LoaderStats sums what the loaders reporting to the daemon delivered and
// how long they stalled, since the daemon started.
type LoaderStats struct {
	// Plans counts the announced plans whose loaders report.
	Plans int
	// Batches, Samples and Bytes count what the loaders delivered.
	Batches, Samples, Bytes int64
	// FetchSeconds, PromoteSeconds, GatherSeconds and OtherSeconds are the
	// time the loaders' consumers waited for a batch, by what it waited
	// for (see loader.Stats).
	FetchSeconds, PromoteSeconds, GatherSeconds, OtherSeconds float64
}

// PlanStats describes the announced access plans and the cache's planner
// at scrape time (see tier.PlanStats).
type PlanStats struct {
	// Plans and Objects count the plans and the distinct objects in them.
	Plans, Objects int
	// Prefetched and PrefetchedBytes count what the planner fetched ahead
	// of readers.
	Prefetched, PrefetchedBytes int64
	// FetchRate and ConsumeRate are bytes per second; Lookahead bytes.
	FetchRate, ConsumeRate float64
	Lookahead              int64
}

// Metrics is the daemon's registry. Create it with New.
type Metrics struct {
	reg      *prometheus.Registry
	fetches  *prometheus.HistogramVec
	inflight *inflight
	requests *prometheus.CounterVec
	reloads  *prometheus.CounterVec
}

// New returns a registry holding the Go runtime and process collectors, the
// build info, the fetch latency histogram and the daemon's own series, and
// collectors that read src at scrape time.
func New(version string, src Sources) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		fetches: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cacheagent_fetch_duration_seconds",
			Help:    "Time to download one whole object into the cache, by priority at start and result.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 25, 60, 120, 300, 600},
		}, []string{"priority", "result"}),
		inflight: newInflight(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cacheagent_control_requests_total",
			Help: "Control API requests by route and HTTP status.",
		}, []string{"route", "code"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cacheagent_config_reloads_total",
			Help: "Config reloads by result (ok or error).",
		}, []string{"result"}),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cacheagent_build_info",
		Help: "Build information; the value is 1.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(version, runtime.Version()).Set(1)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		build, m.fetches, m.requests, m.reloads,
		&tierCollector{src: src.Tiers},
		&fetchCollector{src: src},
		&queueCollector{src: src, inflight: m.inflight},
		&planCollector{src: src.Plans},
		&loaderCollector{src: src.Loaders},
	)
	return m
}

// Registry returns the registry, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveRequest counts one control API request.
func (m *Metrics) ObserveRequest(route string, code int) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
}

// ObserveReload counts one config reload.
func (m *Metrics) ObserveReload(err error) {
	if err != nil {
		m.reloads.WithLabelValues("error").Inc()
		return
	}
	m.reloads.WithLabelValues("ok").Inc()
}

// Handler serves /metrics, /healthz (200 while the process serves) and
// /readyz (200 while ready reports true, else 503).
func (m *Metrics) Handler(ready func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:          m.reg,
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	return mux
}
