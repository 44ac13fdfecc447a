package peer

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
)

// get sends a GET for uri (path and query) to addr, signed with key
// unless key is nil, and returns the status and body.
func get(t *testing.T, addr, uri string, key []byte) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+uri, nil)
	if err != nil {
		t.Fatal(err)
	}
	return send(t, req, key)
}

// send signs req with key (unless nil), sends it and returns the answer.
func send(t *testing.T, req *http.Request, key []byte) (int, http.Header, []byte) {
	t.Helper()
	if key != nil {
		if err := sign(key, req, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// uriOf returns the endpoint URI for a range of o.
func uriOf(o object.Object, off, n int64) string {
	return Path + "?" + request{obj: o, off: off, n: n}.query()
}

// TestServerAnswers: each kind of request gets its status, and a 200
// carries exactly the range asked for, of the generation asked for.
func TestServerAnswers(t *testing.T) {
	e := newGCSEnv(t)
	ln := listen(t)
	b := startNode(t, e, "b", ln, patient(ownedBy(Candidate{Name: "b", Self: true})), nil)
	data := emulator.Pattern(12, 1000)
	o := e.put(t, bucket, "dir/x", data)
	other := e.put(t, "other", "x", data)
	missing := o
	missing.Name = "missing"

	status, h, body := get(t, b.addr, uriOf(o, 100, 200), testKey)
	if status != http.StatusOK || string(body) != string(data[100:300]) ||
		h.Get(headerGeneration) != strconv.FormatInt(o.Generation, 10) {
		t.Errorf("GET range: %d, %d bytes, generation %q; want 200, bytes 100-299, %d",
			status, len(body), h.Get(headerGeneration), o.Generation)
	}
	q := func(s string) string { return Path + "?" + s }
	gen := strconv.FormatInt(o.Generation, 10)
	for _, tc := range []struct {
		name string
		uri  string
		key  []byte
		want int
	}{
		{"unsigned", uriOf(o, 0, 10), nil, http.StatusUnauthorized},
		{"wrong key", uriOf(o, 0, 10), []byte("not the fleet's key at all"), http.StatusUnauthorized},
		{"other path", "/v1/other?" + request{obj: o, n: 1}.query(), testKey, http.StatusNotFound},
		{"NUL in name", q("b=data&o=a%00b&gen=" + gen + "&off=0&n=1"), testKey, http.StatusBadRequest},
		{"dot-dot", q("b=data&o=a/../x&gen=" + gen + "&off=0&n=1"), testKey, http.StatusBadRequest},
		{"huge name", q("b=data&o=" + strings.Repeat("x", 2000) + "&gen=" + gen + "&off=0&n=1"), testKey, http.StatusBadRequest},
		{"no generation", q("b=data&o=dir/x&gen=0&off=0&n=1"), testKey, http.StatusBadRequest},
		{"empty range", q("b=data&o=dir/x&gen=" + gen + "&off=0&n=0"), testKey, http.StatusBadRequest},
		{"huge range", q("b=data&o=dir/x&gen=" + gen + "&off=0&n=99999999999999"), testKey, http.StatusBadRequest},
		{"negative", q("b=data&o=dir/x&gen=" + gen + "&off=-1&n=1"), testKey, http.StatusBadRequest},
		{"repeated", q("b=data&o=dir/x&o=y&gen=" + gen + "&off=0&n=1"), testKey, http.StatusBadRequest},
		{"extra", q("b=data&o=dir/x&gen=" + gen + "&off=0&n=1&x=1"), testKey, http.StatusBadRequest},
		{"missing", q("b=data&gen=" + gen + "&off=0&n=1"), testKey, http.StatusBadRequest},
		{"bad bucket", q("b=Data!&o=x&gen=" + gen + "&off=0&n=1"), testKey, http.StatusBadRequest},
		{"bucket not served", uriOf(other, 0, 10), testKey, http.StatusForbidden},
		{"no such object", uriOf(missing, 0, 10), testKey, http.StatusNotFound},
		{"past the end", uriOf(o, 990, 11), testKey, http.StatusRequestedRangeNotSatisfiable},
	} {
		if status, _, body := get(t, b.addr, tc.uri, tc.key); status != tc.want {
			t.Errorf("%s: status %d (%q); want %d", tc.name, status, body, tc.want)
		}
	}

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+b.addr+uriOf(o, 0, 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if status, _, _ := send(t, req, testKey); status != http.StatusBadRequest {
		t.Errorf("POST: status %d; want 400", status)
	}
	if st := b.srv.Stats(); st.ServedRequests["ok"] != 1 || st.ServedBytes != 200 || st.ServedRequests["bad_request"] != 12 {
		t.Errorf("Stats = %+v; want 1 ok of 200 bytes, 12 bad requests", st)
	}
}

// TestServerReplay: a signed request sent twice is refused the second
// time.
func TestServerReplay(t *testing.T) {
	e := newGCSEnv(t)
	b := startNode(t, e, "b", listen(t), patient(ownedBy(Candidate{Name: "b", Self: true})), nil)
	o := e.put(t, bucket, "x", emulator.Pattern(13, 100))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+b.addr+uriOf(o, 0, 10), nil)
	if err != nil {
		t.Fatal(err)
	}
	if status, _, _ := send(t, req, testKey); status != http.StatusOK {
		t.Fatalf("first send: status %d; want 200", status)
	}
	if status, _, _ := send(t, req.Clone(t.Context()), nil); status != http.StatusUnauthorized {
		t.Errorf("replay: status %d; want 401", status)
	}
}

// TestServerLoop: while a node reads an object from a peer, its server
// answers 409 for that object, and serves it again once the read ends.
func TestServerLoop(t *testing.T) {
	e := newGCSEnv(t)
	la, lb := listen(t), listen(t)
	a := startNode(t, e, "a", la, patient(ownedBy(Candidate{Name: "b", Addr: lb.Addr().String()})), nil)
	startNode(t, e, "b", lb, patient(ownedBy(Candidate{Name: "b", Self: true})), nil)
	o := e.put(t, bucket, "x", emulator.Pattern(14, 1000))

	r, err := a.src.NewRangeReader(t.Context(), o, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !a.src.Forwarding(o) {
		t.Error("Forwarding = false while a peer read is open; want true")
	}
	if status, _, _ := get(t, a.addr, uriOf(o, 0, 10), testKey); status != http.StatusConflict {
		t.Errorf("GET while forwarding: status %d; want 409", status)
	}
	// A cached-only request joins no fill: a plain 404 (a holds no copy).
	cached := Path + "?" + request{obj: o, off: 0, n: 10, cached: true}.query()
	if status, _, _ := get(t, a.addr, cached, testKey); status != http.StatusNotFound {
		t.Errorf("cached-only GET while forwarding: status %d; want 404", status)
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if a.src.Forwarding(o) {
		t.Error("Forwarding = true after the read closed; want false")
	}
	if status, _, _ := get(t, a.addr, uriOf(o, 0, 10), testKey); status != http.StatusOK {
		t.Errorf("GET after the read: status %d; want 200", status)
	}
}

// TestServerHeartbeat: while the owner fills a miss from a slow GCS, the
// requester hears 102s, and measures the gaps between them. (A batch's
// keepalives are frames of its body: TestBatchKeepalive.)
func TestServerHeartbeat(t *testing.T) {
	e := newGCSEnv(t)
	la, lb := listen(t), listen(t)
	cfg := patient(ownedBy(Candidate{Name: "b", Addr: lb.Addr().String()}))
	cfg.BatchBelow = -1 // a request of its own
	a := startNode(t, e, "a", la, cfg, nil)
	startNode(t, e, "b", lb, patient(ownedBy(Candidate{Name: "b", Self: true})), func(c *ServerConfig) {
		c.Heartbeat = time.Millisecond
	})
	data := emulator.Pattern(15, 1000)
	o := e.put(t, bucket, "x", data)
	e.emu.SetShape(emulator.Shape{FirstByte: 200 * time.Millisecond}) // the fill takes at least this long
	checkBytes(t, "read", read(t, a.cache, o), data)
	p := a.src.peer("b")
	p.mu.Lock()
	n := len(p.samples)
	p.mu.Unlock()
	if n < 2 {
		t.Errorf("%d latency samples; want the response and at least one heartbeat", n)
	}
}

// TestServerMaxWait: a fill slower than MaxWait gets 503 (the requester
// reads GCS), heartbeats meanwhile notwithstanding; the fill goes on, and
// the next request is served from it.
func TestServerMaxWait(t *testing.T) {
	e := newGCSEnv(t)
	lb := listen(t)
	b := startNode(t, e, "b", lb, patient(ownedBy(Candidate{Name: "b", Self: true})), func(c *ServerConfig) {
		c.Heartbeat, c.MaxWait = 10*time.Millisecond, 100*time.Millisecond
	})
	data := emulator.Pattern(16, 1000)
	o := e.put(t, bucket, "x", data)
	e.emu.SetShape(emulator.Shape{FirstByte: 500 * time.Millisecond})
	if status, _, _ := get(t, b.addr, uriOf(o, 0, 10), testKey); status != http.StatusServiceUnavailable {
		t.Errorf("GET of a slow miss: status %d; want 503", status)
	}
	e.emu.SetShape(emulator.Shape{})
	read(t, b.cache, o) // the fill that went on, or a new one
	if status, _, body := get(t, b.addr, uriOf(o, 0, 10), testKey); status != http.StatusOK || string(body) != string(data[:10]) {
		t.Errorf("GET of the cached object: status %d", status)
	}
	if st := b.srv.Stats(); st.ServedRequests["busy"] != 1 {
		t.Errorf("server Stats = %+v; want one busy answer", st)
	}
}

// TestServerWriteStall: a requester that stops reading an answer loses
// its connection after WriteStall, and the server lets go of the copy it
// was sending.
func TestServerWriteStall(t *testing.T) {
	e := newGCSEnv(t)
	b := startNode(t, e, "b", listen(t), patient(ownedBy(Candidate{Name: "b", Self: true})), func(c *ServerConfig) {
		c.WriteStall = 200 * time.Millisecond
	})
	const size = 16 << 20 // far more than the sockets buffer
	o := e.put(t, bucket, "large", emulator.Pattern(40, size))
	read(t, b.cache, o)
	ln := listen(t)
	ended := make(chan struct{})
	serve(t, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.srv.ServeHTTP(w, r)
		close(ended)
	}))
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(16 << 10)
	req, err := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+uriOf(o, 0, size), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sign(testKey, req, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	// Nothing is read: the answer's writes block.
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the server is still sending to a requester that reads nothing")
	}
}

// TestCopyOutShort: a source that ends before its length (a cached file
// truncated on disk) is an error, never an answer or a batch frame cut
// short without one.
func TestCopyOutShort(t *testing.T) {
	s := &Server{cfg: ServerConfig{WriteStall: time.Second}}
	w := httptest.NewRecorder()
	n, err := s.copyOut(w, strings.NewReader("abc"), 10)
	if n != 3 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("copyOut = %d, %v; want 3 bytes and io.ErrUnexpectedEOF", n, err)
	}
}

// TestAuthVerify checks the MAC, the time window and the replay cache.
func TestAuthVerify(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v := newVerifier(testKey, time.Minute)
	mk := func(key []byte, at time.Time, uri string) *http.Request {
		u, err := url.Parse("http://127.0.0.1" + uri)
		if err != nil {
			t.Fatal(err)
		}
		r := &http.Request{Method: http.MethodGet, URL: u, Header: http.Header{}, RequestURI: u.RequestURI()}
		if err := sign(key, r, at); err != nil {
			t.Fatal(err)
		}
		return r
	}
	good := mk(testKey, now.Add(-30*time.Second), "/v1/peer/object?b=data&o=x")
	if err := v.verify(good, now); err != nil {
		t.Fatalf("verify(good) = %v", err)
	}
	if err := v.verify(good, now); !errors.Is(err, ErrAuth) {
		t.Errorf("verify(replayed) = %v; want ErrAuth", err)
	}
	tampered := mk(testKey, now, "/v1/peer/object?b=data&o=x")
	tampered.RequestURI = "/v1/peer/object?b=data&o=y"
	for name, r := range map[string]*http.Request{
		"stale":    mk(testKey, now.Add(-2*time.Minute), "/x"),
		"future":   mk(testKey, now.Add(2*time.Minute), "/x"),
		"wrong":    mk([]byte("some other key, long enough"), now, "/x"),
		"tampered": tampered,
		"unsigned": {Method: http.MethodGet, Header: http.Header{}, RequestURI: "/x"},
	} {
		if err := v.verify(r, now); !errors.Is(err, ErrAuth) {
			t.Errorf("verify(%s) = %v; want ErrAuth", name, err)
		}
	}
	// Nonces are forgotten after the window, and only then.
	later := now.Add(3 * time.Minute).UnixNano()
	if err := v.remember([nonceLen]byte{1}, now.UnixNano()); err != nil {
		t.Fatal(err)
	}
	if err := v.remember([nonceLen]byte{1}, later); err != nil {
		t.Errorf("remember after the window = %v; want nil", err)
	}
}

// TestConfigs: invalid configs are refused with the sentinels.
func TestConfigs(t *testing.T) {
	e := newGCSEnv(t)
	owners := ownedBy()
	if _, err := New(e.gcs, Config{Key: []byte("short"), Owners: owners}); !errors.Is(err, ErrBadKey) {
		t.Errorf("New(short key) = %v; want ErrBadKey", err)
	}
	for name, cfg := range map[string]Config{
		"no owners": {Key: testKey},
		"negative":  {Key: testKey, Owners: owners, StallTimeout: -1},
		"max<floor": {Key: testKey, Owners: owners, FirstByteFloor: time.Minute, FirstByteMax: time.Second},
	} {
		if _, err := New(e.gcs, cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%s) = %v; want ErrConfig", name, err)
		}
	}
	if _, err := New(nil, Config{Key: testKey, Owners: owners}); !errors.Is(err, ErrConfig) {
		t.Errorf("New(nil origin) = %v; want ErrConfig", err)
	}
	if _, err := NewServer(ServerConfig{Key: testKey}); !errors.Is(err, ErrConfig) {
		t.Errorf("NewServer(no cache) = %v; want ErrConfig", err)
	}
	if _, err := NewDownloader(nil, nil, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("NewDownloader(nil) = %v; want ErrConfig", err)
	}
}

// TestFirstByteTimeout: the floor with no samples, then factor x p99
// within [floor, max].
func TestFirstByteTimeout(t *testing.T) {
	var p peerState
	floor, ceiling := 100*time.Millisecond, time.Second
	if got := p.firstByteTimeout(floor, ceiling, 4); got != floor {
		t.Errorf("no samples: %v; want the floor %v", got, floor)
	}
	for range 200 {
		p.observe(10 * time.Millisecond)
	}
	if got := p.firstByteTimeout(floor, ceiling, 4); got != floor {
		t.Errorf("fast peer: %v; want the floor %v", got, floor)
	}
	p.observe(50 * time.Millisecond)
	if got := p.firstByteTimeout(floor, ceiling, 4); got != 200*time.Millisecond {
		t.Errorf("one slow sample in 64: %v; want 4 x 50ms", got)
	}
	p.observe(time.Hour)
	if got := p.firstByteTimeout(floor, ceiling, 4); got != ceiling {
		t.Errorf("one very slow sample: %v; want the max %v", got, ceiling)
	}
}
