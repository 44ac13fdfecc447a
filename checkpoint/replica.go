package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/internal/wait"
	"github.com/cacheagent/cacheagent/object"
)

// Replicas: in fleet mode a save is pushed to Config.Replicas other members
// over the peer data plane, each of which keeps a verified copy (state
// "peers" once they all have); if the saving agent dies before the
// commit, the first live holder uploads the save and commits it (the
// objects' and the manifest's preconditions and the save's id keep
// "exactly one manifest" whoever writes it).

// Fleet is the fleet, as replicas need it; the daemon implements it over
// the fleet's membership and the peer data plane.
type Fleet interface {
	// Pick returns up to n live members other than this agent, ranked for
	// key (every member ranks alike).
	Pick(key string, n int) []string
	// Dead reports whether member has left the fleet (failed, or left).
	Dead(member string) bool
	// Do sends a replica request to member: method and path (under
	// /v1/replicas/), with a body of size bytes (nil: none); a non-2xx
	// answer is an error.
	Do(ctx context.Context, member, method, path string, body io.Reader, size int64) error
	// Prefer has the fleet's reads of the objects under prefix served
	// from member's copies (the agent that saved them holds them), on
	// every member: a restore calls it before it reads.
	Prefer(ctx context.Context, prefix object.URI, member string)
}

// ErrNoPeers means "peers" durability was asked of an agent without a
// fleet (or with checkpoint.replicas 0).
var ErrNoPeers = errors.New("checkpoint: peers durability needs fleet mode and checkpoint.replicas above 0")

// State of a replica held for another agent, in stats.Checkpoint.State.
const Replica = "replica"

// replicaRetry is the pause before a replication tries again (too few
// members, a member failing).
const replicaRetry = 2 * time.Second

// replicaSweep is how often held replicas are checked: committed by their
// saver (dropped), or orphaned by its death (taken over).
const replicaSweep = 30 * time.Second

// takeoverGrace is how long a saver must have been out of the fleet before
// its replica's first holder takes the save over: a saver restarted in
// that time resumes its own upload. (Were both to upload, the objects'
// metadata and preconditions would still commit the save once.)
const takeoverGrace = 10 * time.Second

// replicate pushes sv to Config.Replicas members until they all hold it,
// or it is committed first; it closes tried after its first try. Each
// member is recorded in the save's replicas once its replica is complete,
// and not pushed to again: a complete replica takes no more files.
func (s *Store) replicate(sv *save, tried chan struct{}) {
	ctx := s.ctx
	var once sync.Once
	defer once.Do(func() { close(tried) })
	for {
		s.mu.Lock()
		done := sv.j.Committed != 0 || sv.j.Failed != "" || len(sv.j.Replicas) >= s.cfg.Replicas
		held := slices.Clone(sv.j.Replicas)
		s.mu.Unlock()
		if done {
			return
		}
		members := s.cfg.Fleet.Pick(sv.j.Save, s.cfg.Replicas)
		err := fmt.Errorf("peers: %d of %d members to hold a replica", len(members), s.cfg.Replicas)
		if len(members) == s.cfg.Replicas {
			err = nil
			for _, m := range members {
				if slices.Contains(held, m) {
					continue
				}
				if err = s.pushReplica(ctx, sv, m, members); err != nil {
					break
				}
				s.record(sv, "a replica", func(j *journal) {
					if !slices.Contains(j.Replicas, m) {
						j.Replicas = append(j.Replicas, m)
					}
				})
			}
		}
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			return
		}
		s.setLastErr(sv, err.Error())
		once.Do(func() { close(tried) })
		if wait.Sleep(ctx, replicaRetry) != nil {
			return
		}
	}
}

// pushReplica sends sv to member: the manifest to be, every file, then
// the holders' list that completes the replica.
func (s *Store) pushReplica(ctx context.Context, sv *save, member string, holders []string) error {
	s.mu.Lock()
	m := sv.j.Manifest
	m.Files = slices.Clone(m.Files)
	s.mu.Unlock()
	b, err := json.Marshal(&m)
	if err != nil {
		return err
	}
	base := "/v1/replicas/" + url.PathEscape(m.Save)
	if err := s.cfg.Fleet.Do(ctx, member, "PUT", base, strings.NewReader(string(b)), int64(len(b))); err != nil {
		return fmt.Errorf("peers: %s: %w", member, err)
	}
	for i, f := range m.Files {
		if err := s.pushFile(ctx, sv, member, base+"/"+strconv.Itoa(i), i, f.Size); err != nil {
			return fmt.Errorf("peers: %s: %s: %w", member, f.Name, err)
		}
	}
	q := url.Values{"holders": {strings.Join(holders, ",")}}
	if err := s.cfg.Fleet.Do(ctx, member, "POST", base+"/complete?"+q.Encode(), nil, 0); err != nil {
		return fmt.Errorf("peers: %s: %w", member, err)
	}
	return nil
}

