// Package metrics exposes the daemon's state to Prometheus: collectors that
// read the cache's and the downloader's counters (package stats) at scrape
// time (nothing is counted twice), a fetch latency histogram from a
// Downloader wrapper, and an HTTP handler for /metrics, /healthz and
// /readyz. Each stats type has one table of series (name, help, kind and
// how to read the value): exporting a new figure is one row.
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

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// Sources are read at every scrape. Nil fields export nothing.
type Sources struct {
	// Tiers returns the cache's tiers' stats.
	Tiers func() stats.Cache
	// Fetch returns the downloader's stats.
	Fetch func() stats.Fetch
	// Pending returns the objects that prefetch jobs have yet to finish, by
	// priority.
	Pending func() map[object.Priority]int
	// Leases returns the lease sessions and the leases they hold.
	Leases func() (sessions, leases int)
	// Jobs returns the number of jobs by state.
	Jobs func() map[string]int
	// Plans returns the announced plans' figures.
	Plans func() stats.Plan
	// Loaders returns the number of plans whose loaders report their
	// stats, and the totals they reported.
	Loaders func() (reporting int, totals stats.Loader)
	// Fleet returns the fleet's figures, and false without fleet mode.
	Fleet func() (stats.Fleet, bool)
	// Mount returns the FUSE mount's figures, and false without a mount.
	Mount func() (stats.Mount, bool)
	// Checkpoints returns the checkpoint store's figures.
	Checkpoints func() stats.Checkpoints
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
		&tableCollector[stats.Fetch]{read: src.Fetch, table: fetchTable},
		&queueCollector{src: src, inflight: m.inflight},
		&tableCollector[stats.Plan]{read: src.Plans, table: planTable},
		&loaderCollector{src: src.Loaders},
		&fleetCollector{src: src.Fleet},
		&optionalCollector[stats.Mount]{read: src.Mount, table: mountTable},
		&checkpointCollector{src: src.Checkpoints},
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
