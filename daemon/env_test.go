package daemon

import (
	"errors"
	"strings"
	"testing"
)

// env is a fixed environment for parseConfig.
func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestParseConfigExpandsEnv(t *testing.T) {
	doc := `
tiers:
  disk: {dir: "/data/${NODE_NAME}"}
metrics: {listen: "${POD_IP}:9464"}
fleet:
  name: ${NODE_NAME}
  listen: ${POD_IP}:7946
  peer_listen: "${POD_IP}:7947"
  join: ["cacheagent-peers:7946", "${SEED}:7946"]
  key_file: /etc/cacheagent/fleet/$${KEY}.key
`
	c, err := parseConfig([]byte(doc), env(map[string]string{"NODE_NAME": "gpu-node-7", "POD_IP": "10.4.2.9",
		"SEED": "10.4.0.1"}))
	if err != nil {
		t.Fatal(err)
	}
	f := c.Fleet
	if f.Name != "gpu-node-7" || f.Listen != "10.4.2.9:7946" || f.PeerListen != "10.4.2.9:7947" ||
		strings.Join(f.Join, ",") != "cacheagent-peers:7946,10.4.0.1:7946" || c.Metrics.Listen != "10.4.2.9:9464" {
		t.Errorf("fleet %+v, metrics.listen %q: not expanded", *f, c.Metrics.Listen)
	}
	// Only the per-agent fields are expanded; the others are taken as written.
	if c.Tiers.Disk.Dir != "/data/${NODE_NAME}" || f.KeyFile != "/etc/cacheagent/fleet/$${KEY}.key" {
		t.Errorf("disk dir %q, key_file %q: want them as written", c.Tiers.Disk.Dir, f.KeyFile)
	}
}

func TestParseConfigEnvErrors(t *testing.T) {
	vars := env(map[string]string{"EMPTY": "", "IP": "10.0.0.1"})
	for _, tc := range []struct{ doc, want string }{
		{"fleet: {name: '${NODE_NAME}', listen: ':7946', peer_listen: ':7947', insecure: true}",
			"line 1: fleet.name: ${NODE_NAME}: environment variable NODE_NAME is not set"},
		{"fleet:\n  listen: ${EMPTY}:7946\n  peer_listen: :7947\n  insecure: true",
			"line 2: fleet.listen: ${EMPTY}: environment variable EMPTY is empty"},
		{"fleet:\n  listen: :7946\n  peer_listen: :7947\n  insecure: true\n  join: [a:1, '${IP:7946']",
			"line 5: fleet.join.1: \"${IP:7946\": unterminated ${"},
		{"metrics: {listen: '${1P}:9464'}", `line 1: metrics.listen: "${1P}": not a variable name`},
		{"metrics: {listen: '${}:9464'}", `metrics.listen: "${}": not a variable name`},
		// Expanded values are validated like written ones.
		{"fleet: {listen: '${IP}', peer_listen: ':7947', insecure: true}", `line 1: fleet.listen: "10.0.0.1": want IP:port`},
	} {
		_, err := parseConfig([]byte(tc.doc), vars)
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want ErrConfig with %q", tc.doc, err, tc.want)
		}
	}
}

func TestExpandEnv(t *testing.T) {
	vars := env(map[string]string{"A": "x", "B_2": "y"})
	for in, want := range map[string]string{
		"":             "",
		"plain":        "plain",
		"${A}":         "x",
		"${A}${B_2}":   "xy",
		"a${A}b${A}c":  "axbxc",
		"$A $ $$ ${A}": "$A $ $$ x",
		"$${A}":        "${A}",
		"$${A}${A}":    "${A}x",
		"{${A}}":       "{x}",
	} {
		got, err := expandEnv(in, vars)
		if err != nil || got != want {
			t.Errorf("expandEnv(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestParseConfigEnvIPv6(t *testing.T) {
	doc := "fleet: {listen: '[${POD_IP}]:7946', peer_listen: '[${POD_IP}]:7947', insecure: true}"
	c, err := parseConfig([]byte(doc), env(map[string]string{"POD_IP": "fd00:10::17"}))
	if err != nil || c.Fleet.Listen != "[fd00:10::17]:7946" || c.Fleet.PeerListen != "[fd00:10::17]:7947" {
		t.Fatalf("listen %+v, %v", c.Fleet, err)
	}
	doc = "fleet: {listen: '${POD_IP}:7946', peer_listen: ':7947', insecure: true}"
	if _, err := parseConfig([]byte(doc), env(map[string]string{"POD_IP": "fd00:10::17"})); err == nil ||
		!strings.Contains(err.Error(), "fleet.listen") {
		t.Errorf("an IPv6 address without brackets: %v, want a fleet.listen error", err)
	}
}
