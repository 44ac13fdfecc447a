package stats

// Fleet is this agent's view of its fleet (fleet mode only): gauges at the
// time of the snapshot, and the peer data plane's traffic, as a requester
// (PeerReads) and as a server (PeerServes).
type Fleet struct {
	// Self is this agent's name in the fleet.
	Self string `json:"self"`
	// Members counts the members this agent knows, itself included, by
	// state: "alive", "suspect" and "dead" are always present.
	Members map[string]int `json:"members"`
	PeerReads
	PeerServes
}

// FleetStates are the member states Fleet.Members counts.
var FleetStates = []string{"alive", "suspect", "dead"}

// PeerReads are the figures of an agent's reads through the peer data
// plane (fleet/peer.Source) since it started.
type PeerReads struct {
	// PeerBytes counts the bytes this agent's reads received from each
	// peer, by member name; OriginBytes those it read from GCS.
	PeerBytes   map[string]int64 `json:"peer_bytes"`
	OriginBytes int64            `json:"origin_bytes"`
	// PeerErrors counts failed peer reads by cause (refused, timeout,
	// bad_response, auth, not_found, loop, ...); every cause is present.
	PeerErrors map[string]int64 `json:"peer_errors"`
	// Fallbacks counts the reads sent to GCS after a peer failed or was
	// skipped; FallbackWaits those of them that waited for the fallback
	// rate limit.
	Fallbacks     int64 `json:"fallbacks"`
	FallbackWaits int64 `json:"fallback_waits"`
	// Failovers counts the reads a peer failed (refused, timed out,
	// stalled mid-body or answered wrongly) that then got their bytes
	// elsewhere or were retried; FailoverSeconds is the time they lost to
	// the failing peers (from the first request to a peer that failed to
	// the request that answered, or from a body's last byte to its stall),
	// FailoverMaxSeconds the longest such wait: a survivor's stall when a
	// member dies.
	Failovers          int64   `json:"failovers"`
	FailoverSeconds    float64 `json:"failover_seconds"`
	FailoverMaxSeconds float64 `json:"failover_max_seconds"`
	// Batches counts the batch requests sent (many small objects from one
	// owner in one request), BatchedObjects the objects asked for in them.
	Batches        int64 `json:"batches"`
	BatchedObjects int64 `json:"batched_objects"`
}

// PeerServes are the figures of an agent's peer server (fleet/peer.Server)
// since it started.
type PeerServes struct {
	// ServedBytes counts the object bytes this agent sent to peers.
	ServedBytes int64 `json:"served_bytes"`
	// ServedRequests counts its answers to peers by outcome: ok,
	// bad_request, auth, forbidden, not_found, loop, range, busy, error,
	// gone (the requester left before the answer).
	ServedRequests map[string]int64 `json:"served_requests"`
}
