package linkshape_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/bench/linkshape"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// objSize is the size of the object the tests read: several pacing chunks.
const objSize = 300_000

// rig is an emulator holding bkt/o behind a Link over a Proxy, all on real
// loopback TCP.
type rig struct {
	emu  *emulator.Server
	link *linkshape.Link
	url  string // the proxy's base URL
	data []byte // bkt/o's content
	srv  *httptest.Server
}

// settledStats closes the proxy's server, which waits for its handlers to
// return, and then reads the Link's counters: a handler counts the bytes
// it wrote after the write returns, which can be after the client has
// read them.
func (r *rig) settledStats() linkshape.Stats {
	r.srv.Close()
	return r.link.Stats()
}

// newRig starts the emulator (unshaped, no faults) and the proxy in front
// of it with sh and plan.
func newRig(t *testing.T, sh linkshape.Shape, plan linkshape.FaultPlan) *rig {
	t.Helper()
	emu, err := emulator.Start(emulator.Options{})
	if err != nil {
		t.Fatalf("emulator.Start: %v", err)
	}
	t.Cleanup(emu.Close)
	data := emulator.Pattern(1, objSize)
	if _, err := emu.Put("bkt", "o", data); err != nil {
		t.Fatalf("Put: %v", err)
	}
	tr := linkshape.NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	p, err := linkshape.Proxy("http://"+emu.Addr(), tr, nil)
	if err != nil {
		t.Fatalf("Proxy: %v", err)
	}
	l := linkshape.New(p, sh, plan)
	srv := httptest.NewServer(l)
	t.Cleanup(srv.Close)
	return &rig{emu: emu, link: l, url: srv.URL, data: data, srv: srv}
}

