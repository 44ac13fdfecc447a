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

// frameHeader is the size of an item's header in a batch answer: a status
// byte, the generation and the length of the bytes that follow (both
// big-endian uint64).
const frameHeader = 17

// Item statuses in a batch answer.
const (
	itemOK       byte = iota // the object's bytes follow
	itemNotFound             // not this generation here (or not cached, for a cached-only batch)
	itemBusy                 // the fill would wait for space, or took longer than the server waits
	itemLoop                 // the server is itself reading the object from a peer
	itemError                // the fill failed
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

// appendFrame appends an item's header to b.
func appendFrame(b []byte, st byte, gen, n int64) []byte {
	b = append(b, st)
	b = binary.BigEndian.AppendUint64(b, uint64(gen))
	return binary.BigEndian.AppendUint64(b, uint64(n))
}

// readFrame reads an item's header from r.
func readFrame(r io.Reader) (st byte, gen, n int64, err error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, 0, err
	}
	g, l := binary.BigEndian.Uint64(h[1:9]), binary.BigEndian.Uint64(h[9:])
	if h[0] > itemError || g > 1<<63-1 || l > maxRange {
		return 0, 0, 0, fmt.Errorf("%w: malformed item header %x", errBadAnswer, h)
	}
	return h[0], int64(g), int64(l), nil
}

// batchItem is one object of a batch being served: its handle once
// opened, or its status.
type batchItem struct {
	o  object.Object
	h  *tier.Handle
	st byte
}

// serveBatch answers a batch request: it opens every object (filling
// misses, at most maxBatchFills at once, sending 102 Processing every
// Heartbeat meanwhile, for at most MaxWait), then sends one 200 whose body
// is each object's frame in the order asked.
func (s *Server) serveBatch(w http.ResponseWriter, r *http.Request) (outcome, error) {
	objs, cached, err := parseBatch(r.URL.RawQuery)
	if err != nil {
		return outcomeBadRequest, err
	}
	if !s.serves(objs[0].Bucket) {
		return outcomeForbidden, fmt.Errorf("bucket %q is not served", objs[0].Bucket)
	}
	items := make([]batchItem, len(objs))
	for i, o := range objs {
		items[i].o = o
	}
	defer func() {
		for _, it := range items {
			if it.h != nil {
				it.h.Close()
			}
		}
	}()
	if !s.openBatch(w, r, items, cached) {
		return outcomeGone, nil // nobody to answer
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	hdr := make([]byte, 0, frameHeader)
	for _, it := range items {
		var n int64
		if it.h != nil {
			n = it.h.Size()
		}
		if _, err := w.Write(appendFrame(hdr[:0], it.st, it.o.Generation, n)); err != nil {
			return outcomeOK, fmt.Errorf("send batch: %w", err) // the status is sent: the requester sees a short body
		}
		if it.h == nil {
			continue
		}
		var src io.Reader = io.NewSectionReader(it.h, 0, n)
		if c := s.cfg.CorruptForTest; c != nil {
			src = &corrupting{r: src, o: it.o, fn: c}
		}
		m, err := io.Copy(w, src)
		s.bytes.Add(m)
		if err != nil {
			return outcomeOK, fmt.Errorf("send %s in a batch: %w", it.o, err)
		}
	}
	return outcomeOK, nil
}

// openBatch opens items (setting h, or st), with heartbeats; it reports
// false if the requester went away. It waits for every goroutine it starts.
func (s *Server) openBatch(w http.ResponseWriter, r *http.Request, items []batchItem, cached bool) bool {
	ctx, cancel := context.WithCancelCause(WithNoForward(r.Context()))
	defer cancel(nil)
	opts := []tier.OpenOption{tier.NoSpaceWait()}
	if cached {
		opts = append(opts, tier.CachedOnly())
	}
	var mu sync.Mutex // guards items' fields while the fills run
	sem := make(chan struct{}, maxBatchFills)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for i := range items {
		o := items[i].o
		if f := s.cfg.Forwarding; f != nil && !cached && f.Forwarding(o) {
			items[i].st = itemLoop
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			h, err := s.cfg.Cache.Open(ctx, o, opts...)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && h.Attrs().Generation != o.Generation:
				h.Close()
				items[i].st = itemNotFound
			case err == nil:
				items[i].h = h
			default:
				items[i].st = s.itemStatus(o, err)
			}
		})
	}
	go func() { wg.Wait(); close(done) }() // done is always waited for below
	if s.beat(w, done) {
		cancel(errMaxWait) // the fills go on, detached in the cache; the items still waiting are busy
		<-done
	}
	return r.Context().Err() == nil
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
