package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// fromPeer asks candidate c (state p) for req's bytes. On success it
// returns the body as a reader; otherwise why the peer failed (the peer is
// cooled down for refusals, timeouts and wrong answers).
func (s *Source) fromPeer(ctx context.Context, c Candidate, p *peerState, req request) (io.ReadCloser, Cause, error) {
	if s.batchable(ctx, req) {
		return s.fromBatch(ctx, c, p, req)
	}
	done := func() {}
	// A cached-only read waits on no fill, and a chunk's owner fills it
	// from the origin: neither can be part of a cycle.
	if !req.cached && !req.chunked {
		done = s.forward(req.obj)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	r, cause, err := s.ask(rctx, cancel, c, p, req)
	if err != nil {
		cancel(nil)
		done()
		if ctx.Err() == nil && cause != CauseNotFound && cause != CauseLoop {
			p.cool(s.now(), s.cfg.CoolDown)
		}
		return nil, cause, err
	}
	r.done = func() {
		cancel(nil)
		done()
	}
	r.fail = func(since time.Duration) {
		if ctx.Err() != nil {
			return // the caller gave up: not the peer's failure
		}
		cause := CauseBadResponse // a body cut short
		if errors.Is(context.Cause(rctx), errStalled) {
			cause = CauseTimeout
		}
		s.errs[cause].Add(1)
		s.failovers.add(since) // the Downloader retries the rest at once
		p.cool(s.now(), s.cfg.CoolDown)
	}
	return r, 0, nil
}

// ask sends the request on rctx (cancel cancels it) and checks the answer.
func (s *Source) ask(rctx context.Context, cancel context.CancelCauseFunc, c Candidate, p *peerState, req request) (*peerReader, Cause, error) {
	resp, cause, err := s.roundTrip(rctx, cancel, c, p, Path+"?"+req.query())
	if err != nil {
		return nil, cause, err
	}
	if cause, err := check(resp, req); err != nil {
		drainClose(resp.Body, cancel, s.cfg.StallTimeout)
		return nil, cause, fmt.Errorf("peer %s: %s: %w", c.Name, req.obj, err)
	}
	return &peerReader{body: resp.Body, p: p, name: c.Name, o: req.obj,
		stall: time.AfterFunc(s.cfg.StallTimeout, func() { cancel(errStalled) }),
		wait:  s.cfg.StallTimeout, last: time.Now()}, 0, nil
}

// maxDrain bounds what drainClose reads of an answer nobody uses.
const maxDrain = 16 << 10

// drainClose reads the rest of an answer the client will not use (at most
// maxDrain bytes) and closes it. A body read to its end gives its
// connection back to the pool; one closed before takes the connection
// along, and the next request to that peer pays a TCP and a TLS
// handshake. Refusals are common: every cached-only ask that misses is a
// 404, and with small objects those handshakes were a fifth of a fleet
// node's CPU. A body that stalls for wait ends its request (cancel
// cancels it) rather than hold the caller.
func drainClose(body io.ReadCloser, cancel context.CancelCauseFunc, wait time.Duration) {
	stall := time.AfterFunc(wait, func() { cancel(errStalled) })
	io.CopyN(io.Discard, body, maxDrain)
	stall.Stop()
	body.Close()
}

// roundTrip sends a signed GET of uri (path and query) to c on rctx
// (cancel cancels it) and returns the answer, waiting for it at most the
// peer's first-byte timeout from the request and from each 102 Processing.
func (s *Source) roundTrip(rctx context.Context, cancel context.CancelCauseFunc, c Candidate, p *peerState, uri string) (*http.Response, Cause, error) {
	hr, err := http.NewRequestWithContext(rctx, http.MethodGet, s.scheme+"://"+c.Addr+uri, nil)
	if err != nil {
		return nil, CauseBadResponse, fmt.Errorf("peer %s: %w", c.Name, err)
	}
	if err := sign(s.cfg.Key, hr, s.now()); err != nil {
		return nil, CauseRefused, err
	}
	// The first-byte timer runs from the request to its first event, and
	// again from each heartbeat to the next event.
	wait := p.firstByteTimeout(s.cfg.FirstByteFloor, s.cfg.FirstByteMax, s.cfg.FirstByteFactor)
	timer := time.AfterFunc(wait, func() { cancel(errFirstByte) })
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	event := func() {
		now := time.Now().UnixNano()
		p.observe(time.Duration(now - last.Swap(now)))
	}
	hr = hr.WithContext(httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{
		Got1xxResponse: func(int, textproto.MIMEHeader) error {
			event()
			timer.Reset(wait)
			fetch.Alive(rctx) // the owner is filling: not a stall
			return nil
		},
	}))
	resp, err := s.client.Do(hr)
	timer.Stop()
	if err != nil {
		return nil, classify(rctx, err), fmt.Errorf("peer %s: %w", c.Name, err)
	}
	event()
	return resp, 0, nil
}

