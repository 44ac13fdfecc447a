package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
)

// countingHandler counts the requests h answers, by path.
type countingHandler struct {
	h              http.Handler
	single, batch  atomic.Int64
	batchedObjects atomic.Int64
	conns          *atomic.Int64 // connections accepted, if counted
}

func (c *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case Path:
		c.single.Add(1)
	case BatchPath:
		c.batch.Add(1)
		if v, err := url.ParseQuery(r.URL.RawQuery); err == nil {
			c.batchedObjects.Add(int64(len(v["o"])))
		}
	}
	c.h.ServeHTTP(w, r)
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// batchPair starts node a reading every object from owner b, whose server
// counts its requests (and cnt.conns the connections it accepts); corrupt,
// if set, plays a corrupt b.
func batchPair(t *testing.T, e *gcsEnv, corrupt func(object.Object, int64, []byte)) (a, b *node, cnt *countingHandler) {
	t.Helper()
	la, lb := listen(t), &countingListener{Listener: listen(t)}
	cfg := patient(ownedBy(Candidate{Name: "b", Addr: lb.Addr().String()}))
	cfg.BatchInflight = 1 // one batch at a time: the reads in flight meanwhile (testFetch: 4) wait together
	a = startNode(t, e, "a", la, cfg, nil)
	lb2 := listen(t) // b's own server listens here; lb forwards to it through the counter
	b = startNode(t, e, "b", lb2, patient(ownedBy(Candidate{Name: "b", Self: true})), func(c *ServerConfig) {
		c.CorruptForTest = corrupt
	})
	cnt = &countingHandler{h: b.srv, conns: &lb.accepted}
	serve(t, lb, cnt)
	return a, b, cnt
}

// readAll reads objs on n, all at once, and checks them against datas.
func readAllOn(t *testing.T, n *node, objs []object.Object, datas [][]byte) {
	t.Helper()
	var wg sync.WaitGroup
	for i, o := range objs {
		wg.Go(func() {
			got, err := tryRead(n.cache, o)
			if err != nil {
				t.Errorf("read %s: %v", o, err)
				return
			}
			checkBytes(t, "read "+o.Name, got, datas[i])
		})
	}
	wg.Wait()
}

// TestBatchedReads: small objects read from one owner at once travel in
// batch requests, as many to a request as the reader has reads in flight,
// each exact; the owner fills each from GCS once.
func TestBatchedReads(t *testing.T) {
	e := newGCSEnv(t)
	a, b, cnt := batchPair(t, e, nil)
	const n = 40
	objs, datas := make([]object.Object, n), make([][]byte, n)
	for i := range n {
		datas[i] = emulator.Pattern(uint64(100+i), 1000+i*997)
		objs[i] = e.put(t, bucket, fmt.Sprintf("img/%03d.jpg", i), datas[i])
	}
	readAllOn(t, a, objs, datas)
	st := a.src.Stats()
	// A batch holds the reads in flight: at most the reader's connection
	// budget (testFetch: 4).
	if cnt.single.Load() != 0 || cnt.batch.Load() == 0 || cnt.batch.Load() > n/2 || cnt.batchedObjects.Load() != n {
		t.Errorf("owner saw %d single and %d batch requests for %d objects (%d in batches); want batches only, several objects each",
			cnt.single.Load(), cnt.batch.Load(), n, cnt.batchedObjects.Load())
	}
	if st.Batches != cnt.batch.Load() || st.BatchedObjects != n || st.OriginBytes != 0 {
		t.Errorf("a: Stats = %+v; want the batches counted and nothing from GCS", st)
	}
	if got, want := originBytes(a, b), sumLen(datas); got != want {
		t.Errorf("GCS served %d bytes; want %d (b's fills, once each)", got, want)
	}
	// One batch at a time (BatchInflight 1): each goes on the connection
	// the one before gave back. A batch's body closed before its end used
	// to take its connection with it: a TLS handshake per batch.
	if got := cnt.conns.Load(); got != 1 {
		t.Errorf("%d batch requests took %d connections; want 1", cnt.batch.Load(), got)
	}
	t.Logf("%d objects in %d batch requests", n, cnt.batch.Load())
}

