package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/fleet/placement"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
	"github.com/cacheagent/cacheagent/tier"
)

// Defaults for the zero fields of ServerConfig.
const (
	DefaultMaxSkew    = 30 * time.Second
	DefaultHeartbeat  = 250 * time.Millisecond
	DefaultMaxWait    = 30 * time.Second
	DefaultWriteStall = 30 * time.Second
)

// Cache is what a Server serves from: a tier.Cache.
type Cache interface {
	Open(ctx context.Context, o object.Object, opts ...tier.OpenOption) (*tier.Handle, error)
}

// Forwarder reports whether this node is reading object o from a peer
// right now; a Source is one.
type Forwarder interface {
	Forwarding(o object.Object) bool
}

// ServerConfig configures NewServer.
type ServerConfig struct {
	// Key is the fleet's shared data-plane key, at least MinKeyLen bytes.
	// Required.
	Key []byte
	// Cache is the local cache served from. Required.
	Cache Cache
	// Buckets are the buckets peers may read (the daemon's sources);
	// requests for any other get 403. Empty allows none.
	Buckets []string
	// MaxSkew is how far a request's time may be from the server's clock.
	// Default 30s.
	MaxSkew time.Duration
	// Heartbeat is the interval of 102 Processing answers while a miss is
	// filled; keep it well under the requesters' FirstByteFloor. Default
	// 250ms.
	Heartbeat time.Duration
	// MaxWait bounds how long a request waits for the fill of a miss
	// (heartbeats keep the requester from timing out meanwhile): past it
	// the answer is 503 and the requester reads GCS. Default 30s.
	MaxWait time.Duration
	// WriteStall bounds each write of an answer (a heartbeat, a frame, a
	// piece of at most writePiece bytes): a requester that takes no bytes
	// for this long loses its connection, and the copy being sent to it is
	// let go. Default 30s.
	WriteStall time.Duration
	// ChunkSize is the fleet's chunk size (Config.ChunkSize): a chunk
	// request's range must lie within its chunk. Default
	// placement.DefaultChunkSize.
	ChunkSize int64
	// Forwarding, if set, is this node's Source: a request for an object
	// it is reading from a peer gets 409 (see the package doc, Loops).
	Forwarding Forwarder
	// Log receives warnings; nil discards them.
	Log *slog.Logger
	// CorruptForTest, if set, is called with every buffer of bytes before
	// it is sent (and turns off sendfile): tests flip bytes with it to play
	// a corrupt peer. Never set it outside tests.
	CorruptForTest func(o object.Object, off int64, p []byte)
}

// Server answers peers' range requests from the local cache. It is an
// http.Handler, safe for concurrent use; run it in an http.Server with a
// ReadHeaderTimeout and an IdleTimeout, on the fleet's peer_listen address.
// It bounds its own writes (ServerConfig.WriteStall), so leave
// WriteTimeout unset: it would cut long transfers.
type Server struct {
	// Immutable after NewServer.
	cfg  ServerConfig
	auth *verifier
	// buckets are the buckets served: the configured ones, and those
	// AllowBucket adds.
	buckets   map[string]bool
	bucketsMu sync.RWMutex // guards buckets
	log       *slog.Logger
	now       func() time.Time // the clock requests' times are checked against

	bytes    atomic.Int64
	outcomes [numOutcomes]atomic.Int64
}

var (
	_ http.Handler = (*Server)(nil)
	_ Cache        = (*tier.Cache)(nil)
)

