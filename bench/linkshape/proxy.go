package linkshape

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// proxyBuffer is the size of the buffers Proxy copies bodies through: one
// pacing chunk, so each copy is one paced write.
const proxyBuffer = chunkSize

// NewTransport returns an HTTP/1.1 transport for Proxy: keep-alive with
// idle connections enough for many parallel downloads, no environment
// proxy, and no transparent compression (bodies pass through as sent).
func NewTransport() *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
}

// Proxy returns a reverse proxy to target, the base URL of a GCS-compatible
// server such as http://127.0.0.1:4443, sending requests through tr (nil:
// http.DefaultTransport). Requests keep their path and query and get the
// target's host, so a fake-gcs-server with public host 127.0.0.1 routes its
// XML reads. Errors reaching the target are answered 502 and logged to
// errLog (nil: discarded).
//
// The proxy itself does not flush (FlushInterval 0) except for bodies of
// unknown length: a Link in front flushes every piece of a media GET it
// paces. A flush timer racing a Link's reset, which hijacks the connection,
// would flush a response that no longer exists.
func Proxy(target string, tr http.RoundTripper, errLog *log.Logger) (*httputil.ReverseProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("linkshape: proxy target: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("linkshape: proxy target %q: want http://HOST:PORT or https://HOST:PORT", target)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return nil, fmt.Errorf("linkshape: proxy target %q: want no path or query", target)
	}
	u.Path = ""
	if errLog == nil {
		errLog = log.New(io.Discard, "", 0)
	}
	return &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport:  tr,
		BufferPool: &bufferPool{},
		ErrorLog:   errLog,
	}, nil
}

// bufferPool implements httputil.BufferPool with proxyBuffer-sized buffers.
type bufferPool struct{ p sync.Pool }

// Get implements httputil.BufferPool.
func (bp *bufferPool) Get() []byte {
	if b, ok := bp.p.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, proxyBuffer)
}

// Put implements httputil.BufferPool.
func (bp *bufferPool) Put(b []byte) { bp.p.Put(&b) }
