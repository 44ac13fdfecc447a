package fetch

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// inflightProxy is a reverse proxy in front of the emulator that counts
// concurrent object reads (GET /bucket/object) at the server side.
//
// A read stops counting when the proxy has received the last body byte
// from upstream, before it passes that byte on. The client cannot see the
// end of the body, close it and free its connection slot before that, so
// the count never includes a read the client has already finished: the
// observed peak is an exact lower bound of the client's concurrency and
// never exceeds it.
type inflightProxy struct {
	url          string
	cur, peak    atomic.Int64
	total        atomic.Int64
	srv          *httptest.Server
	reverseProxy *httputil.ReverseProxy
}

type flightKey struct{}

// flight is one counted request; end is idempotent.
type flight struct {
	once sync.Once
	p    *inflightProxy
}

func (f *flight) end() { f.once.Do(func() { f.p.cur.Add(-1) }) }

func newInflightProxy(t *testing.T, target string) *inflightProxy {
	t.Helper()
	u, err := url.Parse("http://" + target)
	if err != nil {
		t.Fatal(err)
	}
	p := &inflightProxy{}
	p.reverseProxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) },
		ModifyResponse: func(resp *http.Response) error {
			if f, ok := resp.Request.Context().Value(flightKey{}).(*flight); ok {
				resp.Body = &endBody{ReadCloser: resp.Body, left: resp.ContentLength, f: f}
			}
			return nil
		},
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	p.url = p.srv.URL
	return p
}

func (p *inflightProxy) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/storage/") {
		f := &flight{p: p}
		p.total.Add(1)
		n := p.cur.Add(1)
		for old := p.peak.Load(); n > old && !p.peak.CompareAndSwap(old, n); old = p.peak.Load() {
		}
		defer f.end()
		r = r.WithContext(context.WithValue(r.Context(), flightKey{}, f))
	}
	p.reverseProxy.ServeHTTP(w, r)
}

// endBody ends its flight when the last byte (by Content-Length) has been
// read from upstream, or on any error.
type endBody struct {
	io.ReadCloser
	left int64
	f    *flight
}

func (b *endBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left <= 0 || err != nil {
		b.f.end()
	}
	return n, err
}
