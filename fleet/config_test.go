package fleet

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestConfigYAML decodes the documented fleet section, strictly: these
// keys are what deployments and outside tests write.
func TestConfigYAML(t *testing.T) {
	const doc = `
name: node-a
listen: 10.0.0.2:7946
peer_listen: 10.0.0.2:7947
join: [10.0.0.1:7946, cacheagent-peers.ml.svc.cluster.local:7946]
key_file: /etc/cacheagent/fleet.key
insecure: false
`
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	want := Config{Name: "node-a", Listen: "10.0.0.2:7946", PeerListen: "10.0.0.2:7947",
		Join:    []string{"10.0.0.1:7946", "cacheagent-peers.ml.svc.cluster.local:7946"},
		KeyFile: "/etc/cacheagent/fleet.key"}
	if c.Name != want.Name || c.Listen != want.Listen || c.PeerListen != want.PeerListen ||
		!slices.Equal(c.Join, want.Join) || c.KeyFile != want.KeyFile || c.Insecure {
		t.Errorf("decoded %+v; want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", c, err)
	}
	var ins Config
	if err := yaml.Unmarshal([]byte("listen: :7946\npeer_listen: :7947\ninsecure: true\n"), &ins); err != nil || !ins.Insecure {
		t.Fatalf("insecure: true decoded as %+v, %v", ins, err)
	}
	if err := ins.Validate(); err != nil {
		t.Errorf("insecure without key_file: %v; want valid", err)
	}
	if ins.TLS() || !c.TLS() {
		t.Errorf("TLS() = %v without a key file, %v with one; want false, true", ins.TLS(), c.TLS())
	}
	var off Config
	if err := yaml.Unmarshal([]byte("listen: :7946\npeer_listen: :7947\nkey_file: /k\npeer_tls: false\n"), &off); err != nil ||
		off.TLS() || off.Validate() != nil {
		t.Errorf("peer_tls: false decoded as %+v, %v: TLS() = %v", off, err, off.TLS())
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Listen: "127.0.0.1:7946", PeerListen: "127.0.0.1:7947", KeyFile: "/k"}
	tests := []struct {
		field string
		edit  func(*Config)
	}{
		{"listen", func(c *Config) { c.Listen = "" }},
		{"listen", func(c *Config) { c.Listen = "127.0.0.1" }},
		{"listen", func(c *Config) { c.Listen = "localhost:7946" }},
		{"listen", func(c *Config) { c.Listen = "127.0.0.1:65536" }},
		{"peer_listen", func(c *Config) { c.PeerListen = "" }},
		{"peer_listen", func(c *Config) { c.PeerListen = "10.0.0.2:http" }},
		{"join.1", func(c *Config) { c.Join = []string{"10.0.0.1:7946", "peers.svc"} }},
		{"join.0", func(c *Config) { c.Join = []string{":7946"} }},
		{"name", func(c *Config) { c.Name = "node a" }},
		{"name", func(c *Config) { c.Name = strings.Repeat("n", maxNameLen+1) }},
		{"key_file", func(c *Config) { c.KeyFile = "" }},
		{"peer_tls", func(c *Config) { c.KeyFile, c.Insecure, c.PeerTLS = "", true, new(true) }},
	}
	for _, tt := range tests {
		c := ok
		tt.edit(&c)
		err := c.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tt.field || !errors.Is(err, ErrConfig) {
			t.Errorf("Validate(%+v) = %v; want a ConfigError about %s", c, err, tt.field)
		}
	}
	c := ok
	c.KeyFile = ""
	if err := c.Validate(); !errors.Is(err, ErrNoKey) {
		t.Errorf("Validate without key_file = %v; want ErrNoKey", err)
	}
	for _, l := range []string{":7946", "0.0.0.0:7946", "[::1]:7946", "127.0.0.1:0"} {
		c := ok
		c.Listen = l
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(listen %s) = %v; want valid", l, err)
		}
	}
}
