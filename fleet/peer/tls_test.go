package peer

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/cacheagent/cacheagent/bench/emulator"
)

// tlsNode starts a node whose server speaks TLS with st (nil: plain) and
// whose Source uses ct (nil: plain).
func tlsNode(t testing.TB, e *gcsEnv, name string, ln net.Listener, owners Owners, st, ct *tls.Config) *node {
	t.Helper()
	if st != nil {
		ln = tls.NewListener(ln, st)
	}
	cfg := patient(owners)
	cfg.TLS = ct
	return startNode(t, e, name, ln, cfg, nil)
}

// newTLS returns NewTLS(key, name) or fails the test.
func newTLS(t testing.TB, key []byte, name string) *TLS {
	t.Helper()
	c, err := NewTLS(key, name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTLS: members keyed from one fleet key read from each other over
// TLS; a server keyed from another key, a plain-HTTP requester, and a
// client without a certificate get nothing, and the reads fall back to
// GCS with the right bytes.
func TestTLS(t *testing.T) {
	e := newGCSEnv(t)
	data := emulator.Pattern(31, objSize)
	o := e.put(t, bucket, "tls/x", data)
	other := []byte("another fleet's key, 32 bytes..")
	clientNoCert := newTLS(t, testKey, "a").Client.Clone()
	clientNoCert.Certificates = nil

	for _, c := range []struct {
		name           string
		server, client *tls.Config
		fromPeer       bool
		cause          string
	}{
		{"same key", newTLS(t, testKey, "b").Server, newTLS(t, testKey, "a").Client, true, ""},
		{"server of another fleet", newTLS(t, other, "b").Server, newTLS(t, testKey, "a").Client, false, "auth"},
		{"client of another fleet", newTLS(t, testKey, "b").Server, newTLS(t, other, "a").Client, false, "auth"},
		{"client without a certificate", newTLS(t, testKey, "b").Server, clientNoCert, false, "auth"},
		{"plain client", newTLS(t, testKey, "b").Server, nil, false, "bad_response"},
		{"plain server", nil, newTLS(t, testKey, "a").Client, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			lb := listen(t)
			b := tlsNode(t, e, "b", lb, ownedBy(Candidate{Name: "b", Self: true}), c.server, nil)
			read(t, b.cache, o) // b holds it: a peer read needs no fill
			a := tlsNode(t, e, "a", listen(t), ownedBy(Candidate{Name: "b", Addr: lb.Addr().String()}), nil, c.client)
			checkBytes(t, "a reads", read(t, a.cache, o), data)
			st := a.src.Stats()
			if c.fromPeer {
				if st.PeerBytes["b"] != objSize || st.OriginBytes != 0 {
					t.Errorf("a: Stats = %+v; want every byte from b", st)
				}
				return
			}
			if st.PeerBytes["b"] != 0 || st.OriginBytes != objSize {
				t.Errorf("a: Stats = %+v; want every byte from GCS", st)
			}
			if c.cause != "" && st.PeerErrors[c.cause] == 0 {
				t.Errorf("a: Stats = %+v; want %s errors", st, c.cause)
			}
			if b.srv.Stats().ServedBytes != 0 {
				t.Errorf("b served %d bytes; want none", b.srv.Stats().ServedBytes)
			}
		})
	}
}

// TestTLSKeyed: every member derives the same CA from the key, and only
// from it.
func TestTLSKeyed(t *testing.T) {
	a, b := newTLS(t, testKey, "a"), newTLS(t, testKey, "b")
	if !a.Client.RootCAs.Equal(b.Server.ClientCAs) {
		t.Error("two members of one fleet derived different CAs")
	}
	c := newTLS(t, []byte("another fleet's key, 32 bytes.."), "a")
	if a.Client.RootCAs.Equal(c.Client.RootCAs) {
		t.Error("two fleets derived the same CA")
	}
	if _, err := NewTLS([]byte("short"), "a"); err == nil {
		t.Error("NewTLS(short key) succeeded")
	}
}

// BenchmarkPeerRead reads a 32 MiB object a peer holds, as a node's fill
// does (8 MiB ranges, four at a time), in plain HTTP and over TLS, on
// loopback: what TLS costs per byte.
func BenchmarkPeerRead(b *testing.B) {
	const size = 32 << 20
	e := newGCSEnv(b)
	o := e.put(b, bucket, "bench/x", emulator.Pattern(41, size))
	for _, c := range []struct {
		name string
		tls  bool
	}{{"plain", false}, {"tls", true}} {
		b.Run(c.name, func(b *testing.B) {
			var st, ct *tls.Config
			if c.tls {
				st, ct = newTLS(b, testKey, "b").Server, newTLS(b, testKey, "a").Client
			}
			lb := listen(b)
			srv := tlsNode(b, e, "b", lb, ownedBy(Candidate{Name: "b", Self: true}), st, nil)
			read(b, srv.cache, o)
			src, err := New(e.gcs, Config{Key: testKey, TLS: ct, Owners: ownedBy(Candidate{Name: "b", Addr: lb.Addr().String()})})
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close()
			b.SetBytes(size)
			b.ResetTimer()
			for b.Loop() {
				var g errgroup.Group
				for off := int64(0); off < size; off += 8 << 20 {
					g.Go(func() error {
						r, err := src.NewRangeReader(context.Background(), o, off, 8<<20)
						if err != nil {
							return err
						}
						defer r.Close()
						_, err = io.Copy(io.Discard, r)
						return err
					})
				}
				if err := g.Wait(); err != nil {
					b.Fatal(err)
				}
			}
			if st := src.Stats(); st.OriginBytes != 0 {
				b.Fatalf("Stats = %+v: read from GCS", st)
			}
		})
	}
}
