package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/fleet/placement"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// Defaults for the zero fields of Config.
const (
	DefaultMaxPeers        = 2
	DefaultConnectTimeout  = time.Second
	DefaultFirstByteFloor  = time.Second
	DefaultFirstByteFactor = 4
	DefaultFirstByteMax    = 10 * time.Second
	DefaultStallTimeout    = 2 * time.Second
	DefaultCoolDown        = 3 * time.Second
	DefaultFallbackRate    = 50
	DefaultFallbackBurst   = 100
	DefaultBatchBelow      = 1 << 20
	DefaultBatchMax        = 64
	DefaultBatchInflight   = 4
	DefaultBatchTimeout    = time.Minute
)

// Config configures New. The zero value of each field but Key and Owners
// selects its default; negative values are invalid.
type Config struct {
	// Key is the fleet's shared data-plane key, at least MinKeyLen bytes.
	// Required.
	Key []byte
	// Owners ranks the candidates for each object. Required.
	Owners Owners
	// MaxPeers is how many candidates a range read tries before the
	// origin. Default 2.
	MaxPeers int
	// ConnectTimeout bounds connecting to a peer. Default 1s.
	ConnectTimeout time.Duration
	// FirstByteFloor, FirstByteFactor and FirstByteMax set how long a
	// request waits for a peer's next answer (a heartbeat or the
	// response): FirstByteFactor times the peer's estimated p99, at least
	// FirstByteFloor and at most FirstByteMax. Defaults 1s, 4, 10s.
	FirstByteFloor  time.Duration
	FirstByteFactor float64
	FirstByteMax    time.Duration
	// StallTimeout aborts a peer's body that delivers no bytes for this
	// long. Default 2s.
	StallTimeout time.Duration
	// CoolDown is how long a peer that refused, timed out or answered
	// wrongly is skipped without a request. Default 3s.
	CoolDown time.Duration
	// FallbackRate and FallbackBurst size the token bucket of range reads
	// sent to the origin after a peer failed or was skipped: tokens per
	// second and bucket size. Defaults 50 and 100.
	FallbackRate  float64
	FallbackBurst int
	// TLS, if set, is the client side of the data plane's TLS (TLS.Client
	// of NewTLS): requests go over https, and a peer must prove it holds
	// the fleet key. Every member must agree on it. Nil: plain HTTP.
	TLS *tls.Config
	// ChunkSize is the unit of placement of large objects: an object of
	// more than ChunkSize bytes is placed chunk by chunk (see the package
	// doc, Ownership). Every member of a fleet must use the same value.
	// Default placement.DefaultChunkSize (8 MiB).
	ChunkSize int64
	// BatchBelow: whole objects of at most this many bytes read from the
	// same owner at about the same time travel in batch requests, up to
	// MaxBatch objects to one (see the package doc, Batches). Default 1
	// MiB; negative sends every object in a request of its own.
	BatchBelow int64
	// BatchInflight is how many batch requests may be in flight to one
	// peer; reads that find them all busy wait for the next, together.
	// Default 4.
	BatchInflight int
	// BatchMax is the most objects a batch request asks for, at most
	// MaxBatch. Default MaxBatch (64).
	BatchMax int
	// BatchTimeout bounds a batch request from its start to its last
	// frame, keepalives or not: the reads it has not answered by then
	// fail, and go on as a single read would. Default 1m.
	BatchTimeout time.Duration
}

