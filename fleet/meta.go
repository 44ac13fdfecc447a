package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"

	"github.com/hashicorp/memberlist"
)

// meta is what a member tells the others about itself, in its memberlist
// node metadata (at most memberlist.MetaMaxSize bytes). It is JSON, so
// fields can be added without breaking older members.
type meta struct {
	// Format is the layout's version, 1.
	Format int `json:"v"`
	// Peer is the data plane's address, host:port; an empty or unspecified
	// host means the member's gossip IP.
	Peer string `json:"peer"`
	// Weight is the member's placement weight: its disk budget in bytes.
	Weight float64 `json:"w"`
	// Version is the agent's version, at most maxVersionLen bytes.
	Version string `json:"ver,omitempty"`
	// Leaving is set by a member about to leave (Close): the others take
	// it out of their tables at once, and drop it when it leaves instead
	// of listing it as failed.
	Leaving bool `json:"leaving,omitempty"`
}

// metaFormat is the meta layout this agent writes.
const metaFormat = 1

// maxVersionLen bounds the version carried in meta.
const maxVersionLen = 64

// errBadMeta reports another member's unreadable metadata.
var errBadMeta = errors.New("fleet: bad member metadata")

// encode returns m's metadata, at most memberlist.MetaMaxSize bytes.
func (m meta) encode() ([]byte, error) {
	if len(m.Version) > maxVersionLen {
		m.Version = m.Version[:maxVersionLen]
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("fleet: encode metadata: %w", err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("fleet: metadata of %d bytes exceeds memberlist's %d (peer address %q)",
			len(b), memberlist.MetaMaxSize, m.Peer)
	}
	return b, nil
}

// decodeMeta parses another member's metadata.
func decodeMeta(b []byte) (meta, error) {
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		return meta{}, fmt.Errorf("%w: %w", errBadMeta, err)
	}
	switch {
	case m.Format < metaFormat:
		return meta{}, fmt.Errorf("%w: format %d", errBadMeta, m.Format)
	case !(m.Weight > 0) || math.IsInf(m.Weight, 1):
		return meta{}, fmt.Errorf("%w: weight %v", errBadMeta, m.Weight)
	}
	return m, nil
}

// peerAddr returns the address to reach a member's data plane at: its
// advertised peer address, with an empty or unspecified host replaced by
// the member's gossip IP.
func peerAddr(advertised string, gossipIP net.IP) string {
	host, port, err := net.SplitHostPort(advertised)
	if err != nil {
		return advertised
	}
	if host != "" {
		if a, err := netip.ParseAddr(host); err != nil || !a.IsUnspecified() {
			return advertised
		}
	}
	return net.JoinHostPort(gossipIP.String(), port)
}
