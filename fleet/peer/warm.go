package peer

import (
	"context"
	"fmt"
	"io"

	"github.com/cacheagent/cacheagent/fleet/placement"
	"github.com/cacheagent/cacheagent/object"
)

// Warm makes the fleet hold a without a copy of it on this node, where
// other members own it: it reads one byte of each of a's keys (the
// object, or each chunk of a larger one) from the key's owner, which
// fills its copy first on a miss (one origin read however many members
// warm it), and fills the chunk copies this node owns. It reports local
// when this node owns a whole, or has no other member: the caller caches
// it itself. An owner that fails is an error (the caller may then cache
// the object itself); Warm never reads the origin.
func (s *Source) Warm(ctx context.Context, a object.Attrs) (local bool, err error) {
	o := a.Object
	if o.Generation <= 0 || a.Size <= 0 {
		return true, nil
	}
	if !s.chunked(a.Size) {
		cands := s.cfg.Owners.Owners(ObjectKey(o))
		if len(cands) < 2 || cands[0].Self {
			return true, nil
		}
		return false, s.warmKey(ctx, cands[0], request{obj: o, off: 0, n: 1})
	}
	for i := range placement.Chunks(a.Size, s.cfg.ChunkSize) {
		off, _ := placement.ChunkRange(a.Size, s.cfg.ChunkSize, i)
		req := request{obj: o, off: off, n: 1, chunked: true, chunk: i}
		cands := s.cfg.Owners.Owners(req.key())
		switch {
		case len(cands) < 2:
			return true, nil
		case cands[0].Self:
			r, err := s.fromOwnChunk(ctx, o, i, off, 1)
			if err == nil && r == nil {
				err = fmt.Errorf("peer: warm chunk %d of %s: no chunk copy", i, o)
			}
			if err != nil {
				return false, err
			}
			r.Close()
		default:
			if err := s.warmKey(ctx, cands[0], req); err != nil {
				return false, err
			}
		}
	}
	return false, nil
}

// warmKey asks owner c for the one byte of req, which it fills first.
func (s *Source) warmKey(ctx context.Context, c Candidate, req request) error {
	p := s.peer(c.Name)
	r, cause, err := s.fromPeer(ctx, c, p, req)
	if err != nil {
		if ctx.Err() == nil {
			s.errs[cause].Add(1)
		}
		return fmt.Errorf("peer: warm %s at %s: %w", req.obj, c.Name, err)
	}
	defer r.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("peer: warm %s at %s: %w", req.obj, c.Name, err)
	}
	return nil
}
