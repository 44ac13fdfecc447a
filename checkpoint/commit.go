package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// claimName is the object that marks a prefix as owned by a save until it
// commits or fails.
const claimName = reservedDir + "claim"

// commit writes sv's manifest, last and conditionally: exactly one save
// commits a prefix.
func (s *Store) commit(ctx context.Context, sv *save) error {
	s.mu.Lock()
	m := sv.j.Manifest
	m.Files = slices.Clone(m.Files)
	s.mu.Unlock()
	b, err := m.Encode()
	if err != nil {
		return err
	}
	if sv.j.TakenOver {
		if err := s.checkClaim(ctx, sv); err != nil {
			return err
		}
	}
	o := s.objectOf(sv, ManifestName)
	crc := crc32.Checksum(b, castagnoli)
	var a object.Attrs
	err = s.retry(ctx, sv, func() error {
		release, err := s.acquire(ctx)
		if err != nil {
			return err
		}
		defer release()
		a, err = s.cfg.Bucket.Create(ctx, o, bytes.NewReader(b), int64(len(b)),
			fetch.WriteOptions{CRC32C: crc, Metadata: s.metadata(sv)})
		if errors.Is(err, object.ErrExists) {
			a, err = s.owned(ctx, sv, o, int64(len(b)), crc)
		}
		return err
	})
	if err != nil {
		return err
	}
	// Committed: a journal that fails to say so is redone after a restart
	// (the commit then finds its manifest), never a failure.
	s.record(sv, "the commit", func(j *journal) {
		j.Committed = a.Generation
		s.figures.Commits++
	})
	s.log.Info("checkpoint: committed", "uri", sv.j.URI, "files", len(sv.j.Files), "bytes", sv.j.Bytes())
	return nil
}

// checkClaim returns an ErrFailed error unless the claim on sv's prefix is
// still sv's: a holder that took a save over commits it only then, for
// the saver removes the claim first when the save fails.
func (s *Store) checkClaim(ctx context.Context, sv *save) error {
	u, _ := object.ParsePrefix(sv.j.URI)
	var claimed bool
	err := s.retry(ctx, sv, func() (err error) {
		claimed, err = s.claimedBy(ctx, u, sv.j.Save)
		return err
	})
	if err != nil {
		return err
	}
	if !claimed {
		return fmt.Errorf("%w: %s: the claim of save %s is gone: its saver failed it", ErrFailed, sv.j.URI, sv.j.Save)
	}
	return nil
}

// adopt makes sv's uploaded files cached objects of their generations,
// keeps the run's newest checkpoints pinned, and removes the save's claim
// and parts from the bucket.
func (s *Store) adopt(ctx context.Context, sv *save) {
	p := s.prefix(sv)
	for i, f := range sv.j.Files {
		dp := dataPath(sv.dir, i)
		if _, err := os.Stat(dp); err != nil {
			continue
		}
		a := object.Attrs{Object: object.Object{Bucket: p.Bucket, Name: p.Name + f.Name, Generation: f.Generation},
			Size: f.Size, CRC32C: f.CRC32C, HasCRC32C: true, Updated: sv.j.Created}
		if err := s.cfg.Cache.Adopt(ctx, a, dp, sv.hold); err != nil {
			s.log.Warn("checkpoint: keep an uploaded file in the cache", "object", a.Object.String(), "err", err)
		}
	}
	s.cleanBucket(ctx, sv)
	s.dropReplicas(ctx, sv)
	os.RemoveAll(filepath.Join(sv.dir, "data"))
	s.record(sv, "the adoption", func(j *journal) {
		if sv.hold != nil {
			sv.hold.Release()
			sv.hold = nil
		}
		j.Adopted = true
	})
	s.pinNewest(ctx, sv)
	s.prune()
}

// cleanBucket deletes sv's part objects and its claim on the prefix.
func (s *Store) cleanBucket(ctx context.Context, sv *save) {
	parts := s.objectOf(sv, reservedDir+"parts/"+sv.j.Save+"/")
	for a, err := range s.cfg.Bucket.List(ctx, parts.Bucket, parts.Name) {
		if err != nil {
			s.log.Warn("checkpoint: list parts left behind", "uri", sv.j.URI, "err", err)
			break
		}
		if err := s.cfg.Bucket.Delete(ctx, a.Object); err != nil && !errors.Is(err, object.ErrNotFound) {
			s.log.Warn("checkpoint: delete a part", "part", a.Object.String(), "err", err)
		}
	}
	u, _ := object.ParsePrefix(sv.j.URI)
	s.unclaim(u, sv.j.Save)
}

