package peer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// batcher gathers one peer's small-object reads into batch requests. The
// first read to arrive while none is gathering leads: it waits
// Config.BatchWindow (or until MaxBatch reads wait), takes every read
// waiting and sends them, MaxBatch to a request, while the reads that
// arrive meanwhile gather behind a new leader.
type batcher struct {
	mu      sync.Mutex
	pending []*batchRead // guarded by mu
	leading bool         // a leader is gathering; guarded by mu
	full    chan struct{}
}

// batchRead is one read waiting in a batch: its answer is data, or cause
// and err, once done is closed.
type batchRead struct {
	req   request
	data  []byte
	cause Cause
	err   error
	done  chan struct{}
}

// batchable reports whether req goes into a batch: a whole object (of the
// size ctx's fill reads) of at most Config.BatchBelow bytes, not a chunk,
// not a cached-only read.
func (s *Source) batchable(ctx context.Context, req request) bool {
	size, ok := sizeOf(ctx)
	return ok && s.cfg.BatchBelow > 0 && !req.chunked && !req.cached && req.off == 0 && req.n == size &&
		size <= s.cfg.BatchBelow
}

// fromBatch reads req from c in a batch with the other small objects read
// from c meanwhile, and returns what fromPeer would.
func (s *Source) fromBatch(ctx context.Context, c Candidate, p *peerState, req request) (io.ReadCloser, Cause, error) {
	b := &p.batch
	r := &batchRead{req: req, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, r)
	lead := !b.leading
	b.leading = true
	if len(b.pending) >= MaxBatch {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
	b.mu.Unlock()
	if lead {
		t := time.NewTimer(s.cfg.BatchWindow)
		select {
		case <-t.C:
		case <-b.full:
		}
		t.Stop()
		b.mu.Lock()
		rs := b.pending
		b.pending, b.leading = nil, false
		b.mu.Unlock()
		s.sendBatches(ctx, c, p, rs)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, CauseTimeout, fmt.Errorf("peer %s: read %s: %w", c.Name, req.obj, context.Cause(ctx))
	}
	if r.err != nil {
		return nil, r.cause, r.err
	}
	return io.NopCloser(bytes.NewReader(r.data)), 0, nil
}

// sendBatches sends rs to c, MaxBatch to a request, all at once, and
// answers every read; it returns when all are answered. The requests do not
// end with the leader's context: other readers wait on them.
func (s *Source) sendBatches(ctx context.Context, c Candidate, p *peerState, rs []*batchRead) {
	ctx = context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for len(rs) > 0 {
		n := min(len(rs), MaxBatch)
		part := rs[:n]
		rs = rs[n:]
		wg.Go(func() { s.sendBatch(ctx, c, p, part) })
	}
	wg.Wait()
}

// sendBatch sends one batch request for rs and answers every read in it.
func (s *Source) sendBatch(ctx context.Context, c Candidate, p *peerState, rs []*batchRead) {
	answered := 0
	fail := func(cause Cause, err error) {
		for _, r := range rs[answered:] {
			r.cause, r.err = cause, err
			close(r.done)
		}
		answered = len(rs)
	}
	defer fail(CauseBadResponse, fmt.Errorf("peer %s: %w: batch answer cut short", c.Name, errBadAnswer))
	objs := make([]object.Object, len(rs))
	for i, r := range rs {
		objs[i] = r.req.obj
		defer s.forward(r.req.obj)()
	}
	s.batches.Add(1)
	s.batched.Add(int64(len(rs)))
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	resp, cause, err := s.roundTrip(rctx, cancel, c, p, BatchPath+"?"+batchQuery(objs, false))
	if err == nil && resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cause, err = causeOf(resp.StatusCode), fmt.Errorf("peer %s: batch: %w: status %s", c.Name, errBadAnswer, resp.Status)
	}
	if err != nil {
		if cause != CauseNotFound && cause != CauseLoop {
			p.cool(s.now(), s.cfg.CoolDown)
		}
		fail(cause, err)
		return
	}
	defer resp.Body.Close()
	stall := time.AfterFunc(s.cfg.StallTimeout, func() { cancel(errStalled) })
	defer stall.Stop()
	body := &progressReader{r: resp.Body, fn: func(int) { stall.Reset(s.cfg.StallTimeout) }}
	for _, r := range rs {
		st, gen, n, err := readFrame(body)
		switch {
		case err != nil:
			p.cool(s.now(), s.cfg.CoolDown)
			fail(CauseBadResponse, fmt.Errorf("peer %s: batch: %w", c.Name, err))
			return
		case st != itemOK && n == 0:
			r.cause, r.err = causeOfItem(st), fmt.Errorf("peer %s: %s: %w: item status %d", c.Name, r.req.obj, errBadAnswer, st)
		case st != itemOK || gen != r.req.obj.Generation || n != r.req.n:
			p.cool(s.now(), s.cfg.CoolDown)
			fail(CauseBadResponse, fmt.Errorf("peer %s: %s: %w: status %d, generation %d, %d bytes",
				c.Name, r.req.obj, errBadAnswer, st, gen, n))
			return
		default:
			r.data = make([]byte, n)
			if _, err := io.ReadFull(body, r.data); err != nil {
				p.cool(s.now(), s.cfg.CoolDown)
				fail(CauseBadResponse, fmt.Errorf("peer %s: batch: %s: %w", c.Name, r.req.obj, err))
				return
			}
			p.bytes.Add(n)
		}
		close(r.done)
		answered++
	}
}

// progressReader calls fn with the count of every read that returns bytes.
type progressReader struct {
	r  io.Reader
	fn func(n int)
}

func (r *progressReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.fn(n)
	}
	return n, err
}
