package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/fleet"
	"github.com/cacheagent/cacheagent/fleet/peer"
	"github.com/cacheagent/cacheagent/fleet/placement"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
	"github.com/cacheagent/cacheagent/tier"
)

// corruptServedForTest, set only in builds with the cacheagent_testhooks
// tag (testhooks.go), is the peer server's CorruptForTest.
var corruptServedForTest func(o object.Object, off int64, p []byte)

// fleetOwnersK is how many members a peer read ranks: the owner and two to
// fall back to (one of them may be this node, which reads GCS itself).
const fleetOwnersK = 3

// insecurePeerKey signs peer requests in a fleet configured insecure: true.
// It is public, so such a fleet's data plane authenticates nothing, as its
// configuration says.
var insecurePeerKey = []byte("cacheagent insecure fleet: no authentication")

// peerPlane is a fleet node's data plane: the peer Source the tier reads
// through, the two download budgets under it, and the server that answers
// peers' range reads from this node's tier.
type peerPlane struct {
	src   *peer.Source
	local *fetch.Downloader // fills read from peers
	owner *fetch.Downloader // fills read from GCS: owned objects and peers' misses
	dl    *peer.Downloader
	key   []byte
	keys  *fleet.Keys // the key file's keys, loaded once; nil when insecure
	// owners ranks members by the fleet's current table; empty until the
	// fleet starts (the cache opens first), so reads go to GCS meanwhile.
	owners fleetOwners
	srv    *peer.Server
	http   *http.Server
	ln     net.Listener
	tls    *peer.TLS // nil: plain HTTP (peer_tls: false, or no key file)
	// stopListing cancels the listings of sources started with the
	// fleet (set by startFleet).
	stopListing context.CancelFunc
}

// newPeerPlane builds the client side of the data plane over gcs for the
// fleet section fc: the Source, and the Downloaders fetch config fcfg
// describes, one budget for peer reads and one for GCS reads.
// peerTimeouts holds the peer source's timeouts (peer.Config's defaults
// when zero); tests that count GCS bytes lengthen them, so that a machine
// too loaded to answer within a second does not send reads to GCS.
var peerTimeouts peer.Config

func newPeerPlane(gcs object.Source, fc *fleet.Config, fcfg fetch.Config) (*peerPlane, error) {
	p := &peerPlane{key: insecurePeerKey}
	if fc.KeyFile != "" {
		keys, err := fleet.LoadKeys(fc.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("daemon: fleet: %w", err)
		}
		p.keys, p.key = keys, keys.Peer()
	}
	pc := peer.Config{Key: p.key, Owners: &p.owners, ConnectTimeout: peerTimeouts.ConnectTimeout,
		FirstByteFloor: peerTimeouts.FirstByteFloor, FirstByteMax: peerTimeouts.FirstByteMax,
		StallTimeout: peerTimeouts.StallTimeout}
	if fc.PeerBatch != nil && !*fc.PeerBatch {
		pc.BatchBelow = -1
	}
	if fc.TLS() {
		t, err := peer.NewTLS(p.key, fc.Name)
		if err != nil {
			return nil, fmt.Errorf("daemon: fleet: %w", err)
		}
		p.tls, pc.TLS = t, t.Client
	}
	src, err := peer.New(gcs, pc)
	if err != nil {
		return nil, fmt.Errorf("daemon: fleet: %w", err)
	}
	p.src = src
	// A slice never spans chunks, so a chunked object's slices go to their
	// chunks' owners side by side; and they are not split in flight: the
	// chunks of a large object are read in parallel already, and a split
	// would pay again for the bytes in flight past its point (GCS egress,
	// or an owner's uplink).
	if fcfg.SliceSize == 0 || fcfg.SliceSize > placement.DefaultChunkSize {
		fcfg.SliceSize = placement.DefaultChunkSize
	}
	fcfg.NoSplit = true
	if p.local, err = fetch.NewDownloader(src, fcfg); err == nil {
		if p.owner, err = fetch.NewDownloader(src, fcfg); err == nil {
			p.dl, err = peer.NewDownloader(src, p.local, p.owner)
		}
	}
	if err != nil {
		src.Close()
		return nil, err
	}
	return p, nil
}

// listen opens the peer port, so the fleet can advertise its address.
func (p *peerPlane) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("daemon: fleet: peer_listen: %w", err)
	}
	if p.tls != nil {
		ln = tls.NewListener(ln, p.tls.Server)
	}
	p.ln = ln
	return nil
}

// server builds the server that answers peers from cache, for the objects
// of buckets only (the daemon serves it on the peer port).
func (p *peerPlane) server(cache *tier.Cache, buckets []string, log *slog.Logger) error {
	srv, err := peer.NewServer(peer.ServerConfig{Key: p.key, Cache: cache, Buckets: buckets, Forwarding: p.src,
		Log: log, CorruptForTest: corruptServedForTest})
	if err != nil {
		return fmt.Errorf("daemon: fleet: %w", err)
	}
	p.src.SetCache(cache) // the chunks this node owns are kept there
	p.srv = srv
	p.http = peerHTTPServer(srv)
	return nil
}

// peerIdleTimeout is how long the peer port keeps a connection that
// carries no request: longer than a peer.Source keeps its idle ones (90
// s), so the requester closes first. Tests shorten it.
var peerIdleTimeout = 2 * time.Minute

// peerHTTPServer returns the peer port's server for h. A connection
// waits at most 10 s for a request's header and peerIdleTimeout between
// requests; the peer server bounds each write of an answer itself
// (peer.ServerConfig.WriteStall), so there is no WriteTimeout to cut a
// long transfer.
func peerHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: peerIdleTimeout}
}

// stats adds the data plane's traffic to s.
func (p *peerPlane) stats(s *stats.Fleet) {
	s.PeerReads = p.src.Stats()
	if p.srv != nil {
		s.PeerServes = p.srv.Stats()
	}
}

// fetchStats sums the two download budgets' figures.
func (p *peerPlane) fetchStats() stats.Fetch {
	return p.owner.Stats().Add(p.local.Stats())
}

// setConnections applies a new connection budget to both Downloaders.
func (p *peerPlane) setConnections(n int) error {
	return errors.Join(p.owner.SetConnections(n), p.local.SetConnections(n))
}

// sourceBuckets returns the buckets of the configured sources: the only
// ones the peer port serves.
func sourceBuckets(srcs []SourceConfig) []string {
	var out []string
	seen := make(map[string]bool)
	for _, s := range srcs {
		if b := s.URI.Bucket; !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	return out
}
