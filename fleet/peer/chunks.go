package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sync/singleflight"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/fleet/placement"
	"github.com/cacheagent/cacheagent/object"
)

// chunkSep separates an object's name from a chunk's index in the name
// under which a cache stores that chunk of the object: it starts with NUL,
// which no GCS object name (and no name the data plane carries) contains,
// so a chunk's name never meets a real object's.
const chunkSep = "\x00chunk "

// chunkObject returns the object under which a cache stores chunk i of o.
func chunkObject(o object.Object, i int) object.Object {
	return object.Object{Bucket: o.Bucket, Name: o.Name + chunkSep + strconv.Itoa(i), Generation: o.Generation}
}

// parseChunk returns the object and chunk index a chunk object names, or
// false for any other object.
func parseChunk(o object.Object) (whole object.Object, i int, ok bool) {
	name, idx, found := strings.Cut(o.Name, chunkSep)
	if !found {
		return o, 0, false
	}
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || strconv.Itoa(i) != idx || name == "" {
		return o, 0, false
	}
	return object.Object{Bucket: o.Bucket, Name: name, Generation: o.Generation}, i, true
}

// IsChunk reports whether name is the cache name of a chunk copy (see the
// package doc, Ownership) rather than of an object: listings of what a
// cache holds leave these out.
func IsChunk(name string) bool { return strings.Contains(name, chunkSep) }

// chunked reports whether an object of size bytes is placed chunk by chunk.
func (s *Source) chunked(size int64) bool { return size > s.cfg.ChunkSize }

// Items returns the placement keys of objs with their sizes, as this
// Source routes their reads: one key per object of at most one chunk, one
// per chunk of a larger one. Balancing them (placement.Table.Balance)
// gives the owners of a dataset the Owners of a daemon may then follow.
func (s *Source) Items(objs []object.Attrs) []placement.Item {
	out := make([]placement.Item, 0, len(objs))
	for _, a := range objs {
		key := ObjectKey(a.Object)
		if !s.chunked(a.Size) {
			out = append(out, placement.Item{Key: key, Size: a.Size})
			continue
		}
		for i := range placement.Chunks(a.Size, s.cfg.ChunkSize) {
			key.Chunk = i
			_, n := placement.ChunkRange(a.Size, s.cfg.ChunkSize, i)
			out = append(out, placement.Item{Key: key, Size: n})
		}
	}
	return out
}

// Keeps reports whether copy a is one this node's cache keeps first (see
// tier.Cache.SetOwnership): a chunk copy whose chunk this node owns, or a
// whole object of at most one chunk that this node owns. A whole copy of
// a chunked object is held for this node's readers only and never kept
// first: the chunks the fleet needs are kept by their owners.
func (s *Source) Keeps(a object.Attrs) bool {
	key := ObjectKey(a.Object)
	if whole, i, ok := parseChunk(a.Object); ok {
		key = ObjectKey(whole)
		key.Chunk = i
	} else if s.chunked(a.Size) {
		return false
	}
	cs := s.cfg.Owners.Owners(key)
	return len(cs) > 0 && cs[0].Self
}

// sizeKey is the context key of the size of the object a fill reads.
type sizeKey struct{}

// withSize marks ctx as reading an object of size bytes: the Downloader
// sets it for its fills, so range reads of a chunked object go to each
// chunk's owner.
func withSize(ctx context.Context, size int64) context.Context {
	return context.WithValue(ctx, sizeKey{}, size)
}

// sizeOf returns the size withSize set on ctx.
func sizeOf(ctx context.Context) (int64, bool) {
	n, ok := ctx.Value(sizeKey{}).(int64)
	return n, ok
}

// chunkAttrs returns the attributes of chunk i of whole (pinned): its
// length, from the origin's attributes of whole, and no CRC32C (GCS has
// none for a range; the tier records the chunk's as filled, and the
// readers that assemble the object check it whole).
// Attributes of a generation never change, so they are remembered.
func (s *Source) chunkAttrs(ctx context.Context, chunk, whole object.Object, i int) (object.Attrs, error) {
	if whole.Generation <= 0 {
		return object.Attrs{}, fmt.Errorf("peer: chunk %d of %s: unpinned generation: %w", i, whole, object.ErrInvalidName)
	}
	a, err := s.attrs.get(ctx, s.origin, whole)
	if err != nil {
		return object.Attrs{}, err
	}
	if i >= placement.Chunks(a.Size, s.cfg.ChunkSize) {
		return object.Attrs{}, fmt.Errorf("peer: chunk %d of %s (%d bytes): %w", i, whole, a.Size, object.ErrNotFound)
	}
	_, n := placement.ChunkRange(a.Size, s.cfg.ChunkSize, i)
	return object.Attrs{Object: chunk, Size: n, Updated: a.Updated}, nil
}

// attrsCacheSize bounds the pinned attributes a Source remembers.
const attrsCacheSize = 4096

// attrsCache remembers the origin's attributes of pinned generations, so
// the fills of an object's chunks Stat it once.
type attrsCache struct {
	sf singleflight.Group
	mu sync.Mutex
	m  map[object.Object]object.Attrs // guarded by mu
}

