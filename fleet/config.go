package fleet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ErrConfig is matched by every error about the contents of a Config.
var ErrConfig = errors.New("fleet: invalid config")

// Config is the fleet section of the daemon's config file:
//
//	fleet:
//	  name: node-a                  # default: the hostname
//	  listen: 10.0.0.2:7946         # gossip, TCP and UDP
//	  peer_listen: 10.0.0.2:7947    # peer data plane (HTTP)
//	  join: [10.0.0.1:7946, cacheagent-peers.ml.svc.cluster.local:7946]
//	  key_file: /etc/cacheagent/fleet.key   # openssl rand -hex 32 > fleet.key
//	  insecure: false               # true to run without key_file
//	  peer_tls: true                # with key_file: the data plane over TLS keyed from it
//	  peer_batch: true              # small objects from one owner in batch requests
//
// Its zero value is not valid: Listen and PeerListen are required, and so is
// KeyFile unless Insecure is set.
type Config struct {
	// Name identifies this agent in the fleet; it seeds its placement hash,
	// so it must be stable across restarts and unique in the fleet.
	// Default: the hostname.
	Name string `yaml:"name"`
	// Listen is the gossip address, IP:port, bound for TCP and UDP. An
	// empty or unspecified IP (":7946", "0.0.0.0:7946") binds every
	// interface and advertises a private address of the machine. Port 0
	// picks a free port (tests).
	Listen string `yaml:"listen"`
	// PeerListen is the peer data plane's address, IP:port, advertised to
	// the other members (Options.PeerAddr overrides what is advertised).
	// An empty or unspecified IP is advertised as the gossip address's IP.
	PeerListen string `yaml:"peer_listen"`
	// Join lists members to join, as host:port: IP addresses or DNS names,
	// each name joining every address it resolves to. It may list this
	// agent's own address. Empty: wait for others to join this one.
	Join []string `yaml:"join"`
	// KeyFile holds the fleet's shared secret: the hex form of 16, 24 or
	// 32 random bytes, as `openssl rand -hex 32` writes it. Gossip is
	// encrypted and authenticated with a key derived from it, and the
	// data plane with another (Fleet.Key).
	KeyFile string `yaml:"key_file"`
	// Insecure allows running without KeyFile: gossip in clear text,
	// anyone who reaches the ports can join. Required to omit KeyFile.
	Insecure bool `yaml:"insecure"`
	// PeerTLS runs the peer data plane over mutual TLS keyed from the key
	// file (peer.NewTLS): answers are then authenticated and encrypted,
	// not only requests signed. Default true with KeyFile; it needs
	// KeyFile. Every member must agree.
	PeerTLS *bool `yaml:"peer_tls"`
	// PeerBatch sends the small objects (at most 1 MiB) read from one
	// owner in batch requests when more are read at once than a few
	// requests in flight carry (fleet/peer: Batches).
	// Default true; false sends every object in a request of its own.
	// Members may differ.
	PeerBatch *bool `yaml:"peer_batch"`
}

// TLS reports whether the data plane runs over TLS: PeerTLS, by default
// whenever KeyFile is set.
func (c Config) TLS() bool {
	if c.PeerTLS != nil {
		return *c.PeerTLS
	}
	return c.KeyFile != ""
}

// ConfigError is a problem with one field of a Config. It matches
// ErrConfig.
type ConfigError struct {
	// Field is the field's YAML key (listen, key_file, join.0 …).
	Field string
	// Problem says what is wrong.
	Problem string
	// Err is the sentinel behind the problem (ErrNoKey), or nil.
	Err error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("fleet: %s: %s", e.Field, e.Problem) }

// Is makes a ConfigError match ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// Unwrap returns Err.
func (e *ConfigError) Unwrap() error { return e.Err }

// maxNameLen bounds a member name: it travels in every gossip message.
const maxNameLen = 128

// Validate checks c for values that cannot work and returns the first
// problem as a *ConfigError. It reads no files: the key file is read by
// Start.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	if len(c.Name) > maxNameLen || strings.ContainsFunc(c.Name, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return bad("name", "%q: want at most %d printable characters without spaces", c.Name, maxNameLen)
	}
	if err := checkListen(c.Listen); err != nil {
		return bad("listen", "%v", err)
	}
	if err := checkListen(c.PeerListen); err != nil {
		return bad("peer_listen", "%v", err)
	}
	for i, j := range c.Join {
		host, port, err := net.SplitHostPort(j)
		if err == nil && host == "" {
			err = errors.New("no host")
		}
		if err == nil {
			_, err = parsePort(port)
		}
		if err != nil {
			return bad("join."+strconv.Itoa(i), "%q: want host:port (an address or a DNS name): %v", j, err)
		}
	}
	if c.KeyFile == "" && !c.Insecure {
		return &ConfigError{Field: "key_file", Problem: ErrNoKey.Error(), Err: ErrNoKey}
	}
	if c.KeyFile == "" && c.TLS() {
		return bad("peer_tls", "needs key_file: TLS is keyed from it")
	}
	return nil
}

// checkListen checks an IP:port listen address; the IP may be empty.
func checkListen(addr string) error {
	if addr == "" {
		return errors.New("required (IP:port)")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want IP:port: %w", addr, err)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%q: want an IP address, not a name, before the port", addr)
		}
	}
	if _, err := parsePort(port); err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	return nil
}

// parsePort parses a port number in [0, 65535].
func parsePort(s string) (int, error) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return int(p), nil
}

// splitListen splits a validated listen address into its IP (empty for
// every interface) and port.
func splitListen(addr string) (string, int) {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := parsePort(port)
	return host, p
}