// NewServer returns a Server configured by cfg. It fails with ErrConfig or
// ErrBadKey.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := checkKey(cfg.Key); err != nil {
		return nil, err
	}
	if cfg.Cache == nil {
		return nil, fmt.Errorf("%w: nil Cache", ErrConfig)
	}
	if cfg.MaxSkew < 0 || cfg.Heartbeat < 0 || cfg.MaxWait < 0 || cfg.WriteStall < 0 || cfg.ChunkSize < 0 {
		return nil, fmt.Errorf("%w: negative MaxSkew, Heartbeat, MaxWait, WriteStall or ChunkSize", ErrConfig)
	}
	setDefault(&cfg.MaxWait, DefaultMaxWait)
	setDefault(&cfg.WriteStall, DefaultWriteStall)
	setDefault(&cfg.ChunkSize, placement.DefaultChunkSize)
	if cfg.MaxSkew == 0 {
		cfg.MaxSkew = DefaultMaxSkew
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	cfg.Key = slices.Clone(cfg.Key)
	s := &Server{cfg: cfg, buckets: make(map[string]bool), log: cfg.Log, now: time.Now}
	for _, b := range cfg.Buckets {
		s.buckets[b] = true
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.auth = newVerifier(cfg.Key, cfg.MaxSkew)
	return s, nil
}

// AllowBucket lets peers read bucket from here too (a bucket this node
// saved or restored a checkpoint in).
func (s *Server) AllowBucket(bucket string) {
	s.bucketsMu.Lock()
	s.buckets[bucket] = true
	s.bucketsMu.Unlock()
}

// serves reports whether peers may read bucket from here.
func (s *Server) serves(bucket string) bool {
	s.bucketsMu.RLock()
	defer s.bucketsMu.RUnlock()
	return s.buckets[bucket]
}

// ServeHTTP answers one request (see the package doc for the protocol).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	out, err := s.serve(w, r)
	s.outcomes[out].Add(1)
	switch {
	case err == nil || out == outcomeOK:
	case out == outcomeAuth:
		// Why is for the log: a stranger learns nothing, not even the
		// server's clock.
		s.log.Debug("peer: request refused", "remote", r.RemoteAddr, "err", err)
		http.Error(w, ErrAuth.Error(), out.status())
	default:
		http.Error(w, err.Error(), out.status())
	}
}

// serve does ServeHTTP's work and says how it ended; it has written the
// answer itself when the outcome is outcomeOK or err is nil.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) (outcome, error) {
	switch {
	case r.URL.Path != Path && r.URL.Path != BatchPath:
		return outcomeNotFound, fmt.Errorf("no endpoint %q", r.URL.Path)
	case r.Method != http.MethodGet:
		return outcomeBadRequest, fmt.Errorf("%w: method %s", ErrBadRequest, r.Method)
	}
	if err := s.auth.verify(r, s.now()); errors.Is(err, ErrBusy) {
		return outcomeBusy, err
	} else if err != nil {
		return outcomeAuth, err
	}
	if r.URL.Path == BatchPath {
		return s.serveBatch(w, r)
	}
	req, err := parseRequest(r.URL.RawQuery)
	if err != nil {
		return outcomeBadRequest, err
	}
	if !s.serves(req.obj.Bucket) {
		return outcomeForbidden, fmt.Errorf("bucket %q is not served", req.obj.Bucket)
	}
	if req.chunked {
		return s.serveChunk(w, r, req)
	}
	// A cached-only request joins no fill, so it cannot close a cycle.
	if f := s.cfg.Forwarding; f != nil && !req.cached && f.Forwarding(req.obj) {
		return outcomeLoop, fmt.Errorf("%s is being read from a peer here", req.obj)
	}
	var opts []tier.OpenOption
	if req.cached {
		opts = append(opts, tier.CachedOnly())
	}
	h, out, err := s.openFor(w, r, req.obj, opts...)
	if h == nil {
		return out, err
	}
	defer h.Close()
	return s.sendRange(w, h, req, 0)
}

