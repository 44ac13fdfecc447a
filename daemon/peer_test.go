package daemon

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fleet"
	"github.com/cacheagent/cacheagent/fleet/peer"
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