// pushFile sends file i of sv to member.
func (s *Store) pushFile(ctx context.Context, sv *save, member, path string, i int, size int64) error {
	f, err := os.Open(dataPath(sv.dir, i))
	if err != nil {
		return err // adopted meanwhile: the save is committed
	}
	defer f.Close()
	if err := s.cfg.Fleet.Do(ctx, member, "PUT", path, f, size); err != nil {
		return err
	}
	s.mu.Lock()
	s.figures.ReplicatedBytes += size
	s.mu.Unlock()
	return nil
}

// dropReplicas tells sv's holders that it is committed or failed.
func (s *Store) dropReplicas(ctx context.Context, sv *save) {
	if s.cfg.Fleet == nil {
		return
	}
	s.mu.Lock()
	holders := slices.Clone(sv.j.Replicas)
	s.mu.Unlock()
	for _, m := range holders {
		if err := s.cfg.Fleet.Do(ctx, m, "DELETE", "/v1/replicas/"+url.PathEscape(sv.j.Save), nil, 0); err != nil {
			s.log.Warn("checkpoint: drop a replica (its holder drops it at its next sweep)", "member", m, "err", err)
		}
	}
}

// ReplicaBegin starts holding a replica of another agent's save: m is the
// manifest to be (its files' names, sizes and CRC32Cs). Its bytes are held
// in the cache's budget. Beginning one already begun does nothing; one
// being begun by another call is ErrBusy.
func (s *Store) ReplicaBegin(ctx context.Context, id string, m []byte) error {
	if !validID(id) {
		return fmt.Errorf("%w: save id %q", ErrManifest, id)
	}
	var man Manifest
	if err := json.Unmarshal(m, &man); err != nil {
		return fmt.Errorf("%w: %w", ErrManifest, err)
	}
	u, err := object.ParsePrefix(man.URI)
	if err == nil {
		u, err = checkPrefix(u)
	}
	if err != nil || man.Save != id || man.Format != manifestFormat || len(man.Files) > MaxFiles {
		return fmt.Errorf("%w: a replica of save %q: %v", ErrManifest, id, err)
	}
	var total int64
	for _, f := range man.Files {
		if err := CheckName(u, f.Name); err != nil || f.Size < 0 {
			return fmt.Errorf("%w: a replica of save %q: file %q", ErrManifest, id, f.Name)
		}
		total += f.Size
	}
	s.mu.Lock()
	if sv := s.saves[id]; sv != nil {
		s.mu.Unlock()
		if !sv.j.Replica {
			return fmt.Errorf("%w: save %s is this agent's own", ErrBusy, id)
		}
		return nil
	}
	if s.beginning[id] {
		s.mu.Unlock()
		return fmt.Errorf("%w: the replica of save %s is being begun", ErrBusy, id)
	}
	s.beginning[id] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.beginning, id)
		s.mu.Unlock()
	}()
	sv := &save{dir: filepath.Join(s.cfg.Dir, "saves", id), j: journal{Format: journalFormat, Manifest: man, Replica: true}}
	if sv.hold, err = s.cfg.Cache.Hold(ctx, total, object.Object{Bucket: u.Bucket, Name: u.Path}); err != nil {
		return err
	}
	if err = os.MkdirAll(filepath.Join(sv.dir, "data"), 0o700); err == nil {
		err = writeJournal(sv.dir, &sv.j)
	}
	if err != nil {
		sv.hold.Release()
		os.RemoveAll(sv.dir)
		return fmt.Errorf("checkpoint: replica %s: %w", id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		sv.hold.Release()
		return ErrClosed
	}
	s.saves[id] = sv
	s.notifyLocked()
	return nil
}

// replicaOf returns the replica id, not complete.
func (s *Store) replicaOf(id string) (*save, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv := s.saves[id]
	if sv == nil || !sv.j.Replica {
		return nil, fmt.Errorf("%w: no replica of save %q here", ErrNoCheckpoint, id)
	}
	if sv.j.Complete {
		return nil, fmt.Errorf("%w: the replica of save %q is complete", ErrBusy, id)
	}
	return sv, nil
}

// ReplicaFile receives file i of replica id: exactly its size, checked
// against its CRC32C, fsynced.
func (s *Store) ReplicaFile(id string, i int, r io.Reader) error {
	sv, err := s.replicaOf(id)
	if err != nil {
		return err
	}
	if i < 0 || i >= len(sv.j.Files) {
		return fmt.Errorf("%w: file %d of %d", ErrManifest, i, len(sv.j.Files))
	}
	f := sv.j.Files[i]
	p := dataPath(sv.dir, i)
	w, err := os.OpenFile(p+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	h := crc32.New(castagnoli)
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(r, f.Size+1))
	switch {
	case err != nil:
	case n != f.Size:
		err = fmt.Errorf("%w: %s: %d bytes, want %d", object.ErrShortRead, f.Name, n, f.Size)
	case h.Sum32() != f.CRC32C:
		err = fmt.Errorf("%w: %s", object.ErrChecksum, f.Name)
	default:
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(p+".tmp", p)
	}
	if err != nil {
		os.Remove(p + ".tmp")
		return fmt.Errorf("checkpoint: replica %s: %w", id, err)
	}
	return nil
}