// serveChunk answers a chunk request: from a whole copy of the object
// held here, else from this node's copy of the chunk, filled from the
// origin on a miss unless the request is cached-only. It never fills the
// whole object, and the fill never waits on a peer's, so no loop check is
// needed.
func (s *Server) serveChunk(w http.ResponseWriter, r *http.Request, req request) (outcome, error) {
	cs := s.cfg.ChunkSize
	start := int64(req.chunk) * cs
	if req.off < start || req.off-start > cs || req.n > cs-(req.off-start) {
		return outcomeBadRequest, fmt.Errorf("%w: range %d+%d is not within chunk %d of %d bytes", ErrBadRequest,
			req.off, req.n, req.chunk, cs)
	}
	if h, err := s.cfg.Cache.Open(r.Context(), req.obj, tier.CachedOnly()); err == nil {
		defer h.Close()
		if h.Attrs().Generation == req.obj.Generation {
			return s.sendRange(w, h, req, 0)
		}
	}
	var opts []tier.OpenOption
	if req.cached {
		opts = append(opts, tier.CachedOnly())
	}
	h, out, err := s.openFor(w, r, chunkObject(req.obj, req.chunk), opts...)
	if h == nil {
		return out, err
	}
	defer h.Close()
	return s.sendRange(w, h, req, start)
}

// openFor opens o for a peer's request, filling a miss on a context marked
// WithNoForward. The fill does not wait for space (tier.NoSpaceWait): this
// node's space may be held by its own readers, who may be waiting on the
// requester. It returns the handle, or nil and the request's outcome.
func (s *Server) openFor(w http.ResponseWriter, r *http.Request, o object.Object, opts ...tier.OpenOption) (*tier.Handle, outcome, error) {
	h, err := s.open(WithNoForward(r.Context()), w, o, append(opts, tier.NoSpaceWait())...)
	switch {
	case r.Context().Err() != nil:
		if err == nil {
			h.Close()
		}
		return nil, outcomeGone, nil // nobody to answer
	case errors.Is(err, tier.ErrNoSpace), errors.Is(err, errMaxWait):
		return nil, outcomeBusy, fmt.Errorf("%s: %w", o, err) // the requester reads GCS
	case errors.Is(err, tier.ErrNotCached):
		return nil, outcomeNotFound, fmt.Errorf("%s: not cached here", o)
	case errors.Is(err, object.ErrNotFound), errors.Is(err, object.ErrGenerationChanged):
		return nil, outcomeNotFound, fmt.Errorf("%s: %w", o, object.ErrNotFound)
	case err != nil:
		s.log.Warn("peer: fill for a peer failed", "object", o.String(), "err", err)
		return nil, outcomeError, fmt.Errorf("open %s: %w", o, err)
	}
	return h, 0, nil
}

// sendRange checks that h, a copy of req's object (or of its chunk that
// starts at byte base of the object), has req's generation and range, and
// sends the range.
func (s *Server) sendRange(w http.ResponseWriter, h *tier.Handle, req request, base int64) (outcome, error) {
	off := req.off - base
	if a := h.Attrs(); a.Generation != req.obj.Generation {
		return outcomeNotFound, fmt.Errorf("%s: cache holds generation %d", req.obj, a.Generation)
	} else if off > a.Size || req.n > a.Size-off {
		return outcomeRange, fmt.Errorf("range %d+%d past the end of %s (%d bytes)", req.off, req.n, req.obj, base+a.Size)
	}
	return s.send(w, h, req, off)
}

// errMaxWait ends a request whose fill took longer than MaxWait.
var errMaxWait = errors.New("peer: the fill took longer than the server waits")

// open opens o through the cache, answering 102 Processing every
// Heartbeat while that waits for a fill, for at most MaxWait. It waits for
// the goroutine it starts.
func (s *Server) open(ctx context.Context, w http.ResponseWriter, o object.Object, opts ...tier.OpenOption) (*tier.Handle, error) {
	type result struct {
		h   *tier.Handle
		err error
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ch := make(chan result, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		h, err := s.cfg.Cache.Open(ctx, o, opts...)
		ch <- result{h, err}
		close(done)
	})
	if s.beat(w, done) {
		cancel(errMaxWait) // the fill goes on, detached; this request does not wait for it
		if res := <-ch; res.err == nil {
			return res.h, nil // it ended just now
		}
		return nil, fmt.Errorf("%w (%v)", errMaxWait, s.cfg.MaxWait)
	}
	res := <-ch
	return res.h, res.err
}

