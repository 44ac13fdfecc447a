package stats

// Fleet is this agent's view of its fleet (fleet mode only): gauges at the
// time of the snapshot. The peer data plane's figures (bytes and errors
// by peer) belong here too.
type Fleet struct {
	// Self is this agent's name in the fleet.
	Self string `json:"self"`
	// Members counts the members this agent knows, itself included, by
	// state: "alive", "suspect" and "dead" are always present.
	Members map[string]int `json:"members"`
}

// FleetStates are the member states Fleet.Members counts.
var FleetStates = []string{"alive", "suspect", "dead"}
