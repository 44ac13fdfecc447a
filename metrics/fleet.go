package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheagent/cacheagent/stats"
)

// The fleet's series: members by state, and the peer data plane's traffic.
var (
	fleetMembers   = desc("cacheagent_fleet_members", "Fleet members this agent knows, itself included, by state (alive, suspect, dead).", "state")
	fleetPeerBytes = desc("cacheagent_fleet_peer_bytes_total", "Bytes this agent's reads received from each peer.", "peer")
	fleetGCSBytes  = desc("cacheagent_fleet_origin_bytes_total", "Bytes this agent's reads received from GCS in fleet mode.")
	fleetPeerErrs  = desc("cacheagent_fleet_peer_errors_total", "Failed peer reads by cause (refused, timeout, bad_response, auth, not_found, loop).", "cause")
	fleetFallbacks = desc("cacheagent_fleet_fallbacks_total", "Range reads sent to GCS after a peer failed or was skipped.")
	fleetFailovers = desc("cacheagent_fleet_failovers_total", "Range reads a peer failed (refused, timed out, stalled, answered wrongly) that got their bytes elsewhere.")
	fleetFailTime  = desc("cacheagent_fleet_failover_seconds_total", "Time range reads lost to peers that failed them.")
	fleetBatches   = desc("cacheagent_fleet_batches_total", "Batch requests sent to peers (many small objects from one owner in one request).")
	fleetBatched   = desc("cacheagent_fleet_batched_objects_total", "Objects asked for in batch requests.")
	fleetServed    = desc("cacheagent_fleet_served_bytes_total", "Bytes this agent sent to peers.")
	fleetServedReq = desc("cacheagent_fleet_served_requests_total", "Peer requests this agent answered, by outcome.", "outcome")
)

// fleetCollector reads the fleet's figures at scrape time; it exports
// nothing without fleet mode. The peer data plane's series join it.
type fleetCollector struct {
	src func() (stats.Fleet, bool)
}

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{fleetMembers, fleetPeerBytes, fleetGCSBytes, fleetPeerErrs, fleetFallbacks,
		fleetFailovers, fleetFailTime, fleetBatches, fleetBatched, fleetServed, fleetServedReq} {
		ch <- d
	}
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src == nil {
		return
	}
	s, ok := c.src()
	if !ok {
		return
	}
	for _, state := range stats.FleetStates {
		ch <- prometheus.MustNewConstMetric(fleetMembers, prometheus.GaugeValue, float64(s.Members[state]), state)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for p, n := range s.PeerBytes {
		counter(fleetPeerBytes, n, p)
	}
	for cause, n := range s.PeerErrors {
		counter(fleetPeerErrs, n, cause)
	}
	for outcome, n := range s.ServedRequests {
		counter(fleetServedReq, n, outcome)
	}
	counter(fleetGCSBytes, s.OriginBytes)
	counter(fleetFallbacks, s.Fallbacks)
	counter(fleetServed, s.ServedBytes)
	counter(fleetFailovers, s.Failovers)
	counter(fleetBatches, s.Batches)
	counter(fleetBatched, s.BatchedObjects)
	ch <- prometheus.MustNewConstMetric(fleetFailTime, prometheus.CounterValue, s.FailoverSeconds)
}
