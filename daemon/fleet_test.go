package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fleet"
)

// TestParseConfigFleet decodes the fleet section with its documented keys,
// and reports its problems with their lines.
func TestParseConfigFleet(t *testing.T) {
	c, err := ParseConfig([]byte(`
fleet:
  name: node-a
  listen: 10.0.0.2:7946
  peer_listen: 10.0.0.2:7947
  join: [10.0.0.1:7946, cacheagent-peers.ml.svc.cluster.local:7946]
  key_file: /etc/cacheagent/fleet.key
  insecure: false
`))
	if err != nil {
		t.Fatal(err)
	}
	if f := c.Fleet; f == nil || f.Name != "node-a" || f.Listen != "10.0.0.2:7946" || f.PeerListen != "10.0.0.2:7947" ||
		!slices.Equal(f.Join, []string{"10.0.0.1:7946", "cacheagent-peers.ml.svc.cluster.local:7946"}) ||
		f.KeyFile != "/etc/cacheagent/fleet.key" || f.Insecure {
		t.Errorf("fleet section = %+v", c.Fleet)
	}
	if c, err := ParseConfig([]byte("gpu: auto\n")); err != nil || c.Fleet != nil {
		t.Errorf("no fleet section: %+v, %v; want a nil Fleet", c.Fleet, err)
	}
	for _, tc := range []struct{ in, want string }{
		{"fleet:\n  listen: 10.0.0.2:7946\n  peer_listen: 10.0.0.2:7947\n", "line 2: fleet.key_file: fleet mode needs a shared key"},
		{"fleet:\n  listen: node-a:7946\n  peer_listen: :7947\n  insecure: true\n", "line 2: fleet.listen"},
		{"fleet:\n  listen: :7946\n  peer_listen: :7947\n  insecure: true\n  join: [a:1, b]\n", "line 5: fleet.join.1"},
		{"fleet:\n  listen: :7946\n  insecure: true\n", "fleet.peer_listen: required"},
		{"fleet:\n  listen: :7946\n  peer_listen: :7947\n  key: x\n", "line 4: field key not found"},
	} {
		_, err := ParseConfig([]byte(tc.in))
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%q) = %v; want an ErrConfig containing %q", tc.in, err, tc.want)
		}
	}
}

// TestDaemonFleet starts a daemon with a fleet of one and reads it through
// the control API and the status; without a fleet the route answers
// ErrNoFleet.
func TestDaemonFleet(t *testing.T) {
	emu := startEmulator(t, nil)
	dir := t.TempDir()
	key := filepath.Join(dir, "fleet.key")
	if err := os.WriteFile(key, []byte("000102030405060708090a0b0c0d0e0f\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(dir, emu)
	cfg.Tiers.Disk.Max = 1 << 30
	cfg.Fleet = &fleet.Config{Name: "node-a", Listen: "127.0.0.1:0", PeerListen: "127.0.0.1:0", KeyFile: key}
	d := startDaemon(t, cfg)
	c := dial(t, d)
	fs, err := c.Fleet(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if fs.Self != "node-a" || len(fs.Members) != 1 {
		t.Fatalf("Fleet() = %+v; want node-a alone", fs)
	}
	if m := fs.Members[0]; m.Name != "node-a" || m.State != "alive" || m.Weight != 1<<30 || m.OwnedShare != 1 ||
		m.PeerAddr != d.peers.ln.Addr().String() || !strings.HasPrefix(m.Addr, "127.0.0.1:") || m.Version != "test" {
		t.Errorf("member = %+v; want node-a alive, weight 1GiB, owning everything", m)
	}
	st, err := c.Status(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Fleet == nil || st.Fleet.Self != "node-a" || st.Fleet.Members["alive"] != 1 || st.Fleet.Members["dead"] != 0 {
		t.Errorf("status fleet = %+v; want node-a with one alive member", st.Fleet)
	}

	one := startDaemon(t, testConfig(t.TempDir(), emu))
	if _, err := dial(t, one).Fleet(testCtx(t)); !errors.Is(err, control.ErrNoFleet) {
		t.Errorf("Fleet() without fleet mode = %v; want ErrNoFleet", err)
	}
	if st, err := dial(t, one).Status(testCtx(t)); err != nil || st.Fleet != nil {
		t.Errorf("status without fleet mode: fleet %+v, %v; want none", st.Fleet, err)
	}
}

// TestDaemonFleetKeyRefused checks that a daemon whose fleet key cannot be
// used does not start.
func TestDaemonFleetKeyRefused(t *testing.T) {
	emu := startEmulator(t, nil)
	dir := t.TempDir()
	key := filepath.Join(dir, "fleet.key")
	if err := os.WriteFile(key, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(dir, emu)
	cfg.Fleet = &fleet.Config{Listen: "127.0.0.1:0", PeerListen: "127.0.0.1:0", KeyFile: key}
	d, err := Start(testCtx(t), cfg, Options{})
	if !errors.Is(err, fleet.ErrBadKey) {
		if d != nil {
			d.Close(testCtx(t))
		}
		t.Fatalf("Start with a bad key = %v; want fleet.ErrBadKey", err)
	}
	cfg.Fleet = nil
	d = startDaemon(t, cfg) // the failed start released the cache
	if d.fleet != nil {
		t.Error("daemon without fleet section has a fleet")
	}
}