// TestBatchWithCorruptMember: the owner corrupts one object of a batch;
// the reader's CRC32C check catches it and reads that object again from
// GCS; the batch's other objects are served as sent.
func TestBatchWithCorruptMember(t *testing.T) {
	e := newGCSEnv(t)
	a, _, cnt := batchPair(t, e, func(o object.Object, off int64, p []byte) {
		if o.Name == "img/007.jpg" && off == 0 {
			p[0] ^= 0x55
		}
	})
	const n = 16
	objs, datas := make([]object.Object, n), make([][]byte, n)
	for i := range n {
		datas[i] = emulator.Pattern(uint64(200+i), 5000)
		objs[i] = e.put(t, bucket, fmt.Sprintf("img/%03d.jpg", i), datas[i])
	}
	readAllOn(t, a, objs, datas)
	if st := a.local.Stats(); st.CRCFailures != 1 {
		t.Errorf("a: %d CRC failures; want 1 (the corrupt member)", st.CRCFailures)
	}
	if st := a.src.Stats(); st.OriginBytes != 5000 || st.BatchedObjects != n {
		t.Errorf("a: Stats = %+v; want the corrupt object once from GCS, %d objects batched", st, n)
	}
	if cnt.batch.Load() == 0 {
		t.Error("no batch request")
	}
}

// TestBatchItemsNotFound: a batch naming generations the owner cannot get
// answers those items "not found" (the reader asks GCS, whose word is
// final) and serves the others.
func TestBatchItemsNotFound(t *testing.T) {
	e := newGCSEnv(t)
	_, b, _ := batchPair(t, e, nil)
	good := e.put(t, bucket, "ok", emulator.Pattern(1, 3000))
	gone := object.Object{Bucket: bucket, Name: "ok", Generation: good.Generation + 1}
	missing := object.Object{Bucket: bucket, Name: "missing", Generation: 7}
	srcA, err := New(e.gcs, patient(ownedBy(Candidate{Name: "b", Addr: b.addr})))
	if err != nil {
		t.Fatal(err)
	}
	defer srcA.Close()
	p := srcA.peer("b")
	rs := []*batchRead{{req: request{obj: good, n: 3000}}, {req: request{obj: gone, n: 3000}}, {req: request{obj: missing, n: 10}}}
	for _, r := range rs {
		r.done = make(chan struct{})
	}
	srcA.sendBatch(context.Background(), Candidate{Name: "b", Addr: b.addr}, p, rs)
	if rs[0].err != nil || len(rs[0].data) != 3000 {
		t.Errorf("good item: %d bytes, %v", len(rs[0].data), rs[0].err)
	}
	for _, r := range rs[1:] {
		if r.cause != CauseNotFound || !errors.Is(r.err, errBadAnswer) {
			t.Errorf("%s: cause %v, err %v; want not found", r.req.obj, r.cause, r.err)
		}
	}
}

// TestBatchRequestsRefused: malformed batch requests get 400, a bucket not
// served 403, before anything is opened.
func TestBatchRequestsRefused(t *testing.T) {
	e := newGCSEnv(t)
	_, b, _ := batchPair(t, e, nil)
	many := make([]object.Object, MaxBatch+1)
	for i := range many {
		many[i] = object.Object{Bucket: bucket, Name: fmt.Sprintf("o%d", i), Generation: 1}
	}
	for name, tc := range map[string]struct {
		query string
		want  int
	}{
		"no objects":         {"b=" + bucket, http.StatusBadRequest},
		"names without gens": {"b=" + bucket + "&o=x&o=y&g=1", http.StatusBadRequest},
		"two buckets":        {"b=" + bucket + "&b=other&o=x&g=1", http.StatusBadRequest},
		"dot-dot name":       {"b=" + bucket + "&o=a/../b&g=1", http.StatusBadRequest},
		"zero generation":    {"b=" + bucket + "&o=x&g=0", http.StatusBadRequest},
		"unknown param":      {"b=" + bucket + "&o=x&g=1&n=5", http.StatusBadRequest},
		"too many":           {batchQuery(many, false), http.StatusBadRequest},
		"bucket not served":  {"b=other&o=x&g=1", http.StatusForbidden},
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+b.addr+BatchPath+"?"+tc.query, nil)
		if err := Sign(testKey, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d; want %d", name, resp.StatusCode, tc.want)
		}
	}
}

