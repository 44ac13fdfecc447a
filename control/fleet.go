package control

import (
	"context"
	"net/http"

	"github.com/cacheagent/cacheagent/stats"
)

// FleetStatus is the fleet as this daemon sees it: GET /v1/fleet, and what
// `cacheagent fleet status --json` prints.
type FleetStatus struct {
	// Self is this daemon's name in the fleet.
	Self string `json:"self"`
	// Members lists every member it knows, itself included, sorted by
	// name.
	Members []FleetMember `json:"members"`
	// Traffic is this daemon's peer data plane: bytes from each peer and
	// from GCS, peer errors, fallbacks, bytes served to peers.
	Traffic stats.Fleet `json:"traffic"`
}

// FleetMember is one agent of the fleet.
type FleetMember struct {
	// Name is the member's fleet name.
	Name string `json:"name"`
	// Addr is its gossip address, IP:port.
	Addr string `json:"addr"`
	// PeerAddr is its peer data plane's address, host:port.
	PeerAddr string `json:"peer_addr"`
	// State is alive, suspect or dead.
	State string `json:"state"`
	// Weight is its placement weight: its disk budget in bytes.
	Weight float64 `json:"weight"`
	// OwnedShare is the fraction of chunks it owns in the current
	// placement table (0 for a dead member).
	OwnedShare float64 `json:"owned_share"`
	// Version is its agent's version.
	Version string `json:"version,omitempty"`
}

// Fleet returns the daemon's view of its fleet; an error matching
// ErrNoFleet if it runs without one.
func (c *Client) Fleet(ctx context.Context) (FleetStatus, error) {
	var s FleetStatus
	err := c.do(ctx, http.MethodGet, "/v1/fleet", nil, nil, &s)
	return s, err
}