// fail ends sv for good, err saying why, unless it turns out committed.
// Its claim is removed first, so that a holder of a replica that does not
// hear of the failure drops it instead of taking the save over. Then,
// once no manifest of the save is found (looked for with retries: a
// commit whose answer was lost, or one by a holder that took the save
// over, is one), its objects are deleted, so that nothing half-committed
// stays (where that cannot be confirmed, they are left); its replicas,
// files and dirty bytes are dropped, the reason kept. It reports false if
// the save is committed after all: sv then has the manifest's
// generations, to be adopted.
func (s *Store) fail(sv *save, err error) bool {
	ctx := context.WithoutCancel(s.ctx)
	u, _ := object.ParsePrefix(sv.j.URI)
	s.unclaim(u, sv.j.Save)
	committed, cerr := s.committedElsewhere(ctx, sv)
	if committed {
		s.log.Warn("checkpoint: a save that seemed to fail is committed", "uri", sv.j.URI, "err", err)
		return false
	}
	s.log.Error("checkpoint: save failed", "uri", sv.j.URI, "err", err)
	if cerr != nil {
		s.log.Warn("checkpoint: the objects of a failed save are left: whether it was committed is unknown",
			"uri", sv.j.URI, "err", cerr)
	}
	for _, f := range sv.j.Files {
		if f.Generation == 0 || cerr != nil {
			continue
		}
		o := s.objectOf(sv, f.Name)
		o.Generation = f.Generation
		if derr := s.cfg.Bucket.Delete(ctx, o); derr != nil && !errors.Is(derr, object.ErrNotFound) {
			s.log.Warn("checkpoint: delete an object of a failed save", "object", o.String(), "err", derr)
		}
	}
	s.cleanBucket(ctx, sv)
	s.dropReplicas(ctx, sv)
	os.RemoveAll(filepath.Join(sv.dir, "data"))
	cause := "other"
	switch {
	case errors.Is(err, ErrChanged):
		cause = "changed"
	case errors.Is(err, ErrBusy):
		cause = "conflict"
	}
	s.mu.Lock()
	if sv.hold != nil {
		sv.hold.Release()
		sv.hold = nil
	}
	sv.j.Failed = err.Error()
	for i := range sv.j.Files {
		sv.j.Files[i].Generation = 0
	}
	sv.uploaded = 0
	if s.figures.FailuresByCause == nil {
		s.figures.FailuresByCause = make(map[string]int64)
	}
	s.figures.FailuresByCause[cause]++
	j := sv.j
	j.Files = slices.Clone(j.Files)
	s.notifyLocked()
	s.mu.Unlock()
	if werr := writeJournal(sv.dir, &j); werr != nil {
		s.log.Warn("checkpoint: record the failure", "uri", j.URI, "err", werr)
	}
	return true
}

