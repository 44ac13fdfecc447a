package checkpoint

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// Wait waits until the save of u reaches durability (Local, Peers or
// GCS) and returns its state, or fails: ErrFailed with the reason,
// ErrNoCheckpoint if this agent knows no save of u, ctx's error.
func (s *Store) Wait(ctx context.Context, u object.URI, durability string) (stats.Checkpoint, error) {
	u, err := checkPrefix(u)
	if err != nil {
		return stats.Checkpoint{}, err
	}
	want := rank(durability)
	if want < 0 || durability == Failed {
		return stats.Checkpoint{}, fmt.Errorf("checkpoint: durability %q: want local, peers or gcs", durability)
	}
	if err := s.CheckDurability(durability); err != nil {
		return stats.Checkpoint{}, err
	}
	for {
		s.mu.Lock()
		sv := s.latestLocked(u)
		ch := s.changed
		if sv == nil {
			s.mu.Unlock()
			return stats.Checkpoint{}, fmt.Errorf("%w: %s", ErrNoCheckpoint, u)
		}
		info := s.infoLocked(sv)
		s.mu.Unlock()
		switch {
		case info.State == Failed:
			return info, fmt.Errorf("%w: %s: %s", ErrFailed, u, info.Error)
		case rank(info.State) >= want:
			return info, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return info, fmt.Errorf("checkpoint: wait for %s to be %s (it is %s): %w", u, durability, info.State, ctx.Err())
		}
		if s.isClosed() {
			return info, ErrClosed
		}
	}
}

// isClosed reports whether Close was called.
func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// rank orders durability levels; -1 for unknown ones.
func rank(state string) int {
	return slices.Index([]string{Local, Peers, GCS}, state)
}

// latestLocked returns the newest save of u this agent holds or held.
func (s *Store) latestLocked(u object.URI) *save {
	var best *save
	for _, sv := range s.saves {
		if sv.j.URI == u.String() && (best == nil || sv.j.Created.After(best.j.Created)) {
			best = sv
		}
	}
	return best
}

// Status returns the saves this agent holds or held, newest first: all of
// them, or those of prefix u if u's bucket is set.
func (s *Store) Status(u object.URI) []stats.Checkpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []stats.Checkpoint
	for _, sv := range s.saves {
		if u.Bucket != "" && !strings.HasPrefix(sv.j.URI, u.String()) {
			continue
		}
		out = append(out, s.infoLocked(sv))
	}
	slices.SortFunc(out, func(a, b stats.Checkpoint) int { return b.Created.Compare(a.Created) })
	return out
}

// Figures returns the store's counters and gauges.
func (s *Store) Figures() stats.Checkpoints {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.figures
	f.FailuresByCause = maps.Clone(f.FailuresByCause)
	for _, sv := range s.saves {
		if sv.hold != nil {
			f.DirtyBytes += sv.hold.Bytes()
		}
		if sv.j.Committed == 0 && sv.j.Failed == "" && (!sv.j.Replica || sv.j.TakenOver) {
			f.Pending++
		}
	}
	return f
}

// infoLocked describes sv.
func (s *Store) infoLocked(sv *save) stats.Checkpoint {
	j := &sv.j
	st := Local
	switch {
	case j.Failed != "":
		st = Failed
	case j.Committed != 0 && j.Adopted:
		st = GCS
	case j.Replica && !j.TakenOver:
		st = Replica
	case s.cfg.Replicas > 0 && len(j.Replicas) >= s.cfg.Replicas:
		st = Peers
	}
	return stats.Checkpoint{URI: j.URI, Save: j.Save, Node: j.Node, Created: j.Created, Files: len(j.Files),
		Bytes: j.Bytes(), State: st, UploadedBytes: sv.uploaded, Replicas: len(j.Replicas), Error: cmp.Or(j.Failed, sv.lastErr)}
}