// TestBatchKeepalive: while the owner fills a batch's objects from a slow
// GCS, keepalive frames keep the requester from taking it for a stall, and
// every object arrives whole.
func TestBatchKeepalive(t *testing.T) {
	e := newGCSEnv(t)
	la, lb := listen(t), listen(t)
	cfg := patient(ownedBy(Candidate{Name: "b", Addr: lb.Addr().String()}))
	cfg.StallTimeout = 300 * time.Millisecond // shorter than one fill: only keepalives save the batch
	cfg.BatchInflight = 1
	a := startNode(t, e, "a", la, cfg, nil)
	objs, datas := slowOwner(t, e, lb, 300, 600*time.Millisecond)
	readAllOn(t, a, objs, datas)
	st := a.src.Stats()
	if st.BatchedObjects != int64(len(objs)) || st.OriginBytes != 0 || st.PeerErrors["timeout"] != 0 {
		t.Errorf("Stats = %+v; want %d objects batched, none from GCS, no timeouts", st, len(objs))
	}
}

// slowOwner starts node b on lb, owning every key and sending heartbeats
// every 20ms, and puts 4 small objects (patterns from seed) that b then
// takes at least fill to fill, each.
func slowOwner(t *testing.T, e *gcsEnv, lb net.Listener, seed uint64, fill time.Duration) ([]object.Object, [][]byte) {
	t.Helper()
	startNode(t, e, "b", lb, patient(ownedBy(Candidate{Name: "b", Self: true})), func(c *ServerConfig) {
		c.Heartbeat = 20 * time.Millisecond
	})
	const n = 4
	objs, datas := make([]object.Object, n), make([][]byte, n)
	for i := range n {
		datas[i] = emulator.Pattern(seed+uint64(i), 2000)
		objs[i] = e.put(t, bucket, fmt.Sprintf("slow/%d", i), datas[i])
	}
	e.emu.SetShape(emulator.Shape{FirstByte: fill})
	return objs, datas
}

func FuzzParseBatch(f *testing.F) {
	f.Add(batchQuery([]object.Object{{Bucket: "b", Name: "x", Generation: 1}, {Bucket: "b", Name: "y/z", Generation: 9}}, false))
	f.Add("b=b&o=x&g=1&cached=1")
	f.Fuzz(func(t *testing.T, raw string) {
		objs, cached, err := parseBatch(raw)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("parseBatch(%q) = %v; want ErrBadRequest", raw, err)
			}
			return
		}
		again, cached2, err := parseBatch(batchQuery(objs, cached))
		if err != nil || cached2 != cached || len(again) != len(objs) {
			t.Fatalf("re-encoding %v gives %v, %v", objs, again, err)
		}
		for i := range objs {
			if again[i] != objs[i] || strings.IndexByte(objs[i].Name, 0) >= 0 {
				t.Fatalf("object %d: %v then %v", i, objs[i], again[i])
			}
		}
	})
}

func sumLen(bs [][]byte) int64 {
	var n int64
	for _, b := range bs {
		n += int64(len(b))
	}
	return n
}

// TestMissesKeepConnections: an owner asks the next member for a copy
// before it fills each object from GCS (cached only); the member's "not
// held" answers are read to their end, so every ask goes on the one
// connection. Closing them unread dropped the connection each time (a TCP
// and TLS handshake per owned object).
func TestMissesKeepConnections(t *testing.T) {
	e := newGCSEnv(t)
	lb := &countingListener{Listener: listen(t)}
	b := startNode(t, e, "b", lb, patient(ownedBy(Candidate{Name: "b", Self: true})), nil)
	a := startNode(t, e, "a", listen(t), patient(ownedBy(Candidate{Name: "a", Self: true},
		Candidate{Name: "b", Addr: lb.Addr().String()})), nil)
	const n = 20
	for i := range n {
		data := emulator.Pattern(uint64(500+i), 1000+i)
		o := e.put(t, bucket, fmt.Sprintf("own/%02d", i), data)
		checkBytes(t, "a reads "+o.Name, read(t, a.cache, o), data)
	}
	if got := b.srv.Stats(); got.ServedBytes != 0 {
		t.Errorf("b served %d bytes; want none (it holds nothing)", got.ServedBytes)
	}
	if got := lb.accepted.Load(); got != 1 {
		t.Errorf("%d asks took %d connections; want 1", n, got)
	}
}