// ReplicaComplete completes replica id once every file is here; holders
// are all the members holding one, in the saver's order (the first live
// one takes the save over if the saver dies).
func (s *Store) ReplicaComplete(id string, holders []string) error {
	sv, err := s.replicaOf(id)
	if err != nil {
		return err
	}
	for i := range sv.j.Files {
		if _, err := os.Stat(dataPath(sv.dir, i)); err != nil {
			return fmt.Errorf("%w: the replica of save %q lacks file %d", ErrManifest, id, i)
		}
	}
	if err := syncDir(filepath.Join(sv.dir, "data")); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	s.mu.Lock()
	sv.j.Complete, sv.j.Holders = true, holders
	j := sv.j
	s.notifyLocked()
	s.mu.Unlock()
	return writeJournal(sv.dir, &j)
}

// ReplicaDrop forgets replica id: its saver committed it, or it failed.
func (s *Store) ReplicaDrop(id string) error {
	s.mu.Lock()
	sv := s.saves[id]
	if sv == nil || !sv.j.Replica || sv.j.TakenOver {
		s.mu.Unlock()
		return nil
	}
	delete(s.saves, id)
	if sv.hold != nil {
		sv.hold.Release()
	}
	s.notifyLocked()
	s.mu.Unlock()
	return os.RemoveAll(sv.dir)
}

// replicaLoop sweeps the replicas held here every replicaSweep, and when
// SweepReplicas is called.
func (s *Store) replicaLoop() {
	dead := make(map[string]time.Time) // saver -> when first seen dead
	t := time.NewTimer(replicaSweep)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.sweep:
		}
		next := replicaSweep
		if s.sweepReplicas(s.ctx, dead) {
			next = replicaRetry // a takeover waits out its grace
		}
		t.Reset(next)
	}
}

// SweepReplicas asks for the replicas held here to be checked now: the
// daemon calls it when the fleet's membership changes.
func (s *Store) SweepReplicas() {
	select {
	case s.sweep <- struct{}{}:
	default:
	}
}

// sweepReplicas drops the complete replicas whose save is committed or
// failed (its claim gone), and takes over those whose saver has been dead
// for takeoverGrace, if this agent is the first live holder; dead records
// when each saver was first seen dead. It reports whether a takeover
// waits out its grace.
func (s *Store) sweepReplicas(ctx context.Context, dead map[string]time.Time) (waiting bool) {
	s.mu.Lock()
	var held []*save
	for _, sv := range s.saves {
		if sv.j.Replica && sv.j.Complete && !sv.j.TakenOver {
			held = append(held, sv)
		}
	}
	s.mu.Unlock()
	for _, sv := range held {
		u, _ := object.ParsePrefix(sv.j.URI)
		if m, err := ReadManifest(ctx, s.cfg.Bucket, u); err == nil && m.Save == sv.j.Save {
			s.ReplicaDrop(sv.j.Save)
			continue
		}
		// A save whose claim is gone is not to be committed: its saver
		// failed it, removing the claim first.
		claimed, err := s.claimedBy(ctx, u, sv.j.Save)
		if err != nil {
			s.log.Debug("checkpoint: read a replica's claim (again at the next sweep)", "uri", sv.j.URI, "err", err)
			continue
		}
		if !claimed {
			s.log.Info("checkpoint: dropping the replica of a save that failed", "uri", sv.j.URI, "saver", sv.j.Node)
			s.ReplicaDrop(sv.j.Save)
			continue
		}
		if !s.cfg.Fleet.Dead(sv.j.Node) {
			delete(dead, sv.j.Node)
			continue
		}
		if s.firstHolder(sv) != s.cfg.Node {
			continue
		}
		since, ok := dead[sv.j.Node]
		if !ok {
			since, dead[sv.j.Node] = time.Now(), time.Now()
		}
		if time.Since(since) < takeoverGrace {
			waiting = true
			continue
		}
		s.log.Warn("checkpoint: the saving agent died before the commit; taking the save over",
			"uri", sv.j.URI, "saver", sv.j.Node)
		s.record(sv, "the takeover", func(j *journal) {
			j.TakenOver = true
			if !s.closed {
				s.start(sv)
			}
		})
	}
	return waiting
}

// firstHolder returns the first of sv's holders that is not dead.
func (s *Store) firstHolder(sv *save) string {
	for _, h := range sv.j.Holders {
		if !s.cfg.Fleet.Dead(h) {
			return h
		}
	}
	return ""
}

// record changes sv's journal with f, under the store's lock, and writes
// it; a write that fails is logged as what failed to be recorded (the
// change holds in memory, and the work it records is redone after a
// restart).
func (s *Store) record(sv *save, what string, f func(j *journal)) {
	s.mu.Lock()
	f(&sv.j)
	j := sv.j
	j.Files = slices.Clone(j.Files)
	s.notifyLocked()
	s.mu.Unlock()
	if err := writeJournal(sv.dir, &j); err != nil {
		s.log.Warn("checkpoint: record "+what, "uri", j.URI, "err", err)
	}
}

// validID reports whether id has the form of a save id (newID): it names
// a directory and part objects.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
