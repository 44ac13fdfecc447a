package vm_test

import (
	"bufio"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/daemon"
)

// dropInEnv returns the variables the drop-in's Environment= lines set.
func dropInEnv(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]" && strings.HasPrefix(line, "Environment="):
			for _, kv := range strings.Fields(strings.TrimPrefix(line, "Environment=")) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("%s: %q is not NAME=VALUE", file, kv)
				}
				env[k] = v
			}
		default:
			t.Fatalf("%s: unexpected line %q", file, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return env
}

func TestVMConfig(t *testing.T) {
	env := dropInEnv(t, "fleet.conf")
	ip, err := netip.ParseAddr(env["NODE_IP"])
	if err != nil {
		t.Fatalf("fleet.conf: NODE_IP: %v", err)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, err := daemon.LoadConfig("cacheagent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := cfg.Fleet
	if f == nil {
		t.Fatal("no fleet section")
	}
	if f.KeyFile == "" || f.Insecure {
		t.Errorf("key_file %q, insecure %v: want a key", f.KeyFile, f.Insecure)
	}
	host, port, err := net.SplitHostPort(f.Listen)
	if err != nil || host != ip.String() {
		t.Errorf("fleet.listen %q: want the drop-in's NODE_IP %s (%v)", f.Listen, ip, err)
	}
	if h, _, _ := net.SplitHostPort(f.PeerListen); h != ip.String() {
		t.Errorf("fleet.peer_listen %q: want NODE_IP %s", f.PeerListen, ip)
	}
	// A static join list: addresses at the gossip port, this VM's among them.
	self := false
	for _, j := range f.Join {
		h, p, err := net.SplitHostPort(j)
		if _, perr := netip.ParseAddr(h); err != nil || perr != nil || p != port {
			t.Errorf("fleet.join %q: want IP:%s", j, port)
		}
		self = self || h == ip.String()
	}
	if len(f.Join) < 2 || !self {
		t.Errorf("fleet.join %v: want every VM, %s included", f.Join, ip)
	}
}