// errBadAnswer means a peer answered something other than what was asked.
var errBadAnswer = errors.New("peer: wrong answer")

// check accepts only a 200 with exactly req's length of req's generation.
func check(resp *http.Response, req request) (Cause, error) {
	if resp.StatusCode != http.StatusOK {
		return causeOf(resp.StatusCode), fmt.Errorf("%w: status %s", errBadAnswer, resp.Status)
	}
	if resp.ContentLength != req.n {
		return CauseBadResponse, fmt.Errorf("%w: %d bytes, asked %d", errBadAnswer, resp.ContentLength, req.n)
	}
	if g := resp.Header.Get(headerGeneration); g != strconv.FormatInt(req.obj.Generation, 10) {
		return CauseBadResponse, fmt.Errorf("%w: generation %.24q", errBadAnswer, g)
	}
	return 0, nil
}

// classify says why a request that got no answer failed.
func classify(rctx context.Context, err error) Cause {
	if c := context.Cause(rctx); errors.Is(c, errFirstByte) {
		return CauseTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return CauseTimeout
	}
	// TLS: the peer's certificate is not the fleet's, or the peer refused
	// ours with an alert (crypto/tls reports a received alert as a
	// net.OpError of Op "remote error").
	var cve *tls.CertificateVerificationError
	var oe *net.OpError
	if errors.As(err, &cve) || errors.As(err, &oe) && oe.Op == "remote error" {
		return CauseAuth
	}
	return CauseRefused // refused, reset, unreachable: the peer could not be talked to
}

// peerReader is a peer's body. A stall timer cancels the request when no
// bytes come for the stall timeout; errors wrap io.ErrUnexpectedEOF, which
// the fetch.Downloader retries from the last byte it wrote.
type peerReader struct {
	body  io.ReadCloser
	stall *time.Timer
	wait  time.Duration
	p     *peerState
	name  string
	o     object.Object
	last  time.Time // of the last bytes received (the response, at first)
	// Set by fromPeer: done ends the request and the forward; fail counts
	// a failure of the body against the peer, given the time since its
	// last bytes.
	done func()
	fail func(since time.Duration)

	once sync.Once
}

func (r *peerReader) Read(b []byte) (int, error) {
	n, err := r.body.Read(b)
	if n > 0 {
		r.stall.Reset(r.wait)
		r.p.bytes.Add(int64(n))
		r.last = time.Now()
	}
	if err == nil || err == io.EOF {
		return n, err
	}
	r.fail(time.Since(r.last))
	return n, fmt.Errorf("peer %s: read %s: %w: %w", r.name, r.o, io.ErrUnexpectedEOF, err)
}

// Close ends the request; a body not read to its end drops the connection.
func (r *peerReader) Close() error {
	r.once.Do(func() {
		r.stall.Stop()
		r.done()
	})
	return r.body.Close()
}
