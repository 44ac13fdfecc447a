package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fleet"
	"github.com/cacheagent/cacheagent/fleet/peer"
	"github.com/cacheagent/cacheagent/fleet/placement"
	"github.com/cacheagent/cacheagent/object"
)

// TestDaemonFleetReadsThroughPeers starts two daemons in one fleet over
// the emulator; both read the whole source at once. Each object leaves
// the emulator once (its owner's fill), the other node reads it from the
// owner, both end with every object cached byte for byte, and the
// traffic shows in the fleet's stats.
func TestDaemonFleetReadsThroughPeers(t *testing.T) {
	// The GCS bytes are counted: a peer slow under the test's load must
	// not look dead (in CI two reads timed out at the 1 s floor).
	peerTimeouts = peer.Config{FirstByteFloor: 30 * time.Second, FirstByteMax: 30 * time.Second,
		StallTimeout: 30 * time.Second, ConnectTimeout: 10 * time.Second}
	t.Cleanup(func() { peerTimeouts = peer.Config{} })
	emu := startEmulator(t, nil)
	const n, size = 12, 300 << 10
	want := make(map[string][]byte)
	var dataset int64
	for i := range n {
		name := fmt.Sprintf("d/shard-%02d", i)
		want[name] = emulator.Pattern(uint64(i+1), size)
		if _, err := emu.Put("bkt", name, want[name]); err != nil {
			t.Fatal(err)
		}
		dataset += size
	}
	key := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(key, []byte("00112233445566778899aabbccddeeff\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	node := func(name string, join ...string) *Daemon {
		cfg := testConfig(t.TempDir(), emu)
		cfg.Tiers.Disk.Max = 1 << 30
		cfg.Sources = []SourceConfig{{URI: object.URI{Bucket: "bkt", Path: "d/"}}}
		cfg.Fleet = &fleet.Config{Name: name, Listen: "127.0.0.1:0", PeerListen: "127.0.0.1:0", Join: join,
			KeyFile: key}
		return startDaemon(t, cfg)
	}
	a := node("node-a")
	b := node("node-b", a.fleet.Self().Addr)
	deadline := time.Now().Add(testTimeout)
	// Each lists its source at start and balances its owners over it.
	for a.fleet.Table().Len() < 2 || b.fleet.Table().Len() < 2 || !a.peers.owners.listed("gs://bkt/d/") ||
		!b.peers.owners.listed("gs://bkt/d/") {
		if time.Now().After(deadline) {
			t.Fatalf("the nodes never saw each other (%d and %d members) or never listed their source",
				a.fleet.Table().Len(), b.fleet.Table().Len())
		}
		time.Sleep(20 * time.Millisecond)
	}

	before := emu.BytesServed()
	var wg sync.WaitGroup
	for _, d := range []*Daemon{a, b} {
		wg.Go(func() {
			var as []object.Attrs
			for at, err := range d.src.List(testCtx(t), "bkt", "d/") {
				if err != nil {
					t.Error(err)
					return
				}
				as = append(as, at)
			}
			if err := d.cache.Prefetch(testCtx(t), as, object.Demand, nil); err != nil {
				t.Errorf("%s: Prefetch: %v", d.fleet.Name(), err)
			}
		})
	}
	wg.Wait()
	if got := emu.BytesServed() - before; got < dataset || got > dataset+dataset/20 {
		t.Errorf("the emulator served %d bytes for a %d-byte dataset read by two nodes; want about 1x", got, dataset)
	}
	for _, d := range []*Daemon{a, b} {
		for name, data := range want {
			h, err := d.cache.Open(testCtx(t), object.Object{Bucket: "bkt", Name: name})
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(io.NewSectionReader(h, 0, h.Size()))
			h.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s: %s differs from the emulator's (%v)", d.fleet.Name(), name, err)
			}
		}
	}
	sa, _ := a.fleetStats()
	sb, _ := b.fleetStats()
	if sa.PeerBytes["node-b"] == 0 || sb.PeerBytes["node-a"] == 0 || sa.ServedBytes != sb.PeerBytes["node-a"] ||
		sb.ServedBytes != sa.PeerBytes["node-b"] || sa.OriginBytes+sb.OriginBytes != dataset {
		t.Errorf("traffic: a %+v, b %+v; want each node reading the other's objects from it, and the dataset "+
			"from GCS once", sa, sb)
	}
	fs, err := dial(t, b).Fleet(testCtx(t))
	if err != nil || fs.Traffic.PeerBytes["node-a"] != sb.PeerBytes["node-a"] {
		t.Errorf("GET /v1/fleet traffic = %+v, %v; want b's peer bytes", fs.Traffic, err)
	}
}

// TestDaemonPeerPortClosesIdleConns: the peer port closes a connection
// that carries no request for peerIdleTimeout, even one whose only
// request was refused.
func TestDaemonPeerPortClosesIdleConns(t *testing.T) {
	peerIdleTimeout = 200 * time.Millisecond
	t.Cleanup(func() { peerIdleTimeout = 2 * time.Minute })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := peerHTTPServer(http.NotFoundHandler())
	var wg sync.WaitGroup
	wg.Go(func() { hs.Serve(ln) })
	defer func() {
		hs.Close()
		wg.Wait()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", peer.Path)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.SetReadDeadline(time.Now().Add(testTimeout)) // reached only if the server never closes
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("read from an idle connection = %v; want io.EOF (closed by the server)", err)
	}
}

// TestDaemonPeerHoldersKeepBuckets: a member's POST /v1/holders records
// who holds a checkpoint, and never widens the buckets the peer port
// serves: a bucket outside this node's sources and checkpoints stays 403.
func TestDaemonPeerHoldersKeepBuckets(t *testing.T) {
	emu := startEmulator(t, nil)
	key := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(key, []byte("00112233445566778899aabbccddeeff\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t.TempDir(), emu)
	cfg.Tiers.Disk.Max = 1 << 30
	cfg.Sources = []SourceConfig{{URI: object.URI{Bucket: "bkt", Path: "d/"}}}
	cfg.Fleet = &fleet.Config{Name: "node-a", Listen: "127.0.0.1:0", PeerListen: "127.0.0.1:0", KeyFile: key}
	a := startDaemon(t, cfg)
	c := a.ckptFleet
	q := url.Values{"uri": {"gs://other/run/step-1/"}, "node": {"node-b"}}
	if err := c.Do(testCtx(t), "node-a", http.MethodPost, holdersPath+"?"+q.Encode(), nil, 0); err != nil {
		t.Fatal(err)
	}
	if m, ok := a.peers.owners.preferredFor(placement.Key{Bucket: "other", Object: "run/step-1/x"}); m != "node-b" || !ok {
		t.Errorf("preferred holder %q, %v; want node-b", m, ok)
	}
	read := func(bucket string) error {
		q := url.Values{"b": {bucket}, "o": {"d/missing"}, "gen": {"1"}, "off": {"0"}, "n": {"1"}}
		return c.Do(testCtx(t), "node-a", http.MethodGet, peer.Path+"?"+q.Encode(), nil, 0)
	}
	if err := read("other"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("a peer read of the other bucket: %v; want 403", err)
	}
	if err := read("bkt"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a peer read of a missing object of a source's bucket: %v; want 404", err)
	}
}