// testCtx bounds a test's requests.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// source returns the agent's GCS source pointed at the rig's proxy.
func (r *rig) source(t *testing.T) *fetch.GCS {
	t.Helper()
	src, err := fetch.NewGCS(testCtx(t), fetch.GCSConfig{Endpoint: r.url})
	if err != nil {
		t.Fatalf("NewGCS: %v", err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// get GETs the rig's object over a fresh connection and reads the body.
func (r *rig) get(ctx context.Context) (*http.Response, []byte, error) {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url+"/bkt/o", nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

func TestProxyServesThrough(t *testing.T) {
	sh := linkshape.Shape{FirstByte: time.Millisecond, BytesPerSec: 200e6}
	r := newRig(t, sh, nil)
	src, ctx := r.source(t), testCtx(t)
	o := object.Object{Bucket: "bkt", Name: "o"}
	a, err := src.Stat(ctx, o)
	if err != nil {
		t.Fatalf("Stat through the proxy: %v", err)
	}
	if a.Size != objSize {
		t.Errorf("Stat: size %d; want %d", a.Size, objSize)
	}
	var listed int
	for _, err := range src.List(ctx, "bkt", "") {
		if err != nil {
			t.Fatalf("List through the proxy: %v", err)
		}
		listed++
	}
	if listed != 1 {
		t.Errorf("List: %d objects; want 1", listed)
	}
	reads := []struct{ off, n int64 }{{0, objSize}, {1000, 70_000}, {objSize - 10, 10}}
	var want int64
	for _, rd := range reads {
		rc, err := src.NewRangeReader(ctx, a.Object, rd.off, rd.n)
		if err != nil {
			t.Fatalf("NewRangeReader(%d, %d): %v", rd.off, rd.n, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, r.data[rd.off:rd.off+rd.n]) {
			t.Errorf("read (%d, %d): %d bytes, error %v; want the object's %d bytes", rd.off, rd.n, len(got), err, rd.n)
		}
		want += rd.n
	}
	got := r.settledStats()
	if wantStats := (linkshape.Stats{MediaGETs: 3, BytesServed: want}); got != wantStats {
		t.Errorf("Stats() = %+v; want %+v", got, wantStats)
	}
	if n := r.emu.MediaGETs(); n != 3 {
		t.Errorf("upstream MediaGETs() = %d; want 3", n)
	}
	if sh := r.link.Shape(); sh != (linkshape.Shape{FirstByte: time.Millisecond, BytesPerSec: 200e6}) {
		t.Errorf("Shape() = %+v; want the shape given to New", sh)
	}
}

func TestProxyStatusFault(t *testing.T) {
	r := newRig(t, linkshape.Shape{}, func(_ *http.Request, n int) linkshape.Fault {
		if n == 1 {
			return linkshape.Fault{Status: http.StatusServiceUnavailable, RetryAfter: "1"}
		}
		return linkshape.Fault{}
	})
	ctx := testCtx(t)
	resp, body, err := r.get(ctx)
	if err != nil {
		t.Fatalf("first GET: %v", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || len(body) != 0 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("first GET: status %d, %d body bytes, Retry-After %q; want 503, none, \"1\"",
			resp.StatusCode, len(body), resp.Header.Get("Retry-After"))
	}
	resp, body, err = r.get(ctx)
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(body, r.data) {
		t.Fatalf("second GET: %v, %d bytes, error %v; want 200 and the object", resp.Status, len(body), err)
	}
	want := linkshape.Stats{MediaGETs: 2, Faulted: 1, BytesServed: objSize}
	if got := r.settledStats(); got != want {
		t.Errorf("Stats() = %+v; want %+v", got, want)
	}
	if n := r.emu.MediaGETs(); n != 1 {
		t.Errorf("upstream MediaGETs() = %d; want 1 (the faulted GET never reaches it)", n)
	}
}

func TestProxyResetDeliversPrefix(t *testing.T) {
	const cut = 100_000
	r := newRig(t, linkshape.Shape{BytesPerSec: 100e6}, func(*http.Request, int) linkshape.Fault {
		return linkshape.Fault{ResetAfter: cut}
	})
	_, body, err := r.get(testCtx(t))
	if err == nil {
		t.Fatal("GET with a reset: no error; want the connection reset")
	}
	if len(body) != cut || !bytes.Equal(body, r.data[:cut]) {
		t.Errorf("GET with a reset: %d bytes; want the object's first %d", len(body), cut)
	}
}

func TestAgentReadsUnderRandomFaults(t *testing.T) {
	plan, err := linkshape.Random{Seed: 7, StatusRate: 0.3, ResetRate: 0.3, ResetWithin: 16 << 10}.Plan()
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	r := newRig(t, linkshape.Shape{}, plan)
	src, ctx := r.source(t), testCtx(t)
	a, err := src.Stat(ctx, object.Object{Bucket: "bkt", Name: "o"})
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	dl, err := fetch.NewDownloader(src, fetch.Config{SliceSize: 16 << 10, Connections: 4, MaxAttempts: 20,
		BackoffInitial: time.Millisecond, BackoffMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("NewDownloader: %v", err)
	}
	buf := &writerAt{b: make([]byte, a.Size)}
	if err := dl.Fetch(ctx, a, buf, object.NewUrgency(object.Demand)); err != nil {
		t.Fatalf("Fetch under faults: %v", err)
	}
	if !bytes.Equal(buf.b, r.data) {
		t.Error("Fetch under faults: the bytes differ from the object")
	}
	if st := r.link.Stats(); st.Faulted == 0 || st.MediaGETs <= 19 {
		t.Errorf("Stats() = %+v; want some of more than 19 slice reads faulted", st)
	}
}

// writerAt is an io.WriterAt over a fixed buffer.
type writerAt struct{ b []byte }

func (w *writerAt) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(w.b)) {
		return 0, errors.New("write past the buffer")
	}
	return copy(w.b[off:], p), nil
}

func TestProxyRejectsBadTargets(t *testing.T) {
	for _, target := range []string{"", "127.0.0.1:80", "ftp://h:1", "http://", "http://h:1/storage/v1/",
		"http://h:1?x=1", "http://[::1"} {
		if _, err := linkshape.Proxy(target, nil, nil); err == nil {
			t.Errorf("Proxy(%q): no error; want one", target)
		}
	}
	if _, err := linkshape.Proxy("http://127.0.0.1:1/", nil, nil); err != nil {
		t.Errorf("Proxy(http://127.0.0.1:1/): %v", err)
	}
}

func TestIsMediaGET(t *testing.T) {
	tests := []struct {
		method, target string
		want           bool
	}{
		{http.MethodGet, "/b/o", true},
		{http.MethodGet, "/b/dir/o%20x", true},
		{http.MethodGet, "/storage/v1/b/b/o/o?alt=media", true},
		{http.MethodGet, "/download/storage/v1/b/b/o/o?alt=media", true},
		{http.MethodHead, "/b/o", false},
		{http.MethodGet, "/storage/v1/b/b/o/o", false},
		{http.MethodGet, "/storage/v1/b/b/o?prefix=x", false},
		{http.MethodGet, "/b", false},
		{http.MethodGet, "/b/", false},
		{http.MethodGet, "/_internal/healthcheck", false},
		{http.MethodPost, "/upload/storage/v1/b/b/o", false},
	}
	for _, tt := range tests {
		r, err := http.NewRequest(tt.method, "http://127.0.0.1"+tt.target, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := linkshape.IsMediaGET(r); got != tt.want {
			t.Errorf("IsMediaGET(%s %s) = %v; want %v", tt.method, tt.target, got, tt.want)
		}
	}
}