// withDefaults validates c and fills in its zero fields.
func (c Config) withDefaults() (Config, error) {
	if err := checkKey(c.Key); err != nil {
		return c, err
	}
	if c.Owners == nil {
		return c, fmt.Errorf("%w: nil Owners", ErrConfig)
	}
	if c.MaxPeers < 0 || c.ConnectTimeout < 0 || c.FirstByteFloor < 0 || c.FirstByteFactor < 0 ||
		c.FirstByteMax < 0 || c.StallTimeout < 0 || c.CoolDown < 0 || c.FallbackRate < 0 || c.FallbackBurst < 0 ||
		c.ChunkSize < 0 || c.BatchInflight < 0 || c.BatchMax < 0 || c.BatchMax > MaxBatch || c.BatchTimeout < 0 {
		return c, fmt.Errorf("%w: negative value", ErrConfig)
	}
	c.Key = slices.Clone(c.Key)
	setDefault(&c.MaxPeers, DefaultMaxPeers)
	setDefault(&c.ConnectTimeout, DefaultConnectTimeout)
	setDefault(&c.FirstByteFloor, DefaultFirstByteFloor)
	setDefault(&c.FirstByteFactor, DefaultFirstByteFactor)
	setDefault(&c.FirstByteMax, max(DefaultFirstByteMax, c.FirstByteFloor))
	setDefault(&c.StallTimeout, DefaultStallTimeout)
	setDefault(&c.CoolDown, DefaultCoolDown)
	setDefault(&c.FallbackRate, DefaultFallbackRate)
	setDefault(&c.FallbackBurst, DefaultFallbackBurst)
	setDefault(&c.ChunkSize, placement.DefaultChunkSize)
	setDefault(&c.BatchBelow, DefaultBatchBelow)
	setDefault(&c.BatchInflight, DefaultBatchInflight)
	setDefault(&c.BatchMax, DefaultBatchMax)
	setDefault(&c.BatchTimeout, DefaultBatchTimeout)
	if c.FirstByteMax < c.FirstByteFloor {
		return c, fmt.Errorf("%w: FirstByteMax %v < FirstByteFloor %v", ErrConfig, c.FirstByteMax, c.FirstByteFloor)
	}
	return c, nil
}

// setDefault sets *v to d if it is zero.
func setDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Source is an object.Source that reads ranges from the objects' owners in
// the fleet, falling back to its origin (see the package doc). Stat and
// List go to the origin. Create it with New; it is safe for concurrent use.
type Source struct {
	// Immutable after New.
	origin    object.Source
	cfg       Config
	transport *http.Transport
	client    *http.Client
	limiter   *rate.Limiter
	scheme    string           // of peer URLs: http, or https with Config.TLS
	now       func() time.Time // the clock for signing and cool-downs

	// cache is this node's cache, where the chunks it owns are kept (nil
	// until SetCache: those reads go to the origin meanwhile).
	cache atomic.Pointer[Cache]
	attrs attrsCache

	peersMu sync.Mutex
	peers   map[string]*peerState // by member name; guarded by peersMu

	fwdMu sync.Mutex
	fwd   map[object.Object]int // peer reads in flight per object; guarded by fwdMu

	// Batch requests in flight (goBatch): closing ends at Close, which
	// then waits for bg.
	closing   context.Context
	stopBatch context.CancelFunc
	bgMu      sync.Mutex
	closed    bool // guarded by bgMu
	bg        sync.WaitGroup

	originBytes   atomic.Int64
	batches       atomic.Int64 // batch requests sent
	batched       atomic.Int64 // objects asked for in them
	fallbacks     atomic.Int64
	fallbackWaits atomic.Int64
	errs          [numCauses]atomic.Int64
	failovers     waits // time reads lost to peers that failed them
}

var (
	_ object.Source = (*Source)(nil)
	_ Forwarder     = (*Source)(nil)
)

