package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/ring"
)

// A running loader session: the handler's goroutine runs the loop (run);
// one goroutine reads the client's messages (read) and one takes batches
// from the loader as slots come free (producer). Both are started and
// awaited by run; only the loop writes to the connection and to the ring's
// headers.

// produced is what the producer got from the loader's Next.
type produced struct {
	b   *loader.Batch
	err error
}

// producer takes batches from a loader, one per credit: a credit is a slot
// the client does not hold, so the loader never runs out of buffers.
type producer struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	credits chan struct{}
	out     chan produced
}

// startProducer starts taking slots batches from l.
func startProducer(l *loader.Loader, slots int) *producer {
	ctx, cancel := context.WithCancel(context.Background())
	p := &producer{cancel: cancel, credits: make(chan struct{}, slots), out: make(chan produced)}
	for range slots {
		p.credits <- struct{}{}
	}
	p.wg.Go(func() { p.run(ctx, l) })
	return p
}

// run is the producer's goroutine; it ends with ctx or after an error
// (io.EOF included) is delivered.
func (p *producer) run(ctx context.Context, l *loader.Loader) {
	for {
		select {
		case <-p.credits:
		case <-ctx.Done():
			return
		}
		b, err := l.Next(ctx)
		if err != nil && ctx.Err() != nil {
			return
		}
		select {
		case p.out <- produced{b, err}:
		case <-ctx.Done():
			if b != nil {
				b.Release()
			}
			return
		}
		if err != nil {
			return
		}
	}
}

// credit gives a released slot back.
func (p *producer) credit() {
	select {
	case p.credits <- struct{}{}:
	default: // cannot happen: there are as many places as slots
	}
}

// stop stops the producer and waits for it; a batch it had not delivered
// is released.
func (p *producer) stop() {
	p.cancel()
	p.wg.Wait()
}

// heldSlot is a slot the client holds.
type heldSlot struct {
	seq          uint64
	epoch, index int
	b            *loader.Batch
}

// received is a message from the client, or the error that ended reading.
type received struct {
	msg any
	err error
}

// runner is the loop's state.
type runner struct {
	s    *loaderSession
	conn *ring.Conn
	p    *producer // nil while a Seek waits for the held slots
	// seek is the configuration a Seek restarts with once the client
	// holds no slot; nil if none is pending.
	pending *loader.Config
	held    map[uint32]heldSlot
	seq     uint64
	next    loader.State // the position after the last batch handed out
}

// run waits for the client to join on the data socket, sends it the ring
// and serves it until it leaves, ctx ends or the protocol breaks. It
// releases every batch the client held and returns why it ended.
func (s *loaderSession) run(ctx context.Context) string {
	t := time.NewTimer(helloTimeout)
	defer t.Stop()
	var conn *ring.Conn
	select {
	case conn = <-s.attach:
	case <-ctx.Done():
		return "the control stream closed"
	case <-t.C:
		return "no client joined on the data socket"
	}
	defer conn.Close()
	w := ring.Welcome{Protocol: ring.Protocol, RingBytes: uint64(len(s.ring.Bytes())),
		SlotBytes: uint64(s.ring.SlotBytes()), Slots: uint32(s.ring.Slots()), Arrays: uint32(len(s.layout.Arrays))}
	if err := conn.SendFd(w, s.ring.Fd()); err != nil {
		return fmt.Sprintf("sending the ring: %v", err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() }) // unblocks the reader and sends
	defer stop()
	in, done := make(chan received), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { read(conn, in, done) })
	st := s.l.State()
	r := &runner{s: s, conn: conn, p: startProducer(s.l, s.ring.Slots()), held: make(map[uint32]heldSlot), next: st}
	reason := r.loop(ctx, in)
	if r.p != nil {
		r.p.stop()
	}
	for _, h := range r.held {
		h.b.Release()
	}
	close(done)
	conn.Close()
	wg.Wait()
	return reason
}

