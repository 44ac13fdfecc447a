package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// batcher gathers one peer's small-object reads into batch requests,
// adaptively: at most Config.BatchInflight batches are in flight to the
// peer; a read that finds a free slot sends at once, with whatever reads
// wait (so a lone read waits for nothing), and the reads that arrive while
// every slot is busy wait together. When a batch ends, its sender hands the
// slot to the first read waiting, which sends the next batch, up to
// Config.BatchMax reads. Under load the batches grow to the reads in flight
// over the slots; idle, each read is a batch of one.
type batcher struct {
	mu       sync.Mutex
	pending  []*batchRead // waiting for a batch; guarded by mu
	inflight int          // batches in flight, or slots handed to a waiting read; guarded by mu
}

// batchRead is one read in a batch: its answer is data, or cause and err,
// once done is closed. lead hands it a slot to send the next batch.
type batchRead struct {
	req   request
	alive func() // tells the read's Downloader that the owner is still filling
	data  []byte
	cause Cause
	err   error
	done  chan struct{}
	lead  chan struct{} // buffered: the slot's token
	slot  bool          // a token was sent on lead and not yet used; guarded by batcher.mu
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
	r := &batchRead{req: req, alive: func() { fetch.Alive(ctx) }, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, r)
	if b.inflight < s.cfg.BatchInflight {
		b.inflight++
		b.giveLocked(r)
	}
	b.mu.Unlock()
	for {
		select {
		case <-r.done:
			b.release(r) // a slot handed to it after another batch took it goes on
			if r.err != nil {
				return nil, r.cause, r.err
			}
			return io.NopCloser(bytes.NewReader(r.data)), 0, nil
		case <-r.lead:
			s.sendNext(ctx, c, p, r)
		case <-ctx.Done():
			b.mu.Lock()
			if i := slices.Index(b.pending, r); i >= 0 {
				b.pending = slices.Delete(b.pending, i, i+1)
			}
			b.mu.Unlock()
			b.release(r)
			return nil, CauseTimeout, fmt.Errorf("peer %s: read %s: %w", c.Name, req.obj, context.Cause(ctx))
		}
	}
}

// sendNext starts, on the slot r was handed, a batch of the reads waiting,
// or hands the slot on to the next read waiting (or frees it) if none is
// left. The batch runs on a goroutine of the Source (see goBatch), which
// hands the slot on when it ends: r, like every read the batch carries,
// waits for its own frame or its own context.
func (s *Source) sendNext(ctx context.Context, c Candidate, p *peerState, r *batchRead) {
	b := &p.batch
	b.mu.Lock()
	r.slot = false
	n := min(len(b.pending), s.cfg.BatchMax)
	if n == 0 {
		b.handOnLocked()
		b.mu.Unlock()
		return
	}
	rs := slices.Clone(b.pending[:n])
	b.pending = slices.Delete(b.pending, 0, n)
	b.mu.Unlock()
	s.goBatch(ctx, func(bctx context.Context) {
		s.sendBatch(bctx, c, p, rs)
		b.mu.Lock()
		b.handOnLocked()
		b.mu.Unlock()
	})
}

// goBatch runs fn on a goroutine that Close waits for, on a context that
// keeps ctx's values but not its cancellation (other reads wait on the
// batch), and ends after Config.BatchTimeout or at Close. After Close, fn
// runs on the caller's goroutine, on a context already ended.
func (s *Source) goBatch(ctx context.Context, fn func(bctx context.Context)) {
	bctx, cancel := context.WithTimeoutCause(context.WithoutCancel(ctx), s.cfg.BatchTimeout, errBatchTimeout)
	s.bgMu.Lock()
	closed := s.closed
	if !closed {
		s.bg.Add(1)
	}
	s.bgMu.Unlock()
	if closed {
		cancel()
		fn(bctx)
		return
	}
	stop := context.AfterFunc(s.closing, cancel)
	go func() {
		defer s.bg.Done()
		defer cancel()
		defer stop()
		fn(bctx)
	}()
}

// giveLocked hands r a slot.
func (b *batcher) giveLocked(r *batchRead) {
	r.slot = true
	r.lead <- struct{}{} // r holds no other token: slot was false
}

// handOnLocked gives a slot that is free again to the first read waiting
// without one, or frees it.
func (b *batcher) handOnLocked() {
	for _, q := range b.pending {
		if !q.slot {
			b.giveLocked(q)
			return
		}
	}
	b.inflight--
}

