package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"cloud.google.com/go/storage"
	"github.com/cacheagent/cacheagent/object"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	htransport "google.golang.org/api/transport/http"
)

// GCSConfig configures NewGCS. The zero value talks to storage.googleapis.com
// with Application Default Credentials, or to $STORAGE_EMULATOR_HOST
// without authentication when that is set (as the Go client does).
type GCSConfig struct {
	// Endpoint, if set, is the JSON API endpoint of a GCS-compatible server,
	// e.g. "http://127.0.0.1:9000/storage/v1/"; a bare "http://host:port"
	// gets the path /storage/v1/. Requests to it are not authenticated.
	// object.Object data is read from the same host (the XML API).
	Endpoint string
	// HTTPClient, if set, carries every request unchanged: it must
	// authenticate them itself, and its transport's tuning is the caller's
	// (UserAgent and MaxIdleConns are then ignored). By default a transport
	// tuned for many parallel range reads is used.
	HTTPClient *http.Client
	// UserAgent is sent on every request. Default "cacheagent".
	UserAgent string
	// MaxIdleConns is how many idle connections the default transport keeps
	// to the storage host; keep it at least the Downloader's Connections so
	// that range reads reuse warm connections. Default 256.
	MaxIdleConns int
	// ReadWrite asks Application Default Credentials for the read-write
	// scope, which writes (Create, Compose, Delete) need; reads need only
	// the read-only scope, the default.
	ReadWrite bool
}

// Retry settings the storage client applies itself. Range reads are not
// retried by the client (the Downloader does that, resuming where a failed
// read stopped); metadata calls (Stat, List pages) are, a bounded number of
// times, because nothing above retries them.
const (
	metaAttempts       = 4
	metaBackoffInitial = 100 * time.Millisecond
	metaBackoffMax     = 5 * time.Second
)

// GCS is an object.Source over Google Cloud Storage, through
// cloud.google.com/go/storage over HTTP. Create it with NewGCS and Close it
// when done. It is safe for concurrent use.
//
// Range reads use the XML API with storage.RetryNever: a failed request is
// returned to the caller at once. The client still resumes a body that
// breaks mid-stream (a reset or early close) by itself: it re-requests the
// rest of the range pinned to the same generation, once per break, and only
// reports an error if that request fails. Reads ask for the stored bytes
// (no decompressive transcoding of gzip-encoded objects), so lengths and
// CRC32C match object.Attrs. The client checks CRC32C only on whole-object reads,
// never on ranges; the Downloader verifies the assembled object.
type GCS struct {
	client    *storage.Client
	transport *http.Transport // ours to close, or nil
}

var _ object.Source = (*GCS)(nil)