// read passes the client's messages to the loop until an error (the
// connection closing included) or done.
func read(conn *ring.Conn, in chan<- received, done <-chan struct{}) {
	for {
		m, err := conn.Recv()
		select {
		case in <- received{m, err}:
		case <-done:
			return
		}
		if err != nil {
			return
		}
	}
}

// loop serves the session; it returns why it ended.
func (r *runner) loop(ctx context.Context, in <-chan received) string {
	for {
		var out <-chan produced
		if r.p != nil {
			out = r.p.out
		}
		var reason string
		var end bool
		select {
		case <-ctx.Done():
			return "the control stream closed"
		case m := <-in:
			reason, end = r.handle(m)
		case pr := <-out:
			reason, end = r.deliver(pr)
		}
		if end {
			return reason
		}
	}
}

// protocolError tells the client what it did wrong; the session ends.
func (r *runner) protocolError(format string, args ...any) (string, bool) {
	text := fmt.Sprintf(format, args...)
	r.conn.Send(&ring.Error{Code: ring.CodeProtocol, Text: text})
	return "protocol error: " + text, true
}

// send sends m; a failure ends the session.
func (r *runner) send(m any) (string, bool) {
	if err := r.conn.Send(m); err != nil {
		return fmt.Sprintf("data connection: %v", err), true
	}
	return "", false
}

// handle serves one client message.
func (r *runner) handle(m received) (string, bool) {
	switch {
	case errors.Is(m.err, io.EOF):
		return "the client left", true
	case errors.Is(m.err, ring.ErrMessage):
		return r.protocolError("%v", m.err)
	case m.err != nil:
		return fmt.Sprintf("data connection: %v", m.err), true
	}
	switch m := m.msg.(type) {
	case ring.Release:
		h, ok := r.held[m.Slot]
		if !ok || h.seq != m.Seq {
			return r.protocolError("release of slot %d, batch %d: the client does not hold it", m.Slot, m.Seq)
		}
		delete(r.held, m.Slot)
		ring.SetState(r.s.ring.Slot(int(m.Slot)), ring.StateFilling)
		h.b.Release()
		if r.p != nil {
			r.p.credit()
		}
		if r.pending != nil && len(r.held) == 0 {
			return r.restart()
		}
		return "", false
	case ring.StateRequest:
		return r.send(r.state())
	case ring.Seek:
		return r.seek(m)
	}
	return r.protocolError("unexpected %T", m.msg)
}

// state returns the position after the batches the client released: the
// earliest batch it still holds, or else the one after the last handed
// out. Resuming from it repeats the held batches and skips none.
func (r *runner) state() ring.StateIs {
	st := r.next
	var first *heldSlot
	for _, h := range r.held {
		if first == nil || h.seq < first.seq {
			first = &h
		}
	}
	if first != nil {
		st.Epoch, st.Batch = first.epoch, first.index
	}
	return ring.StateIs{Epoch: int64(st.Epoch), Batch: int64(st.Batch), Fingerprint: r.s.info.Start.Fingerprint}
}

// deliver hands a batch to the client, or tells it the batches ended.
func (r *runner) deliver(pr produced) (string, bool) {
	switch {
	case errors.Is(pr.err, io.EOF):
		return r.send(ring.End{Epoch: int64(r.next.Epoch), Batch: int64(r.next.Batch)})
	case pr.err != nil:
		r.s.d.log.Warn("loader session: loader failed", "session", r.s.id, "err", pr.err)
		return r.send(&ring.Error{Code: ring.CodeLoader, Text: pr.err.Error()})
	}
	b := pr.b
	k, err := r.s.slotOf(b)
	if err == nil {
		err = r.s.writeSlot(k, r.seq, b)
	}
	if err != nil {
		b.Release()
		r.conn.Send(&ring.Error{Code: ring.CodeInternal, Text: err.Error()})
		return err.Error(), true
	}
	r.held[uint32(k)] = heldSlot{seq: r.seq, epoch: b.Epoch, index: b.Index, b: b}
	msg := ring.Ready{Slot: uint32(k), Seq: r.seq, Epoch: int64(b.Epoch), Index: int64(b.Index), N: uint32(b.Len())}
	r.seq++
	r.s.d.lsess.batches.Add(1)
	per := r.s.info.BatchesPerEpoch
	r.next = loader.State{Epoch: b.Epoch, Batch: b.Index + 1}
	if r.next.Batch == per {
		r.next = loader.State{Epoch: b.Epoch + 1}
	}
	if reason, end := r.send(msg); end || b.Index != per-1 {
		return reason, end
	}
	return r.send(ring.EpochEnd{Epoch: int64(b.Epoch), Batches: int64(per)})
}

