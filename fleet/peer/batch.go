package peer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// BatchPath is the route of batch requests: many small objects of one
// bucket in one request (see the package doc, Batches).
const BatchPath = "/v1/peer/batch"

// Batch limits.
const (
	// MaxBatch is the most objects one batch request asks for.
	MaxBatch = 64
	// maxBatchQuery bounds a batch request's query (the MAC covers it,
	// so the object list travels there, not in a body).
	maxBatchQuery = 96 << 10
	// maxBatchFills is how many of a batch's misses a server fills at once.
	maxBatchFills = 16
)

// frameHeader is the size of a frame's header in a batch answer: a status
// byte, the item's index in the request (big-endian uint16), its generation
// and the length of the bytes that follow (big-endian uint64 each).
const frameHeader = 19

// Item statuses in a batch answer.
const (
	itemOK       byte = iota // the object's bytes follow
	itemNotFound             // not this generation here (or not cached, for a cached-only batch)
	itemBusy                 // the fill would wait for space, or took longer than the server waits
	itemLoop                 // the server is itself reading the object from a peer
	itemError                // the fill failed
	itemWait                 // no item: the server is still filling (a keepalive, every Heartbeat)
)

// causeOfItem returns the Cause of an item's status.
func causeOfItem(st byte) Cause {
	switch st {
	case itemNotFound:
		return CauseNotFound
	case itemLoop:
		return CauseLoop
	case itemBusy:
		return CauseRefused
	}
	return CauseBadResponse
}

// batchQuery encodes a batch request for objs, all of one bucket:
// b=BUCKET, then o=NAME and g=GENERATION per object, in order, and
// cached=1 for a cached-only batch.
func batchQuery(objs []object.Object, cached bool) string {
	v := url.Values{"b": {objs[0].Bucket}}
	for _, o := range objs {
		v["o"] = append(v["o"], o.Name)
		v["g"] = append(v["g"], strconv.FormatInt(o.Generation, 10))
	}
	if cached {
		v.Set("cached", "1")
	}
	return v.Encode()
}

// parseBatch parses a batch request's query: every object is checked as a
// single request's would be.
func parseBatch(raw string) (objs []object.Object, cached bool, err error) {
	if len(raw) > maxBatchQuery {
		return nil, false, fmt.Errorf("%w: batch query of %d bytes", ErrBadRequest, len(raw))
	}
	v, err := url.ParseQuery(raw)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	bs, names, gens := v["b"], v["o"], v["g"]
	want := 3
	if c, ok := v["cached"]; ok {
		if len(c) != 1 || c[0] != "1" {
			return nil, false, fmt.Errorf("%w: cached=%.8q, want 1", ErrBadRequest, c)
		}
		cached = true
		want++
	}
	switch {
	case len(v) != want:
		return nil, false, fmt.Errorf("%w: %d parameters, want b, o, g and optionally cached", ErrBadRequest, len(v))
	case len(bs) != 1:
		return nil, false, fmt.Errorf("%w: %d buckets, want 1", ErrBadRequest, len(bs))
	case len(names) == 0 || len(names) > MaxBatch:
		return nil, false, fmt.Errorf("%w: %d objects, want 1 to %d", ErrBadRequest, len(names), MaxBatch)
	case len(gens) != len(names):
		return nil, false, fmt.Errorf("%w: %d names, %d generations", ErrBadRequest, len(names), len(gens))
	}
	objs = make([]object.Object, len(names))
	for i, name := range names {
		gen, err := parseUint(gens[i])
		if err != nil {
			return nil, false, fmt.Errorf("%w: g: %w", ErrBadRequest, err)
		}
		objs[i] = object.Object{Bucket: bs[0], Name: name, Generation: gen}
		if err := (request{obj: objs[i], n: 1}).check(); err != nil {
			return nil, false, err
		}
	}
	return objs, cached, nil
}

// frame is one frame of a batch answer.
type frame struct {
	st    byte
	index int
	gen   int64
	n     int64 // bytes that follow
}

// appendFrame appends f's header to b.
func appendFrame(b []byte, f frame) []byte {
	b = append(b, f.st)
	b = binary.BigEndian.AppendUint16(b, uint16(f.index))
	b = binary.BigEndian.AppendUint64(b, uint64(f.gen))
	return binary.BigEndian.AppendUint64(b, uint64(f.n))
}

// readFrame reads a frame's header from r.
func readFrame(r io.Reader) (frame, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	f := frame{st: h[0], index: int(binary.BigEndian.Uint16(h[1:3]))}
	g, l := binary.BigEndian.Uint64(h[3:11]), binary.BigEndian.Uint64(h[11:])
	if f.st > itemWait || f.index >= MaxBatch || g > 1<<63-1 || l > maxRange || (f.st != itemOK && l != 0) {
		return frame{}, fmt.Errorf("%w: malformed frame header %x", errBadAnswer, h)
	}
	f.gen, f.n = int64(g), int64(l)
	return f, nil
}

