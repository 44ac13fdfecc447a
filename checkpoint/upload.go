package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/api/googleapi"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/internal/wait"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// Metadata keys of every object a save writes.
const (
	metaSave = "cacheagent-save"
	metaNode = "cacheagent-node"
)

// Upload tuning.
const (
	// chunkAbove: files larger go as resumable uploads in chunks of
	// uploadChunk (each chunk retried alone); smaller ones in one request.
	chunkAbove  = 16 << 20
	uploadChunk = 16 << 20
	// maxParts is GCS's limit of components per compose.
	maxParts = 32
	// Backoff of retried requests: from backoffMin, doubling, to
	// backoffMax, with full jitter; transient errors are retried for as
	// long as the store runs (an acknowledged save is never dropped).
	backoffMin = 200 * time.Millisecond
	backoffMax = 30 * time.Second
)

// claimName is the object that marks a prefix as owned by a save until it
// commits or fails.
const claimName = reservedDir + "claim"

// start runs sv's upload, commit and adoption on a goroutine of the
// store, and its replication on another (in fleet mode).
func (s *Store) start(sv *save) {
	s.wg.Go(func() { s.run(sv) })
	if s.cfg.Fleet != nil && s.cfg.Replicas > 0 && !sv.j.Replica && sv.j.Committed == 0 &&
		len(sv.j.Replicas) < s.cfg.Replicas {
		s.wg.Go(func() { s.replicate(sv) })
	}
}

// run uploads sv's files, commits the manifest and adopts the files into
// the cache. A transient error is retried; a permanent one fails the save.
// Closing the store stops it where it is: the next Open resumes.
func (s *Store) run(sv *save) {
	ctx := s.ctx
	if sv.j.Committed == 0 {
		err := s.uploadFiles(ctx, sv)
		if err == nil {
			err = s.commit(ctx, sv)
		}
		if err != nil && ctx.Err() == nil {
			// A replica's holder may have committed the save meanwhile
			// (this agent was out of the fleet): its objects are kept.
			if s.committedElsewhere(ctx, sv) {
				err = nil
			} else {
				s.fail(sv, err)
			}
		}
		if err != nil {
			return
		}
	}
	s.adopt(ctx, sv)
}

// uploadFiles uploads every file of sv not uploaded yet, in parallel.
func (s *Store) uploadFiles(ctx context.Context, sv *save) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.Connections)
	var jmu sync.Mutex // orders the journal's rewrites
	for i, f := range sv.j.Files {
		if f.Generation != 0 {
			continue
		}
		g.Go(func() error {
			a, err := s.uploadFile(gctx, sv, i)
			if err != nil {
				return err
			}
			jmu.Lock()
			defer jmu.Unlock()
			s.mu.Lock()
			sv.j.Files[i].Generation = a.Generation
			sv.uploaded += f.Size
			s.figures.UploadedBytes += f.Size
			j := sv.j
			j.Files = slices.Clone(j.Files)
			s.notifyLocked()
			s.mu.Unlock()
			return writeJournal(sv.dir, &j)
		})
	}
	return g.Wait()
}

// uploadFile writes file i of sv as its object: in one request, or as
// parts composed when it is larger than Config.PartSize. An object left by
// this very save (before a restart) is taken as it is if it matches.
func (s *Store) uploadFile(ctx context.Context, sv *save, i int) (object.Attrs, error) {
	f := sv.j.Files[i]
	o := s.objectOf(sv, f.Name)
	if f.Size > s.cfg.PartSize {
		return s.uploadParts(ctx, sv, i, o)
	}
	return s.create(ctx, sv, o, dataPath(sv.dir, i), 0, f.Size, f.CRC32C)
}

// objectOf returns the object of sv's file name.
func (s *Store) objectOf(sv *save, name string) object.Object {
	p := s.prefix(sv)
	return object.Object{Bucket: p.Bucket, Name: p.Name + name}
}

// create writes o from n bytes at off of the file at p, whose CRC32C is
// crc, retrying transient errors; a write that finds o written by this
// save already takes it.
func (s *Store) create(ctx context.Context, sv *save, o object.Object, p string, off, n int64, crc uint32) (object.Attrs, error) {
	opt := fetch.WriteOptions{CRC32C: crc, Metadata: s.metadata(sv)}
	if n > chunkAbove {
		opt.ChunkSize = uploadChunk
	}
	var a object.Attrs
	err := s.retry(ctx, sv, func() error {
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("checkpoint: %w: %w", ErrChanged, err)
		}
		defer f.Close()
		release, err := s.acquire(ctx)
		if err != nil {
			return err
		}
		defer release()
		a, err = s.cfg.Bucket.Create(ctx, o, io.NewSectionReader(f, off, n), n, opt)
		if errors.Is(err, object.ErrExists) {
			a, err = s.owned(ctx, sv, o, n, crc)
		}
		return err
	})
	return a, err
}