// New returns a Source over origin configured by cfg. It fails with
// ErrConfig or ErrBadKey.
func New(origin object.Source, cfg Config) (*Source, error) {
	if origin == nil {
		return nil, fmt.Errorf("%w: nil origin", ErrConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &http.Transport{
		Proxy:               nil, // peers are never reached through a proxy
		DialContext:         (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		TLSClientConfig:     cfg.TLS,
		TLSHandshakeTimeout: cfg.ConnectTimeout,
	}
	scheme := "http"
	if cfg.TLS != nil {
		scheme = "https"
	}
	closing, stop := context.WithCancel(context.Background())
	return &Source{
		origin: origin, cfg: cfg, transport: t, scheme: scheme,
		client:  &http.Client{Transport: t, CheckRedirect: noRedirect},
		limiter: rate.NewLimiter(rate.Limit(cfg.FallbackRate), cfg.FallbackBurst),
		now:     time.Now,
		peers:   make(map[string]*peerState),
		fwd:     make(map[object.Object]int),
		closing: closing, stopBatch: stop,
	}, nil
}

// noRedirect makes the client return a redirect as the answer: a peer
// never redirects, and one that does answers wrongly.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// SetCache tells the Source the cache this node keeps its chunks in: the
// one its Downloader fills (created after the Source, which it reads
// through). Until it is called, this node's own chunks are read from the
// origin.
func (s *Source) SetCache(c Cache) { s.cache.Store(&c) }

// Close ends the batch requests in flight (the reads they carry fail and
// go on as single reads would), waits for them, and closes the Source's
// idle connections to peers. Readers still open keep working.
func (s *Source) Close() error {
	s.bgMu.Lock()
	s.closed = true
	s.bgMu.Unlock()
	s.stopBatch()
	s.bg.Wait()
	s.transport.CloseIdleConnections()
	return nil
}

// Stat returns the origin's attributes of o, or those of a chunk for a
// chunk copy's name (see the package doc, Ownership).
func (s *Source) Stat(ctx context.Context, o object.Object) (object.Attrs, error) {
	if whole, i, ok := parseChunk(o); ok {
		return s.chunkAttrs(ctx, o, whole, i)
	}
	return s.origin.Stat(ctx, o)
}

// List lists the origin's objects.
func (s *Source) List(ctx context.Context, bucket, prefix string) iter.Seq2[object.Attrs, error] {
	return s.origin.List(ctx, bucket, prefix)
}

// NewRangeReader reads n bytes at off of exactly generation o.Generation:
// from the object's owners, up to Config.MaxPeers of them, then from the
// origin; for a chunked object (one a Downloader reads, of more than
// Config.ChunkSize bytes), from each chunk's owners. Reads on a context
// marked WithNoForward or fetch.Reread, reads of this node's own objects
// and unpinned (generation 0) reads go to the origin directly.
func (s *Source) NewRangeReader(ctx context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	if whole, i, ok := parseChunk(o); ok {
		return s.readChunkFill(ctx, whole, i, off, n)
	}
	req := request{obj: o, off: off, n: n}
	if n <= 0 || o.Generation <= 0 || fetch.Reread(ctx) || req.check() != nil {
		return s.fromOrigin(ctx, o, off, n)
	}
	if size, ok := sizeOf(ctx); ok && s.chunked(size) && !NoForward(ctx) {
		return s.readChunked(ctx, o, off, n)
	}
	cands := s.cfg.Owners.Owners(ObjectKey(o))
	if NoForward(ctx) || len(cands) == 0 || cands[0].Self {
		// This node fills o from the origin: a member that holds it
		// already (the owner before a membership change, say) saves
		// that read.
		req.cached = true
		if r := s.fromHolder(ctx, cands, req); r != nil {
			return r, nil
		}
		return s.fromOrigin(ctx, o, off, n)
	}
	return s.fromOwners(ctx, cands, req)
}

// fromOwners reads req from the candidates, best first, up to
// Config.MaxPeers of them and stopping at this node, then from the origin
// (a fallback, limited by the token bucket, when a peer was tried).
func (s *Source) fromOwners(ctx context.Context, cands []Candidate, req request) (io.ReadCloser, error) {
	o := req.obj
	tried := 0
	var start time.Time // of the first request to a peer that failed
	for i, c := range cands {
		if c.Self || tried == s.cfg.MaxPeers {
			break
		}
		tried++
		p := s.peer(c.Name)
		if p.cooling(s.now()) {
			continue
		}
		// The owner fills a miss; the members after it serve only what
		// they hold (their fill would be this read's wait, and no fewer
		// origin bytes than reading it here).
		req.cached = i > 0
		t0 := time.Now()
		r, cause, err := s.fromPeer(ctx, c, p, req)
		if err == nil {
			if !start.IsZero() {
				s.failovers.add(time.Since(start))
			}
			return r, nil
		}
		if start.IsZero() && cause != CauseNotFound {
			start = t0
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("peer %s: read %s: %w", c.Name, o, context.Cause(ctx))
		}
		if cause == CauseNotFound {
			if !req.cached {
				s.errs[cause].Add(1)
			}
			break // the origin has the last word on a generation
		}
		s.errs[cause].Add(1)
	}
	if tried > 0 {
		s.fallbacks.Add(1)
		if !s.limiter.Allow() {
			s.fallbackWaits.Add(1)
			if err := s.limiter.Wait(ctx); err != nil {
				return nil, fmt.Errorf("peer: read %s: waiting to fall back to the origin: %w", o, err)
			}
		}
	}
	if !start.IsZero() {
		s.failovers.add(time.Since(start))
	}
	return s.fromOrigin(ctx, o, req.off, req.n)
}

// fromHolder asks the best-ranked other member that is not cooling down
// for req (cached only: it never fills or forwards, so no request cycle
// can form) and returns its reader, or nil if it holds no copy or fails.
func (s *Source) fromHolder(ctx context.Context, cands []Candidate, req request) io.ReadCloser {
	for _, c := range cands {
		if c.Self {
			continue
		}
		p := s.peer(c.Name)
		if p.cooling(s.now()) {
			return nil
		}
		r, cause, err := s.fromPeer(ctx, c, p, req)
		if err == nil {
			return r
		}
		if cause != CauseNotFound && ctx.Err() == nil {
			s.errs[cause].Add(1)
		}
		return nil
	}
	return nil
}

// fromOrigin reads the range from the origin, counting its bytes.
func (s *Source) fromOrigin(ctx context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	r, err := s.origin.NewRangeReader(ctx, o, off, n)
	if err != nil {
		return nil, err
	}
	return &countingReader{ReadCloser: r, n: &s.originBytes}, nil
}

// countingReader adds the bytes read through it to n.
type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	m, err := r.ReadCloser.Read(p)
	r.n.Add(int64(m))
	return m, err
}

// peer returns the state of the peer named name, creating it.
func (s *Source) peer(name string) *peerState {
	s.peersMu.Lock()
	defer s.peersMu.Unlock()
	p := s.peers[name]
	if p == nil {
		p = &peerState{}
		s.peers[name] = p
	}
	return p
}

// ownedHere reports whether a fill of a goes to the origin without trying
// a peer for its object as a whole: a chunk copy (its fill is the chunk's
// origin read), or an object of at most one chunk with no candidate or
// this node ranked first. A chunked object's fill reads from the owners
// of its chunks.
func (s *Source) ownedHere(a object.Attrs) bool {
	if _, _, ok := parseChunk(a.Object); ok {
		return true
	}
	if s.chunked(a.Size) {
		return false
	}
	cs := s.cfg.Owners.Owners(ObjectKey(a.Object))
	return len(cs) == 0 || cs[0].Self
}

// Forwarding reports whether this node is reading o from a peer: a
// Downloader's Local fill of o is running, or a range read of o from a
// peer is in flight (requested, or its reader not yet closed), other than
// a read of a copy the peer holds (cached=1), which waits on no fill.
func (s *Source) Forwarding(o object.Object) bool {
	s.fwdMu.Lock()
	defer s.fwdMu.Unlock()
	return s.fwd[o] > 0
}

// forward counts a peer read of o in flight until the returned func is
// called.
func (s *Source) forward(o object.Object) (done func()) {
	s.fwdMu.Lock()
	s.fwd[o]++
	s.fwdMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.fwdMu.Lock()
			if s.fwd[o]--; s.fwd[o] == 0 {
				delete(s.fwd, o)
			}
			s.fwdMu.Unlock()
		})
	}
}

