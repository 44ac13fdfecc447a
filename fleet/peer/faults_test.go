package peer

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
)

// blackhole accepts connections on ln and never answers, until the test
// ends: a stopped process.
func blackhole(t *testing.T, ln net.Listener) {
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
}

// TestOwnerStalls: an owner that accepts and never answers costs a
// first-byte timeout; the read falls back to GCS.
func TestOwnerStalls(t *testing.T) {
	e := newGCSEnv(t)
	hole := listen(t)
	blackhole(t, hole)
	cfg := patient(ownedBy(Candidate{Name: "b", Addr: hole.Addr().String()}))
	cfg.FirstByteFloor, cfg.FirstByteMax = 50*time.Millisecond, 50*time.Millisecond
	a := startNode(t, e, "a", listen(t), cfg, nil)
	data := emulator.Pattern(6, objSize)
	o := e.put(t, bucket, "x", data)
	checkBytes(t, "read", read(t, a.cache, o), data)
	st := a.src.Stats()
	if st.PeerErrors["timeout"] == 0 || st.OriginBytes != objSize || st.PeerBytes["b"] != 0 {
		t.Errorf("Stats = %+v; want timeouts and every byte from GCS", st)
	}
	// Each failed-over read lost at least the first-byte timeout; the
	// cool-down sends the later ones to GCS without a wait.
	if st.Failovers == 0 || st.FailoverMaxSeconds < 0.05 || st.FailoverSeconds < st.FailoverMaxSeconds {
		t.Errorf("Stats = %+v; want failovers of at least the 50ms first-byte timeout", st)
	}
}

// halfServer answers a range request with the right headers and half the
// body, then sends nothing more until the requester leaves.
func halfServer(data []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := parseRequest(r.URL.RawQuery)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(req.n, 10))
		w.Header().Set(headerGeneration, strconv.FormatInt(req.obj.Generation, 10))
		w.Write(data[req.off : req.off+req.n/2])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
}

// TestOwnerStallsMidBody: a body that stops halfway fails its reader after
// the stall timeout; the downloader resumes the range from the last byte
// it wrote, this time from GCS, and the object is whole and right.
func TestOwnerStallsMidBody(t *testing.T) {
	e := newGCSEnv(t)
	data := emulator.Pattern(7, objSize)
	o := e.put(t, bucket, "x", data)
	half := listen(t)
	serve(t, half, halfServer(data))
	cfg := patient(ownedBy(Candidate{Name: "b", Addr: half.Addr().String()}))
	cfg.StallTimeout = 50 * time.Millisecond
	a := startNode(t, e, "a", listen(t), cfg, nil)
	checkBytes(t, "read", read(t, a.cache, o), data)
	st := a.src.Stats()
	if st.PeerErrors["timeout"] == 0 || st.PeerBytes["b"] == 0 || st.PeerBytes["b"]+st.OriginBytes < objSize {
		t.Errorf("Stats = %+v; want stalls, some bytes from b and the rest from GCS", st)
	}
	if st.Failovers == 0 || st.FailoverMaxSeconds < 0.05 {
		t.Errorf("Stats = %+v; want failovers of at least the 50ms stall timeout", st)
	}
}

// TestCorruptPeer: a peer that flips a byte of everything it sends is
// caught by the object's CRC32C; the re-read goes to GCS, and only the
// right bytes are published.
func TestCorruptPeer(t *testing.T) {
	e := newGCSEnv(t)
	la, lb := listen(t), listen(t)
	a := startNode(t, e, "a", la, patient(ownedBy(Candidate{Name: "b", Addr: lb.Addr().String()})), nil)
	b := startNode(t, e, "b", lb, patient(ownedBy(Candidate{Name: "b", Self: true})), func(c *ServerConfig) {
		c.CorruptForTest = func(_ object.Object, _ int64, p []byte) { p[0] ^= 0x55 }
	})
	data := emulator.Pattern(8, objSize)
	o := e.put(t, bucket, "x", data)
	checkBytes(t, "a reads", read(t, a.cache, o), data)
	checkBytes(t, "b reads", read(t, b.cache, o), data)
	if st := a.local.Stats(); st.CRCFailures != 1 {
		t.Errorf("a: %d CRC failures; want 1 (the peer's bytes)", st.CRCFailures)
	}
	if st := a.src.Stats(); st.PeerBytes["b"] != objSize || st.OriginBytes != objSize {
		t.Errorf("a: Stats = %+v; want the object once from b, once (the re-read) from GCS", st)
	}
	if got := originBytes(a, b); got != 2*objSize {
		t.Errorf("GCS served %d bytes; want %d (b's fill and a's re-read)", got, 2*objSize)
	}
}

