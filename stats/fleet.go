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
	// PeerBytes counts the bytes this agent's reads received from each
	// peer, by member name; OriginBytes those it read from GCS.
	PeerBytes   map[string]int64 `json:"peer_bytes"`
	OriginBytes int64            `json:"origin_bytes"`
	// PeerErrors counts failed peer reads by cause (refused, timeout,
	// bad_response, auth, not_found, loop); Fallbacks the reads sent to
	// GCS after a peer failed or was skipped, FallbackWaits those of them
	// that waited for the fallback rate limit.
	PeerErrors    map[string]int64 `json:"peer_errors"`
	Fallbacks     int64            `json:"fallbacks"`
	FallbackWaits int64            `json:"fallback_waits"`
	// Failovers counts reads a peer failed that then got their bytes
	// elsewhere; FailoverSeconds is the time they lost to the failing
	// peers, FailoverMaxSeconds the longest such wait (a survivor's stall
	// when a member dies).
	Failovers          int64   `json:"failovers"`
	FailoverSeconds    float64 `json:"failover_seconds"`
	FailoverMaxSeconds float64 `json:"failover_max_seconds"`
	// ServedBytes counts the bytes this agent sent to peers;
	// ServedRequests its answers to them by outcome.
	ServedBytes    int64            `json:"served_bytes"`
	ServedRequests map[string]int64 `json:"served_requests"`
}

// FleetStates are the member states Fleet.Members counts.
var FleetStates = []string{"alive", "suspect", "dead"}