// Stats returns a snapshot of the Source's counters.
func (s *Source) Stats() stats.PeerReads {
	st := stats.PeerReads{
		PeerBytes:      make(map[string]int64),
		OriginBytes:    s.originBytes.Load(),
		PeerErrors:     make(map[string]int64, numCauses),
		Fallbacks:      s.fallbacks.Load(),
		FallbackWaits:  s.fallbackWaits.Load(),
		Batches:        s.batches.Load(),
		BatchedObjects: s.batched.Load(),
	}
	var sum, longest time.Duration
	st.Failovers, sum, longest = s.failovers.snapshot()
	st.FailoverSeconds, st.FailoverMaxSeconds = sum.Seconds(), longest.Seconds()
	for i := range s.errs {
		st.PeerErrors[Cause(i).String()] = s.errs[i].Load()
	}
	s.peersMu.Lock()
	for name, p := range s.peers {
		st.PeerBytes[name] = p.bytes.Load()
	}
	s.peersMu.Unlock()
	return st
}

// waits accumulates waits: how many, their sum and their maximum. Safe for
// concurrent use.
type waits struct {
	n, sum, max atomic.Int64
}

// add records one wait of d.
func (w *waits) add(d time.Duration) {
	w.n.Add(1)
	w.sum.Add(int64(d))
	for {
		m := w.max.Load()
		if int64(d) <= m || w.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// snapshot returns the count, the sum and the maximum.
func (w *waits) snapshot() (int64, time.Duration, time.Duration) {
	return w.n.Load(), time.Duration(w.sum.Load()), time.Duration(w.max.Load())
}

// errors used as cancellation causes of peer requests.
var (
	errFirstByte = errors.New("peer: no answer within the first-byte timeout")
	errStalled   = errors.New("peer: body stalled")
)
