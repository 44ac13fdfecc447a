package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheagent/cacheagent/stats"
)

// fleetMembers is the fleet's members by state.
var fleetMembers = desc("cacheagent_fleet_members", "Fleet members this agent knows, itself included, by state (alive, suspect, dead).", "state")

// fleetCollector reads the fleet's figures at scrape time; it exports
// nothing without fleet mode. The peer data plane's series join it.
type fleetCollector struct {
	src func() (stats.Fleet, bool)
}

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) { ch <- fleetMembers }

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
}