// committedElsewhere reports whether sv is committed, its manifest
// written by another agent (a holder that took it over, or its saver) or
// by a commit whose answer was lost: then sv takes the manifest's
// generations, to adopt its files as the committed objects. It retries a
// few times; an error means it could not find out.
func (s *Store) committedElsewhere(ctx context.Context, sv *save) (bool, error) {
	u, err := object.ParsePrefix(sv.j.URI)
	if err != nil {
		return false, err
	}
	var m *Manifest
	var a object.Attrs
	err = retryFew(ctx, func() error {
		var err error
		if a, err = s.cfg.Bucket.Stat(ctx, s.objectOf(sv, ManifestName)); err == nil {
			m, err = readManifest(ctx, s.cfg.Bucket, a, u)
		}
		if errors.Is(err, ErrManifest) || errors.Is(err, object.ErrNotFound) {
			m, err = nil, nil // none, or not this save's
		}
		return err
	})
	if err != nil || m == nil || m.Save != sv.j.Save || len(m.Files) != len(sv.j.Files) {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range m.Files {
		sv.j.Files[i].Generation = f.Generation
	}
	sv.j.Committed = a.Generation
	s.notifyLocked()
	return true, nil
}

// checkUncommitted returns ErrCommitted if u holds a committed checkpoint.
func (s *Store) checkUncommitted(ctx context.Context, u object.URI) error {
	o := object.Object{Bucket: u.Bucket, Name: u.Path + ManifestName}
	err := retryFew(ctx, func() error {
		_, err := s.cfg.Bucket.Stat(ctx, o)
		return err
	})
	switch {
	case err == nil:
		return fmt.Errorf("%w: %s", ErrCommitted, u)
	case errors.Is(err, object.ErrNotFound):
		return nil
	}
	return fmt.Errorf("checkpoint: save %s: %w", u, err)
}

// claim marks u as owned by save id (an empty object under the reserved
// directory, written conditionally): another save of u is ErrBusy until
// this one commits or fails. It also proves, before anything moves, that
// the bucket exists and takes writes.
func (s *Store) claim(ctx context.Context, u object.URI, id string) error {
	o := object.Object{Bucket: u.Bucket, Name: u.Path + claimName}
	err := retryFew(ctx, func() error {
		_, err := s.cfg.Bucket.Create(ctx, o, bytes.NewReader(nil), 0,
			fetch.WriteOptions{CRC32C: 0, Metadata: map[string]string{metaSave: id, metaNode: s.cfg.Node}})
		return err
	})
	if errors.Is(err, object.ErrExists) {
		a, md, merr := s.cfg.Bucket.Metadata(ctx, o)
		if merr != nil {
			return fmt.Errorf("%w: %s (its claim: %w)", ErrBusy, u, merr)
		}
		if md[metaSave] == id {
			return nil
		}
		return fmt.Errorf("%w: %s is claimed by save %q of %q since %s", ErrBusy, u, md[metaSave], md[metaNode],
			a.Updated.Format(time.RFC3339))
	}
	if err != nil {
		return fmt.Errorf("checkpoint: save %s: %w", u, err)
	}
	return nil
}

// unclaim deletes save id's claim on u, if it is still id's, retrying a
// few times.
func (s *Store) unclaim(u object.URI, id string) {
	ctx := context.WithoutCancel(s.ctx)
	o := object.Object{Bucket: u.Bucket, Name: u.Path + claimName}
	err := retryFew(ctx, func() error {
		a, md, err := s.cfg.Bucket.Metadata(ctx, o)
		switch {
		case errors.Is(err, object.ErrNotFound):
			return nil
		case err != nil:
			return err
		case md[metaSave] != id:
			return nil
		}
		if err := s.cfg.Bucket.Delete(ctx, a.Object); err != nil && !errors.Is(err, object.ErrNotFound) {
			return err
		}
		return nil
	})
	if err != nil {
		s.log.Warn("checkpoint: delete the claim", "uri", u.String(), "err", err)
	}
}

// claimedBy reports whether save id claims u (one request).
func (s *Store) claimedBy(ctx context.Context, u object.URI, id string) (bool, error) {
	_, md, err := s.cfg.Bucket.Metadata(ctx, object.Object{Bucket: u.Bucket, Name: u.Path + claimName})
	if errors.Is(err, object.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return md[metaSave] == id, nil
}

// pinNewest keeps the newest Config.KeepLocal committed checkpoints of
// sv's run (the prefix's parent) pinned in the cache and unpins the older
// ones this agent saved. Stopping cuts it short; Open pins again.
func (s *Store) pinNewest(ctx context.Context, sv *save) {
	if s.cfg.KeepLocal < 0 {
		return
	}
	run := runOf(sv.j.URI)
	s.mu.Lock()
	var runs []*save
	for _, o := range s.saves {
		if o.j.Adopted && o.j.Failed == "" && runOf(o.j.URI) == run {
			runs = append(runs, o)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(runs, func(a, b *save) int { return b.j.Created.Compare(a.j.Created) })
	for i, o := range runs {
		p := s.prefix(o)
		var err error
		if i < s.cfg.KeepLocal {
			_, err = s.cfg.Cache.Pin(ctx, p.Bucket, p.Name)
		} else {
			_, err = s.cfg.Cache.Unpin(ctx, p.Bucket, p.Name)
		}
		if ctx.Err() != nil || errors.Is(err, tier.ErrClosed) {
			return // stopping: the next start pins them (see resume)
		}
		if err != nil {
			s.log.Warn("checkpoint: pin the newest checkpoints", "uri", o.j.URI, "err", err)
		}
	}
}

// runOf returns a checkpoint prefix's run: its parent, gs://b/run1/ for
// gs://b/run1/step-1000/.
func runOf(uri string) string {
	t := strings.TrimSuffix(uri, "/")
	if i := strings.LastIndexByte(t, '/'); i >= 0 && i >= len("gs://") {
		return t[:i+1]
	}
	return uri
}

// prune forgets the oldest finished saves beyond keepJournals.
func (s *Store) prune() {
	s.mu.Lock()
	var done []*save
	for _, sv := range s.saves {
		if sv.j.Adopted || sv.j.Failed != "" {
			done = append(done, sv)
		}
	}
	slices.SortFunc(done, func(a, b *save) int { return b.j.Created.Compare(a.j.Created) })
	var gone []*save
	if len(done) > keepJournals {
		gone = done[keepJournals:]
		for _, sv := range gone {
			delete(s.saves, sv.j.Save)
		}
	}
	s.mu.Unlock()
	for _, sv := range gone {
		os.RemoveAll(sv.dir)
	}
}
