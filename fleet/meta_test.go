package fleet

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

func TestMetaRoundTrip(t *testing.T) {
	m := meta{Format: metaFormat, Peer: "10.0.0.2:7947", Weight: 3 << 40, Version: strings.Repeat("v", 100)}
	b, err := m.encode()
	if err != nil || len(b) > memberlist.MetaMaxSize {
		t.Fatalf("encode = %d bytes, %v", len(b), err)
	}
	got, err := decodeMeta(b)
	if err != nil || got.Peer != m.Peer || got.Weight != m.Weight || got.Version != m.Version[:maxVersionLen] {
		t.Errorf("decodeMeta(encode(%+v)) = %+v, %v; want it back, version truncated", m, got, err)
	}
	if _, err := (meta{Format: metaFormat, Peer: strings.Repeat("h", 600) + ":1", Weight: 1}).encode(); err == nil {
		t.Error("encode of a 600-byte peer address succeeded; want an error")
	}
	for _, bad := range []string{"", "{", `{"v":0,"w":1}`, `{"v":1,"w":0}`, `{"v":1,"w":-1}`} {
		if _, err := decodeMeta([]byte(bad)); !errors.Is(err, errBadMeta) {
			t.Errorf("decodeMeta(%q) = %v; want errBadMeta", bad, err)
		}
	}
	if got, err := decodeMeta([]byte(`{"v":2,"peer":"a:1","w":1,"zone":"z"}`)); err != nil || got.Peer != "a:1" {
		t.Errorf("decodeMeta of a newer format = %+v, %v; want its known fields", got, err)
	}
}

func TestPeerAddr(t *testing.T) {
	ip := net.ParseIP("10.0.0.9")
	for in, want := range map[string]string{
		"10.0.0.2:7947": "10.0.0.2:7947",
		":7947":         "10.0.0.9:7947",
		"0.0.0.0:7947":  "10.0.0.9:7947",
		"[::]:7947":     "10.0.0.9:7947",
		"node-a:7947":   "node-a:7947",
	} {
		if got := peerAddr(in, ip); got != want {
			t.Errorf("peerAddr(%q, %v) = %q; want %q", in, ip, got, want)
		}
	}
}

func TestParseLogLine(t *testing.T) {
	for in, want := range map[string]struct {
		level slog.Level
		msg   string
	}{
		"[DEBUG] memberlist: Stream connection from=127.0.0.1:1\n": {slog.LevelDebug, "Stream connection from=127.0.0.1:1"},
		"[INFO] memberlist: Marking b as failed":                   {slog.LevelInfo, "Marking b as failed"},
		"[WARN] memberlist: Refuting a suspect message":            {slog.LevelWarn, "Refuting a suspect message"},
		"[ERR] memberlist: failed to receive: no key":              {slog.LevelWarn, "failed to receive: no key"},
		"plain line": {slog.LevelInfo, "plain line"},
	} {
		level, msg := parseLogLine(in)
		if level != want.level || msg != want.msg {
			t.Errorf("parseLogLine(%q) = %v, %q; want %v, %q", in, level, msg, want.level, want.msg)
		}
	}
	// The line memberlist v0.7.0 logs when this agent's probes fail.
	_, msg := parseLogLine("[INFO] memberlist: Suspect node-b has failed, no acks received")
	if name, ok := suspectName(msg); !ok || name != "node-b" {
		t.Errorf("suspectName(%q) = %q, %v; want node-b", msg, name, ok)
	}
	if _, ok := suspectName("Suspect  has failed, no acks received"); ok {
		t.Error("suspectName of an empty name succeeded")
	}
}