// NewGCS returns a GCS source configured by cfg.
func NewGCS(ctx context.Context, cfg GCSConfig) (*GCS, error) {
	ua := cfg.UserAgent
	if ua == "" {
		ua = "cacheagent"
	}
	maxIdle := cfg.MaxIdleConns
	if maxIdle <= 0 {
		maxIdle = 256
	}
	var opts []option.ClientOption
	if cfg.Endpoint != "" {
		ep, err := normalizeEndpoint(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		opts = append(opts, option.WithEndpoint(ep), option.WithoutAuthentication())
	}
	g := &GCS{}
	hc := cfg.HTTPClient
	if hc == nil {
		g.transport = newTransport(maxIdle)
		rt, err := authTransport(ctx, g.transport, cfg.Endpoint == "", ua, cfg.ReadWrite)
		if err != nil {
			return nil, err
		}
		hc = &http.Client{Transport: rt}
	}
	opts = append(opts, option.WithHTTPClient(hc))
	client, err := storage.NewClient(ctx, opts...)
	if err != nil {
		g.closeIdle()
		return nil, fmt.Errorf("fetch: new storage client: %w", err)
	}
	client.SetRetry(
		storage.WithMaxAttempts(metaAttempts),
		storage.WithBackoff(gax.Backoff{Initial: metaBackoffInitial, Max: metaBackoffMax, Multiplier: 2}),
	)
	g.client = client
	return g, nil
}

// authTransport wraps base with the user agent and, for Google's own
// endpoint (useADC and no emulator), Application Default Credentials of the
// read-only scope, or the read-write one.
func authTransport(ctx context.Context, base http.RoundTripper, useADC bool, ua string, write bool) (http.RoundTripper, error) {
	if !useADC || os.Getenv("STORAGE_EMULATOR_HOST") != "" {
		return &uaTransport{base: base, ua: ua}, nil
	}
	scope := storage.ScopeReadOnly
	if write {
		scope = storage.ScopeReadWrite
	}
	rt, err := htransport.NewTransport(ctx, base, option.WithScopes(scope), option.WithUserAgent(ua))
	if err != nil {
		return nil, fmt.Errorf("fetch: application default credentials: %w", err)
	}
	return rt, nil
}

// newTransport returns the HTTP transport for GCS traffic.
//
// HTTP/1.1 only: over HTTP/2 every range read of the process would be
// multiplexed onto one TCP connection to the storage host, sharing one
// congestion window and the connection's flow-control window, which caps
// throughput well below what many connections reach. Not measured against
// real GCS here (the emulator is plain HTTP); Apache Arrow's object_store
// measured HTTP/1.1 much faster than HTTP/2 against GCS and defaults to it
// (apache/arrow-rs#5194).
// Connections are not capped per host: the Downloader's budget is the cap.
func newTransport(maxIdle int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	var p http.Protocols
	p.SetHTTP1(true)
	t.Protocols = &p
	t.ForceAttemptHTTP2 = false
	t.MaxIdleConns = 0 // no global cap; per host below
	t.MaxIdleConnsPerHost = maxIdle
	t.MaxConnsPerHost = 0
	// The read buffer holds a response's headers; bodies are read into
	// the Downloader's buffers, which bufio bypasses once it is empty.
	// Whatever of a body arrived with the headers is copied out of it
	// first: with 64 KiB that was much of every small object (prefetch of
	// 20,000 × 100 KiB at 64 + 64: 3-5% more CPU, alternated; large
	// objects read alike either way).
	t.ReadBufferSize = 4 << 10
	t.WriteBufferSize = 16 << 10
	return t
}

// uaTransport sets the User-Agent header on every request.
type uaTransport struct {
	base http.RoundTripper
	ua   string
}

func (t *uaTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r2 := *r // RoundTrippers must not modify the caller's request
	r2.Header = r.Header.Clone()
	r2.Header.Set("User-Agent", t.ua)
	return t.base.RoundTrip(&r2)
}

// normalizeEndpoint turns "http://host:port" into
// "http://host:port/storage/v1/" and checks the URL.
func normalizeEndpoint(ep string) (string, error) {
	u, err := url.Parse(ep)
	if err != nil {
		return "", fmt.Errorf("fetch: endpoint %q: %w", ep, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("fetch: endpoint %q: want http(s)://host[:port][/storage/v1/]", ep)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/storage/v1/"
	} else if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u.String(), nil
}

// Close closes the client and its idle connections.
func (g *GCS) Close() error {
	err := g.client.Close()
	g.closeIdle()
	if err != nil {
		return fmt.Errorf("fetch: close storage client: %w", err)
	}
	return nil
}

func (g *GCS) closeIdle() {
	if g.transport != nil {
		g.transport.CloseIdleConnections()
	}
}

// handle returns the object handle for o, pinned to o.Generation if set.
func (g *GCS) handle(o object.Object) *storage.ObjectHandle {
	h := g.client.Bucket(o.Bucket).Object(o.Name)
	if o.Generation != 0 {
		h = h.Generation(o.Generation)
	}
	return h
}

// Stat returns o's attributes: its live generation, or o.Generation if
// non-zero.
func (g *GCS) Stat(ctx context.Context, o object.Object) (object.Attrs, error) {
	if err := checkGCSObject(o.Bucket, o.Name); err != nil {
		return object.Attrs{}, fmt.Errorf("stat %s: %w", o, err)
	}
	oa, err := g.handle(o).Attrs(ctx)
	if err != nil {
		return object.Attrs{}, fmt.Errorf("stat %s: %w", o, mapNotFound(err))
	}
	return gcsAttrs(oa), nil
}

// List yields the live objects whose names start with prefix, in name order.
func (g *GCS) List(ctx context.Context, bucket, prefix string) iter.Seq2[object.Attrs, error] {
	return func(yield func(object.Attrs, error) bool) {
		if err := checkGCSBucket(bucket); err != nil {
			yield(object.Attrs{}, fmt.Errorf("list gs://%s/%s: %w", bucket, prefix, err))
			return
		}
		q := &storage.Query{Prefix: prefix}
		if err := q.SetAttrSelection([]string{"Name", "Generation", "Size", "CRC32C", "Updated"}); err != nil {
			yield(object.Attrs{}, fmt.Errorf("list gs://%s/%s: %w", bucket, prefix, err))
			return
		}
		it := g.client.Bucket(bucket).Objects(ctx, q)
		for {
			oa, err := it.Next()
			if errors.Is(err, iterator.Done) {
				return
			}
			if err != nil {
				yield(object.Attrs{}, fmt.Errorf("list gs://%s/%s: %w", bucket, prefix, mapNotFound(err)))
				return
			}
			oa.Bucket = bucket
			if !yield(gcsAttrs(oa), nil) {
				return
			}
		}
	}
}

// gcsAttrs converts the client's attributes.
func gcsAttrs(oa *storage.ObjectAttrs) object.Attrs {
	return object.Attrs{
		Object:    object.Object{Bucket: oa.Bucket, Name: oa.Name, Generation: oa.Generation},
		Size:      oa.Size,
		CRC32C:    oa.CRC32C,
		HasCRC32C: true, // GCS keeps a CRC32C for every object
		Updated:   oa.Updated,
	}
}

// NewRangeReader reads n bytes at off of o, pinned to o.Generation when it
// is non-zero. If that generation no longer exists the error is
// object.ErrGenerationChanged and object.ErrNotFound; other HTTP errors stay reachable as
// *googleapi.Error through errors.As. n == 0 returns an empty reader without
// a request.
func (g *GCS) NewRangeReader(ctx context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	if err := checkGCSObject(o.Bucket, o.Name); err != nil {
		return nil, fmt.Errorf("read %s: %w", o, err)
	}
	if off < 0 || n < 0 {
		return nil, fmt.Errorf("read %s: invalid range %d+%d", o, off, n)
	}
	if n == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	h := g.handle(o).Retryer(storage.WithPolicy(storage.RetryNever)).ReadCompressed(true)
	r, err := h.NewRangeReader(ctx, off, n)
	if err != nil {
		return nil, fmt.Errorf("read %s at %d: %w", o, off, mapRangeErr(o, err))
	}
	if gen := r.Attrs.Generation; o.Generation != 0 && gen != 0 && gen != o.Generation {
		r.Close()
		return nil, fmt.Errorf("read %s: served generation %d: %w", o, gen, object.ErrGenerationChanged)
	}
	return &gcsReader{r: r, o: o}, nil
}

// gcsReader maps the errors of a storage.Reader.
type gcsReader struct {
	r *storage.Reader
	o object.Object
}

func (r *gcsReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("read %s: %w", r.o, mapRangeErr(r.o, err))
	}
	return n, err
}

func (r *gcsReader) Close() error { return r.r.Close() }

// mapNotFound adds object.ErrNotFound to the client's not-exist errors.
func mapNotFound(err error) error {
	if errors.Is(err, storage.ErrObjectNotExist) || errors.Is(err, storage.ErrBucketNotExist) {
		return fmt.Errorf("%w: %w", object.ErrNotFound, err)
	}
	return err
}

// mapRangeErr is mapNotFound for reads: a pinned generation that is gone
// was replaced or deleted, so it is also object.ErrGenerationChanged.
func mapRangeErr(o object.Object, err error) error {
	err = mapNotFound(err)
	if o.Generation != 0 && errors.Is(err, object.ErrNotFound) {
		return fmt.Errorf("%w: %w", object.ErrGenerationChanged, err)
	}
	return err
}