// TestWrongKey: a peer with another key answers 401; the read falls back
// to GCS.
func TestWrongKey(t *testing.T) {
	e := newGCSEnv(t)
	la, lb := listen(t), listen(t)
	a := startNode(t, e, "a", la, patient(ownedBy(Candidate{Name: "b", Addr: lb.Addr().String()})), nil)
	b := startNode(t, e, "b", lb, patient(ownedBy(Candidate{Name: "b", Self: true})), func(c *ServerConfig) {
		c.Key = []byte("another key of the right length")
	})
	data := emulator.Pattern(9, objSize)
	o := e.put(t, bucket, "x", data)
	checkBytes(t, "read", read(t, a.cache, o), data)
	if st := a.src.Stats(); st.PeerErrors["auth"] == 0 || st.OriginBytes != objSize {
		t.Errorf("a: Stats = %+v; want auth errors and every byte from GCS", st)
	}
	if st := b.srv.Stats(); st.ServedRequests["auth"] == 0 || st.ServedBytes != 0 {
		t.Errorf("b: server Stats = %+v; want refusals and nothing served", st)
	}
}

// TestBucketNotServed: a peer that does not serve the bucket answers 403;
// the read falls back to GCS.
func TestBucketNotServed(t *testing.T) {
	e := newGCSEnv(t)
	la, lb := listen(t), listen(t)
	a := startNode(t, e, "a", la, patient(ownedBy(Candidate{Name: "b", Addr: lb.Addr().String()})), nil)
	b := startNode(t, e, "b", lb, patient(ownedBy(Candidate{Name: "b", Self: true})), nil)
	data := emulator.Pattern(11, objSize)
	o := e.put(t, "other", "x", data)
	checkBytes(t, "read", read(t, a.cache, o), data)
	if st := a.src.Stats(); st.PeerErrors["auth"] == 0 || st.OriginBytes != objSize {
		t.Errorf("a: Stats = %+v; want refusals and every byte from GCS", st)
	}
	if st := b.srv.Stats(); st.ServedRequests["forbidden"] == 0 || st.ServedBytes != 0 {
		t.Errorf("b: server Stats = %+v; want 403s and nothing served", st)
	}
}

// TestFallbackWaits: once the token bucket is empty, a fallback waits for
// a token (here longer than its context allows, so it fails at once).
func TestFallbackWaits(t *testing.T) {
	e := newGCSEnv(t)
	dead := listen(t)
	addr := dead.Addr().String()
	dead.Close()
	cfg := patient(ownedBy(Candidate{Name: "b", Addr: addr}))
	cfg.FallbackRate, cfg.FallbackBurst = 0.001, 1
	src, err := New(e.gcs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	o := e.put(t, bucket, "x", emulator.Pattern(16, 1000))
	r, err := src.NewRangeReader(t.Context(), o, 0, 1000)
	if err != nil {
		t.Fatalf("first fallback: %v", err)
	}
	r.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if r, err := src.NewRangeReader(ctx, o, 0, 1000); err == nil {
		r.Close()
		t.Errorf("second fallback within a minute of the first at 0.001/s succeeded; want an error")
	}
	if st := src.Stats(); st.Fallbacks != 2 || st.FallbackWaits != 1 {
		t.Errorf("Stats = %+v; want 2 fallbacks, 1 of them waiting", st)
	}
}