// get returns o's attributes from the cache or the origin.
func (c *attrsCache) get(ctx context.Context, origin object.Source, o object.Object) (object.Attrs, error) {
	c.mu.Lock()
	a, ok := c.m[o]
	c.mu.Unlock()
	if ok {
		return a, nil
	}
	v, err, shared := c.sf.Do(o.String(), func() (any, error) {
		a, err := origin.Stat(ctx, o)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.m == nil || len(c.m) >= attrsCacheSize {
			c.m = make(map[object.Object]object.Attrs) // forget all: cheap, and rare
		}
		c.m[o] = a
		return a, nil
	})
	if err != nil && shared && ctx.Err() == nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return origin.Stat(ctx, o) // the caller that ran the Stat gave up, not this one
	}
	if err != nil {
		return object.Attrs{}, err
	}
	return v.(object.Attrs), nil
}

// readChunkFill reads n bytes at off of chunk i of whole for the fill of
// this node's copy of that chunk: from a member that holds it already,
// else from the origin. The fill is this node's as the chunk's owner (or
// as a stand-in for a failed owner), so it never waits on a peer's fill.
func (s *Source) readChunkFill(ctx context.Context, whole object.Object, i int, off, n int64) (io.ReadCloser, error) {
	abs := int64(i)*s.cfg.ChunkSize + off
	req := request{obj: whole, off: abs, n: n, cached: true, chunked: true, chunk: i}
	if n > 0 && !fetch.Reread(ctx) && req.check() == nil {
		if r := s.fromHolder(ctx, s.cfg.Owners.Owners(req.key()), req); r != nil {
			return r, nil
		}
	}
	return s.fromOrigin(ctx, whole, abs, n)
}

// readChunked reads n bytes at off of o, an object placed chunk by chunk: each chunk's part from that chunk's owner (this node's
// own chunk copy if it is the owner). The parts after the first are asked
// for as the reader reaches them.
func (s *Source) readChunked(ctx context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	cs := s.cfg.ChunkSize
	first := int(off / cs)
	end := off + n
	pn := min(end, int64(first+1)*cs) - off
	r, err := s.readChunk(ctx, o, first, off, pn)
	if err != nil || pn == n {
		return r, err
	}
	return &chunkReader{s: s, ctx: ctx, o: o, cur: r, left: pn, next: off + pn, end: end}, nil
}

// readChunk reads n bytes at off of o, all within chunk i, from the
// chunk's owners, this node's chunk copy or the origin.
func (s *Source) readChunk(ctx context.Context, o object.Object, i int, off, n int64) (io.ReadCloser, error) {
	req := request{obj: o, off: off, n: n, chunked: true, chunk: i}
	cands := s.cfg.Owners.Owners(req.key())
	if len(cands) > 0 && cands[0].Self {
		if len(cands) == 1 {
			// No other member: a chunk copy would serve no one, and a
			// peer that joins fills one when it asks.
			return s.fromOrigin(ctx, o, off, n)
		}
		if r, err := s.fromOwnChunk(ctx, o, i, off, n); r != nil || ctx.Err() != nil {
			return r, err
		}
		return s.fromOrigin(ctx, o, off, n) // no cache, or its fill failed: this read is the fill
	}
	return s.fromOwners(ctx, cands, req)
}

// fromOwnChunk reads n bytes at off of o from this node's copy of chunk
// i, filling it first on a miss; nil without a cache or when the copy
// cannot be had (the caller reads the origin).
func (s *Source) fromOwnChunk(ctx context.Context, o object.Object, i int, off, n int64) (io.ReadCloser, error) {
	c := s.cache.Load()
	if c == nil {
		return nil, nil
	}
	h, err := (*c).Open(ctx, chunkObject(o, i))
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("peer: chunk %d of %s: %w", i, o, err)
		}
		return nil, nil
	}
	rel := off - int64(i)*s.cfg.ChunkSize
	if rel < 0 || rel+n > h.Size() {
		h.Close()
		return nil, nil
	}
	return &handleReader{SectionReader: io.NewSectionReader(h, rel, n), close: h.Close}, nil
}

// handleReader reads a section of a cache handle and closes the handle.
type handleReader struct {
	*io.SectionReader
	close func() error
}

func (r *handleReader) Close() error { return r.close() }

// chunkReader reads a range that spans chunks: the current part, then the
// next one opened when the current one ends. A part that ends short is an
// io.ErrUnexpectedEOF (the Downloader retries from the last byte it has),
// never the next part's bytes at the wrong offset.
type chunkReader struct {
	s         *Source
	ctx       context.Context
	o         object.Object
	cur       io.ReadCloser // nil once closed
	left      int64         // bytes cur still owes
	next, end int64         // the range left after cur
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for r.cur != nil {
		q := p
		if int64(len(q)) > r.left {
			q = q[:r.left]
		}
		n, err := 0, io.EOF
		if len(q) > 0 {
			n, err = r.cur.Read(q)
		}
		r.left -= int64(n)
		switch {
		case n > 0 || err != nil && err != io.EOF:
			if err == io.EOF {
				err = nil
			}
			return n, err
		case r.left > 0:
			return 0, fmt.Errorf("peer: read %s: part ended %d bytes short: %w", r.o, r.left, io.ErrUnexpectedEOF)
		}
		r.cur.Close()
		r.cur = nil
		if r.next >= r.end {
			break
		}
		i := int(r.next / r.s.cfg.ChunkSize)
		pn := min(r.end, int64(i+1)*r.s.cfg.ChunkSize) - r.next
		if r.cur, err = r.s.readChunk(r.ctx, r.o, i, r.next, pn); err != nil {
			return 0, err
		}
		r.left, r.next = pn, r.next+pn
	}
	return 0, io.EOF
}

func (r *chunkReader) Close() error {
	if r.cur == nil {
		return nil
	}
	err := r.cur.Close()
	r.cur = nil
	return err
}