// beat answers 102 Processing every Heartbeat until done is closed or
// MaxWait has passed, and reports whether MaxWait passed first.
func (s *Server) beat(w http.ResponseWriter, done <-chan struct{}) (expired bool) {
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	limit := time.NewTimer(s.cfg.MaxWait)
	defer limit.Stop()
	for {
		select {
		case <-done:
			return false
		case <-t.C:
			s.progress(w)
			w.WriteHeader(http.StatusProcessing) // the header map is still empty
		case <-limit.C:
			return true
		}
	}
}

// send writes the 200 answer: req's bytes, from offset off of h's file.
func (s *Server) send(w http.ResponseWriter, h *tier.Handle, req request, off int64) (outcome, error) {
	// A second descriptor on the handle's file (kept from eviction by h),
	// so the response writer can sendfile from it.
	f, err := os.Open(h.Path())
	if err != nil {
		return outcomeError, fmt.Errorf("open cached %s: %w", req.obj, err)
	}
	defer f.Close()
	if _, err := f.Seek(h.Offset()+off, io.SeekStart); err != nil { // a packed object starts inside its segment
		return outcomeError, fmt.Errorf("seek cached %s: %w", req.obj, err)
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Length", strconv.FormatInt(req.n, 10))
	hd.Set(headerGeneration, strconv.FormatInt(req.obj.Generation, 10))
	w.WriteHeader(http.StatusOK)
	var src io.Reader = f
	if c := s.cfg.CorruptForTest; c != nil {
		src = &corrupting{r: src, o: req.obj, off: req.off, fn: c}
	}
	n, err := s.copyOut(w, src, req.n)
	s.bytes.Add(n)
	if err != nil {
		// The status is sent: the requester sees a short body.
		return outcomeOK, fmt.Errorf("send %s: %w", req.obj, err)
	}
	return outcomeOK, nil
}

// writePiece is the most bytes of an answer written under one write
// deadline: small enough to take well under WriteStall on any link, large
// enough that moving the deadline costs nothing.
const writePiece = 1 << 20

// progress moves w's write deadline to WriteStall from now. (Outside a
// net/http server, a ResponseRecorder say, there is none to move.)
func (s *Server) progress(w http.ResponseWriter) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteStall))
}

// copyOut writes n bytes of src to w in pieces of at most writePiece, each
// under a write deadline of WriteStall, and returns how many it wrote. A
// src that ends short (a file truncated on disk) is an error wrapping
// io.ErrUnexpectedEOF. From an *os.File, each piece is a sendfile.
func (s *Server) copyOut(w http.ResponseWriter, src io.Reader, n int64) (int64, error) {
	var done int64
	for done < n {
		s.progress(w)
		m, err := io.CopyN(w, src, min(writePiece, n-done))
		done += m
		if errors.Is(err, io.EOF) {
			return done, fmt.Errorf("%d of %d bytes: %w", done, n, io.ErrUnexpectedEOF)
		}
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// corrupting passes its reader's bytes through the CorruptForTest hook.
type corrupting struct {
	r   io.Reader
	o   object.Object
	off int64
	fn  func(object.Object, int64, []byte)
}

func (c *corrupting) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.fn(c.o, c.off, p[:n])
		c.off += int64(n)
	}
	return n, err
}

// Stats returns a snapshot of the Server's counters since NewServer.
func (s *Server) Stats() stats.PeerServes {
	st := stats.PeerServes{ServedBytes: s.bytes.Load(), ServedRequests: make(map[string]int64, numOutcomes)}
	for i := range s.outcomes {
		st.ServedRequests[outcome(i).String()] = s.outcomes[i].Load()
	}
	return st
}