// seek stops handing out batches and restarts them at (m.Epoch, m.Batch)
// with a new loader over the same ring once the client has released
// every slot (at once if it holds none).
func (r *runner) seek(m ring.Seek) (string, bool) {
	s := r.s
	if m.Epoch < 0 || m.Epoch > math.MaxInt32 || m.Batch < 0 || m.Batch > math.MaxInt32 {
		return r.send(&ring.Error{Code: ring.CodeRefused, Text: fmt.Sprintf("seek: epoch %d, batch %d", m.Epoch, m.Batch)})
	}
	end := s.cfg.Epoch + max(s.cfg.Epochs, 1)
	cfg := s.cfg
	cfg.Epoch = int(m.Epoch)
	cfg.Epochs = max(1, end-cfg.Epoch)
	cfg.Resume = &loader.State{Epoch: int(m.Epoch), Batch: int(m.Batch), Fingerprint: s.info.Start.Fingerprint}
	if _, err := loader.IDs(cfg); err != nil {
		return r.send(&ring.Error{Code: ring.CodeRefused, Text: "seek: " + err.Error()})
	}
	if r.p != nil {
		r.p.stop()
		r.p = nil
	}
	r.pending = &cfg
	if len(r.held) > 0 {
		return "", false
	}
	return r.restart()
}

// restart replaces the loader for the pending Seek and answers it.
func (r *runner) restart() (string, bool) {
	s, cfg := r.s, *r.pending
	r.pending = nil
	if err := s.l.Close(); err != nil {
		s.d.log.Warn("loader session: close loader", "session", s.id, "err", err)
	}
	s.l = nil
	l, err := s.newLoader(cfg)
	if err != nil {
		r.conn.Send(&ring.Error{Code: ring.CodeInternal, Text: "seek: " + err.Error()})
		return "seek: " + err.Error(), true
	}
	s.l, r.p, r.next = l, startProducer(l, s.ring.Slots()), l.State()
	return r.send(r.state())
}

// slotOf returns the ring slot a batch was gathered into.
func (s *loaderSession) slotOf(b *loader.Batch) (int, error) {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s.ring.Bytes())))
	p := uintptr(firstBuffer(b))
	sb := uintptr(s.ring.SlotBytes())
	if p < base || p >= base+uintptr(len(s.ring.Bytes())) || (p-base)%sb != uintptr(s.layout.Offsets[0]) {
		return 0, fmt.Errorf("daemon: internal error: batch %d/%d is not in the ring", b.Epoch, b.Index)
	}
	return int((p - base) / sb), nil
}

// writeSlot writes slot k's header and descriptors for b, and b's ids.
func (s *loaderSession) writeSlot(k int, seq uint64, b *loader.Batch) error {
	slot := s.ring.Slot(k)
	n := b.Len()
	h := ring.Header{Seq: seq, Epoch: int64(b.Epoch), Index: int64(b.Index), State: ring.StateReady}
	if err := s.layout.Encode(slot, h, n, variableShapes(b)...); err != nil {
		return err
	}
	ids := slot[s.layout.Offsets[len(s.layout.Offsets)-1]:]
	for i, id := range b.IDs {
		binary.LittleEndian.PutUint64(ids[8*i:], uint64(id))
	}
	return nil
}