// batchItem is one object of a batch being served: its handle once
// opened, or its status.
type batchItem struct {
	o     object.Object
	index int // in the request
	h     *tier.Handle
	st    byte
}

// serveBatch answers a batch request: 200 at once, then one frame per
// object as its open ends (filling misses, at most maxBatchFills at once),
// in that order, each naming its index in the request; a keepalive frame
// every Heartbeat while none is ready; items still filling after MaxWait
// are answered busy.
func (s *Server) serveBatch(w http.ResponseWriter, r *http.Request) (outcome, error) {
	objs, cached, err := parseBatch(r.URL.RawQuery)
	if err != nil {
		return outcomeBadRequest, err
	}
	if !s.serves(objs[0].Bucket) {
		return outcomeForbidden, fmt.Errorf("bucket %q is not served", objs[0].Bucket)
	}
	ctx, cancel := context.WithCancelCause(WithNoForward(r.Context()))
	defer cancel(nil)
	ready := make(chan batchItem, len(objs))
	var wg sync.WaitGroup
	defer func() { // the items not sent: close their handles, once every open has ended
		cancel(errMaxWait)
		go func() { wg.Wait(); close(ready) }()
		for it := range ready {
			if it.h != nil {
				it.h.Close()
			}
		}
	}()
	s.openBatch(ctx, objs, cached, &wg, ready)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	if fl != nil {
		fl.Flush() // the requester's stall timer runs from here: keepalives must reach it
	}
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	limit := time.NewTimer(s.cfg.MaxWait)
	defer limit.Stop()
	hdr := make([]byte, 0, frameHeader)
	for sent := 0; sent < len(objs); {
		var it batchItem
		select {
		case it = <-ready:
		case <-t.C:
			s.progress(w)
			if _, err := w.Write(appendFrame(hdr[:0], frame{st: itemWait})); err != nil {
				return outcomeOK, fmt.Errorf("send batch: %w", err)
			}
			if fl != nil {
				fl.Flush()
			}
			continue
		case <-limit.C:
			cancel(errMaxWait) // the fills go on, detached in the cache; the items still waiting are busy
			continue
		case <-r.Context().Done():
			return outcomeGone, nil
		}
		sent++
		if err := s.sendItem(w, it, hdr); err != nil {
			return outcomeOK, err // the status is sent: the requester sees a short body
		}
		if fl != nil {
			fl.Flush()
		}
	}
	return outcomeOK, nil
}

// sendItem writes it's frame (and bytes) and closes its handle.
func (s *Server) sendItem(w http.ResponseWriter, it batchItem, hdr []byte) error {
	f := frame{st: it.st, index: it.index, gen: it.o.Generation}
	s.progress(w)
	if it.h == nil {
		_, err := w.Write(appendFrame(hdr, f))
		return err
	}
	defer it.h.Close()
	f.n = it.h.Size()
	if _, err := w.Write(appendFrame(hdr, f)); err != nil {
		return fmt.Errorf("send batch: %w", err)
	}
	var src io.Reader = io.NewSectionReader(it.h, 0, f.n)
	if c := s.cfg.CorruptForTest; c != nil {
		src = &corrupting{r: src, o: it.o, fn: c}
	}
	// A short copy ends the answer: the frames after it would be read at
	// the wrong offset.
	m, err := s.copyOut(w, src, f.n)
	s.bytes.Add(m)
	if err != nil {
		return fmt.Errorf("send %s in a batch: %w", it.o, err)
	}
	return nil
}

// openBatch starts opening objs on ctx, at most maxBatchFills at once (wg
// counts the goroutines); each result goes to ready (which has room for
// all).
func (s *Server) openBatch(ctx context.Context, objs []object.Object, cached bool, wg *sync.WaitGroup, ready chan<- batchItem) {
	opts := []tier.OpenOption{tier.NoSpaceWait()}
	if cached {
		opts = append(opts, tier.CachedOnly())
	}
	sem := make(chan struct{}, maxBatchFills)
	for i, o := range objs {
		if f := s.cfg.Forwarding; f != nil && !cached && f.Forwarding(o) {
			ready <- batchItem{o: o, index: i, st: itemLoop}
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			it := batchItem{o: o, index: i}
			h, err := s.cfg.Cache.Open(ctx, o, opts...)
			switch {
			case err == nil && h.Attrs().Generation != o.Generation:
				h.Close()
				it.st = itemNotFound
			case err == nil:
				it.h = h
			default:
				it.st = s.itemStatus(o, err)
			}
			ready <- it
		})
	}
}

// itemStatus maps a failed open of o to its item status.
func (s *Server) itemStatus(o object.Object, err error) byte {
	switch {
	case errors.Is(err, tier.ErrNoSpace), errors.Is(err, errMaxWait), errors.Is(err, context.Canceled):
		return itemBusy
	case errors.Is(err, tier.ErrNotCached), errors.Is(err, object.ErrNotFound),
		errors.Is(err, object.ErrGenerationChanged):
		return itemNotFound
	}
	s.log.Warn("peer: fill for a peer's batch failed", "object", o.String(), "err", err)
	return itemError
}
