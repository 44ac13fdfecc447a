package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/control"
)

// TestFleetStatusCLI starts two daemons in one fleet on loopback, the
// second joining the first, and reads `fleet status` (table and --json) and
// `status --json`; a daemon without a fleet section answers `fleet status`
// with a clear error.
func TestFleetStatusCLI(t *testing.T) {
	s := startEmulator(t, emulator.Options{})
	key := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(key, []byte("00112233445566778899aabbccddeeff\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fleetYAML := func(name, peer string, join ...string) string {
		return fmt.Sprintf("fleet:\n  name: %s\n  listen: 127.0.0.1:0\n  peer_listen: %s\n  join: [%s]\n  key_file: %q\n",
			name, peer, strings.Join(join, ", "), key)
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	a := startServe(t, dirA, daemonConfig(dirA, s.Endpoint(), fleetYAML("node-a", "127.0.0.1:0")))
	fa := fleetStatus(t, a)
	if fa.Self != "node-a" || len(fa.Members) != 1 || fa.Members[0].OwnedShare != 1 {
		t.Fatalf("fleet status of a fleet of one = %+v", fa)
	}
	b := startServe(t, dirB, daemonConfig(dirB, s.Endpoint(), fleetYAML("node-b", "127.0.0.1:0", fa.Members[0].Addr)))

	var fb control.FleetStatus
	deadline := time.Now().Add(waitLimit)
	for fb = fleetStatus(t, b); len(fb.Members) < 2; fb = fleetStatus(t, b) { // polled: another process
		if time.Now().After(deadline) {
			t.Fatalf("node-b never saw node-a: %+v", fb)
		}
		time.Sleep(50 * time.Millisecond)
	}
	share := 0.0
	for _, m := range fb.Members {
		if m.State != "alive" || !strings.HasPrefix(m.PeerAddr, "127.0.0.1:") || strings.HasSuffix(m.PeerAddr, ":0") ||
			m.Weight <= 0 {
			t.Errorf("member %+v; want alive with the peer port it listens on", m)
		}
		share += m.OwnedShare
	}
	if fb.Self != "node-b" || share < 0.999 || share > 1.001 {
		t.Errorf("fleet status = %+v; want self node-b and shares summing to 1", fb)
	}
	out, err := b.cli(t, "fleet", "status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "node-b *") || !strings.Contains(out, "node-a ") ||
		!strings.Contains(out, fa.Members[0].PeerAddr) || !strings.Contains(out, "read from peers") {
		t.Errorf("fleet status table:\n%s\nwant both members, node-b marked", out)
	}
	if st := b.status(t); st.Fleet == nil || st.Fleet.Self != "node-b" || st.Fleet.Members["alive"] != 2 {
		t.Errorf("status --json fleet = %+v; want node-b with 2 alive members", st.Fleet)
	}

	dirC := t.TempDir()
	c := startServe(t, dirC, daemonConfig(dirC, s.Endpoint(), ""))
	if _, err := c.cli(t, "fleet", "status"); err == nil || !strings.Contains(err.Error(), "fleet mode is not configured") {
		t.Errorf("fleet status without fleet mode: %v; want \"fleet mode is not configured\"", err)
	}
	if out, err := c.cli(t, "status", "--json"); err != nil || strings.Contains(out, `"fleet"`) {
		t.Errorf("status --json without fleet mode: %v\n%s\nwant no fleet", err, out)
	}
	if err := b.terminate(t); err != nil {
		t.Errorf("node-b exit after SIGTERM: %v", err)
	}
}

// fleetStatus returns `fleet status --json` of the daemon p.
func fleetStatus(t *testing.T, p *daemonProc) control.FleetStatus {
	t.Helper()
	out, err := p.cli(t, "fleet", "status", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var fs control.FleetStatus
	if err := json.Unmarshal([]byte(out), &fs); err != nil {
		t.Fatalf("fleet status --json: %v\n%s", err, out)
	}
	return fs
}