// release hands on a slot r holds and will not use (its answer came, or its
// caller gave up).
func (b *batcher) release(r *batchRead) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.slot {
		r.slot = false
		<-r.lead // the token is there: only sendNext, on this goroutine, takes it otherwise
		b.handOnLocked()
	}
}

// sendBatch sends one batch request for rs and answers every read in it.
func (s *Source) sendBatch(ctx context.Context, c Candidate, p *peerState, rs []*batchRead) {
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
		drainClose(resp.Body, cancel, s.cfg.StallTimeout)
		cause, err = causeOf(resp.StatusCode), fmt.Errorf("peer %s: batch: %w: status %s", c.Name, errBadAnswer, resp.Status)
	}
	if err != nil {
		if cause != CauseNotFound && cause != CauseLoop {
			p.cool(s.now(), s.cfg.CoolDown)
		}
		failAll(slices.Clone(rs), cause, err)
		return
	}
	defer resp.Body.Close()
	stall := time.AfterFunc(s.cfg.StallTimeout, func() { cancel(errStalled) })
	defer stall.Stop()
	body := &progressReader{r: resp.Body, fn: func(int) { stall.Reset(s.cfg.StallTimeout) }}
	// Frames come as the owner's opens end, each naming its read.
	pending := slices.Clone(rs)
	for left := len(rs); left > 0; {
		f, err := readFrame(body)
		if err == nil && f.st != itemWait && (f.index >= len(rs) || pending[f.index] == nil) {
			err = fmt.Errorf("%w: frame for item %d of %d, or twice", errBadAnswer, f.index, len(rs))
		}
		if err != nil {
			p.cool(s.now(), s.cfg.CoolDown)
			failAll(pending, bodyCause(rctx), fmt.Errorf("peer %s: batch: %w", c.Name, err))
			return
		}
		if f.st == itemWait { // a keepalive: the owner is still filling
			for _, r := range pending {
				if r != nil {
					r.alive()
				}
			}
			continue
		}
		r := pending[f.index]
		switch {
		case f.st != itemOK:
			r.cause, r.err = causeOfItem(f.st), fmt.Errorf("peer %s: %s: %w: item status %d", c.Name, r.req.obj, errBadAnswer, f.st)
		case f.gen != r.req.obj.Generation || f.n != r.req.n:
			p.cool(s.now(), s.cfg.CoolDown)
			failAll(pending, CauseBadResponse, fmt.Errorf("peer %s: %s: %w: generation %d, %d bytes",
				c.Name, r.req.obj, errBadAnswer, f.gen, f.n))
			return
		default:
			r.data = make([]byte, f.n)
			if _, err := io.ReadFull(body, r.data); err != nil {
				p.cool(s.now(), s.cfg.CoolDown)
				failAll(pending, bodyCause(rctx), fmt.Errorf("peer %s: batch: %s: %w", c.Name, r.req.obj, err))
				return
			}
			p.bytes.Add(f.n)
		}
		close(r.done)
		pending[f.index] = nil
		left--
	}
	// Every read is answered; the body must end here. Reading its end
	// gives the connection back to the pool: a body closed before its EOF
	// takes its connection with it, and the next batch to this peer paid
	// a TLS handshake (about a third of a fleet node's CPU with small
	// objects).
	// Anything else after the last item is a bad answer (the reads have
	// their bytes already): the peer cools down, the connection is dropped.
	var one [1]byte
	if n, err := io.ReadFull(body, one[:]); n > 0 || !errors.Is(err, io.EOF) {
		p.cool(s.now(), s.cfg.CoolDown)
	}
}

// errBatchTimeout ends a batch request past Config.BatchTimeout.
var errBatchTimeout = errors.New("peer: batch took longer than the batch timeout")

// bodyCause says why a batch's body failed: a stall (no bytes, not even a
// keepalive, for the stall timeout), a batch past Config.BatchTimeout, or a
// bad answer.
func bodyCause(rctx context.Context) Cause {
	if c := context.Cause(rctx); errors.Is(c, errStalled) || errors.Is(c, errBatchTimeout) {
		return CauseTimeout
	}
	return CauseBadResponse
}

// failAll answers every read of rs not answered yet (not nil) with cause
// and err.
func failAll(rs []*batchRead, cause Cause, err error) {
	for i, r := range rs {
		if r != nil {
			r.cause, r.err = cause, err
			close(r.done)
			rs[i] = nil
		}
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