// uploadParts uploads file i of sv as up to maxParts parts of at least
// Config.PartSize, in parallel, composes them into o and deletes them.
func (s *Store) uploadParts(ctx context.Context, sv *save, i int, o object.Object) (object.Attrs, error) {
	f := sv.j.Files[i]
	p := dataPath(sv.dir, i)
	n := min(int64(maxParts), (f.Size+s.cfg.PartSize-1)/s.cfg.PartSize)
	size := (f.Size + n - 1) / n
	parts := make([]object.Object, n)
	g, gctx := errgroup.WithContext(ctx)
	for k := range n {
		off := k * size
		m := min(size, f.Size-off)
		g.Go(func() error {
			crc, err := sectionCRC(p, off, m)
			if err != nil {
				return err
			}
			po := s.partOf(sv, i, int(k))
			a, err := s.create(gctx, sv, po, p, off, m, crc)
			parts[k] = a.Object
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return object.Attrs{}, err
	}
	var a object.Attrs
	err := s.retry(ctx, sv, func() error {
		release, err := s.acquire(ctx)
		if err != nil {
			return err
		}
		defer release()
		a, err = s.cfg.Bucket.Compose(ctx, o, parts, f.Size, fetch.WriteOptions{CRC32C: f.CRC32C, Metadata: s.metadata(sv)})
		if errors.Is(err, object.ErrExists) {
			a, err = s.owned(ctx, sv, o, f.Size, f.CRC32C)
		}
		if errors.Is(err, object.ErrChecksum) {
			// The parts hold other bytes than the file had when it was
			// saved: it was written since.
			err = fmt.Errorf("%w: %s: %w", ErrChanged, f.Name, err)
		}
		return err
	})
	if err != nil {
		return object.Attrs{}, err
	}
	for _, po := range parts {
		if err := s.cfg.Bucket.Delete(ctx, po); err != nil && !errors.Is(err, object.ErrNotFound) {
			s.log.Warn("checkpoint: delete a part (removed again at the commit)", "part", po.String(), "err", err)
		}
	}
	return a, nil
}

// partOf names part k of file i of sv.
func (s *Store) partOf(sv *save, i, k int) object.Object {
	return s.objectOf(sv, reservedDir+"parts/"+sv.j.Save+"/"+strconv.Itoa(i)+"."+strconv.Itoa(k))
}

// sectionCRC returns the CRC32C of n bytes at off of the file at p.
func sectionCRC(p string, off, n int64) (uint32, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w: %w", ErrChanged, err)
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	if _, err := io.Copy(h, io.NewSectionReader(f, off, n)); err != nil {
		return 0, fmt.Errorf("checkpoint: read %s: %w", p, err)
	}
	return h.Sum32(), nil
}

// metadata returns the custom metadata of sv's objects.
func (s *Store) metadata(sv *save) map[string]string {
	return map[string]string{metaSave: sv.j.Save, metaNode: sv.j.Node}
}

// owned returns the attributes of o if this save wrote it, with n bytes
// and CRC32C crc; else a conflict: another save owns the name.
func (s *Store) owned(ctx context.Context, sv *save, o object.Object, n int64, crc uint32) (object.Attrs, error) {
	a, md, err := s.cfg.Bucket.Metadata(ctx, o)
	if err != nil {
		return a, err
	}
	if md[metaSave] != sv.j.Save || a.Size != n || a.CRC32C != crc {
		return a, fmt.Errorf("%w: %s exists, written by save %q of %q", ErrBusy, a.Object, md[metaSave], md[metaNode])
	}
	return a, nil
}

// acquire takes one of the store's upload connections.
func (s *Store) acquire(ctx context.Context) (release func(), err error) {
	select {
	case s.sem <- struct{}{}:
		return func() { <-s.sem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// retry runs f until it succeeds, fails for good (permanent), or ctx
// ends, backing off between tries and recording the last error in sv's
// state.
func (s *Store) retry(ctx context.Context, sv *save, f func() error) error {
	backoff := backoffMin
	for {
		err := f()
		if err == nil || permanent(err) || ctx.Err() != nil {
			if err == nil {
				s.setLastErr(sv, "")
			}
			return err
		}
		s.setLastErr(sv, err.Error())
		s.log.Debug("checkpoint: retry", "uri", sv.j.URI, "err", err)
		if werr := wait.Sleep(ctx, rand.N(backoff)+time.Millisecond); werr != nil {
			return werr
		}
		backoff = min(2*backoff, backoffMax)
	}
}

// saveAttempts bounds the tries of a request made while a caller waits
// (the claim at a save): a storm that outlasts them fails the save, which
// then has changed nothing.
const saveAttempts = 8

// retryFew runs f until it succeeds, fails for good, or saveAttempts
// tries have failed, backing off between them.
func retryFew(ctx context.Context, f func() error) error {
	backoff := backoffMin
	for i := 1; ; i++ {
		err := f()
		if err == nil || permanent(err) || ctx.Err() != nil || i == saveAttempts {
			return err
		}
		if werr := wait.Sleep(ctx, rand.N(backoff)+time.Millisecond); werr != nil {
			return err
		}
		backoff = min(2*backoff, backoffMax)
	}
}

// setLastErr records the upload's last transient error ("" once a request
// succeeds).
func (s *Store) setLastErr(sv *save, msg string) {
	s.mu.Lock()
	if msg != "" {
		s.figures.Retries++
	}
	if sv.lastErr != msg {
		sv.lastErr = msg
		s.notifyLocked()
	}
	s.mu.Unlock()
}

// permanent reports whether err is no use retrying: a conflict with
// another save, a file that changed, a name or bucket that does not exist,
// a request the bucket refuses (400, 401, 403), a checksum the bytes sent
// do not match.
func permanent(err error) bool {
	for _, e := range []error{ErrBusy, ErrChanged, ErrCommitted, object.ErrExists, object.ErrNotFound, object.ErrInvalidName} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ge *googleapi.Error
	return errors.As(err, &ge) && (ge.Code == http.StatusBadRequest || ge.Code == http.StatusUnauthorized ||
		ge.Code == http.StatusForbidden)
}

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
	s.mu.Lock()
	sv.j.Committed = a.Generation
	j := sv.j
	s.figures.Commits++
	s.notifyLocked()
	s.mu.Unlock()
	s.log.Info("checkpoint: committed", "uri", sv.j.URI, "files", len(j.Files), "bytes", j.Bytes())
	return writeJournal(sv.dir, &j)
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

// fail ends sv for good: its objects are deleted from the bucket (nothing
// half-committed stays), its files and dirty bytes dropped, the reason
// kept.
func (s *Store) fail(sv *save, err error) {
	ctx := context.WithoutCancel(s.ctx)
	s.log.Error("checkpoint: save failed", "uri", sv.j.URI, "err", err)
	for _, f := range sv.j.Files {
		if f.Generation == 0 {
			continue
		}
		o := s.objectOf(sv, f.Name)
		o.Generation = f.Generation
		if derr := s.cfg.Bucket.Delete(ctx, o); derr != nil && !errors.Is(derr, object.ErrNotFound) {
			s.log.Warn("checkpoint: delete an object of a failed save", "object", o.String(), "err", derr)
		}
	}
	s.cleanBucket(ctx, sv)
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
	s.notifyLocked()
	s.mu.Unlock()
	if werr := writeJournal(sv.dir, &j); werr != nil {
		s.log.Warn("checkpoint: record the failure", "uri", j.URI, "err", werr)
	}
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

// unclaim deletes save id's claim on u, if it is still id's.
func (s *Store) unclaim(u object.URI, id string) {
	ctx := context.WithoutCancel(s.ctx)
	o := object.Object{Bucket: u.Bucket, Name: u.Path + claimName}
	a, md, err := s.cfg.Bucket.Metadata(ctx, o)
	if err != nil || md[metaSave] != id {
		return
	}
	if err := s.cfg.Bucket.Delete(ctx, a.Object); err != nil && !errors.Is(err, object.ErrNotFound) {
		s.log.Warn("checkpoint: delete the claim", "uri", u.String(), "err", err)
	}
}

// pinNewest keeps the newest Config.KeepLocal committed checkpoints of
// sv's run (the prefix's parent) pinned in the cache and unpins the older
// ones this agent saved.
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
		if err != nil && !errors.Is(err, tier.ErrClosed) {
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
