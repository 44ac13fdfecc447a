package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/api/googleapi"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/internal/wait"
	"github.com/cacheagent/cacheagent/object"
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
	// Parts go in one request up to partChunkAbove: a part is retried
	// alone already, and a resumable upload's chunks go one after another.
	chunkAbove     = 16 << 20
	partChunkAbove = 64 << 20
	uploadChunk    = 16 << 20
	// maxParts is GCS's limit of components per compose.
	maxParts = 32
	// Backoff of retried requests: from backoffMin, doubling, to
	// backoffMax, with full jitter; transient errors are retried for as
	// long as the store runs (an acknowledged save is never dropped).
	backoffMin = 200 * time.Millisecond
	backoffMax = 30 * time.Second
)

// start runs sv's upload, commit and adoption on a goroutine of the
// store, and its replication on another (in fleet mode). The upload waits
// for the replication's first try: the replicas are the quick guard, and
// they would share this node's uplink with it.
func (s *Store) start(sv *save) {
	if s.cfg.Fleet != nil && s.cfg.Replicas > 0 && !sv.j.Replica && sv.j.Committed == 0 &&
		len(sv.j.Replicas) < s.cfg.Replicas {
		tried := make(chan struct{})
		s.wg.Go(func() { s.replicate(sv, tried) })
		s.wg.Go(func() {
			select {
			case <-tried:
				s.run(sv)
			case <-s.ctx.Done():
			}
		})
		return
	}
	s.wg.Go(func() { s.run(sv) })
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
		// Stopping, the next Open resumes it. Else it fails, unless it
		// is committed after all (the answer to the commit was lost, or a
		// replica's holder committed it while this agent was out of the
		// fleet): then its files are adopted.
		if err != nil && (ctx.Err() != nil || s.fail(sv, err)) {
			return
		}
	}
	s.adopt(ctx, sv)
}

// uploadFiles uploads every file of sv not uploaded yet: a small file in
// one request, a large one as parts composed once all are up. The requests
// start in file order, at most Connections at a time, so that files are
// done one after another and a file's compose overlaps the next files'
// parts instead of every compose waiting for the end. A compose moves no
// bytes from here: it takes neither an upload's turn nor a connection of
// the budget, which would idle while the server composes.
func (s *Store) uploadFiles(ctx context.Context, sv *save) error {
	g, gctx := errgroup.WithContext(ctx)
	u := &uploads{s: s, sv: sv, ctx: gctx, g: g, turns: make(chan struct{}, s.cfg.Connections)}
	for i, f := range sv.j.Files {
		ok := true
		switch {
		case f.Generation != 0:
		case f.Size > s.cfg.PartSize:
			ok = s.uploadParts(u, i)
		default:
			ok = u.start(func() error {
				a, err := s.create(gctx, sv, i, s.objectOf(sv, f.Name), 0, f.Size, f.CRC32C, f.Size > chunkAbove)
				u.endTurn()
				if err != nil {
					return err
				}
				return u.done(i, a)
			})
		}
		if !ok {
			break
		}
	}
	return g.Wait()
}

// uploads is one run of uploadFiles: its requests' turns and the files
// done.
type uploads struct {
	s     *Store
	sv    *save
	ctx   context.Context // cancelled when a request fails for good
	g     *errgroup.Group
	turns chan struct{} // uploads running
	jmu   sync.Mutex    // orders the journal's rewrites
}

// start runs f on u.g once an upload's turn is free, in call order; f
// calls endTurn when its request returns. It reports false once the run
// is cancelled.
func (u *uploads) start(f func() error) bool {
	select {
	case u.turns <- struct{}{}:
	case <-u.ctx.Done():
		return false
	}
	u.g.Go(f)
	return true
}

// endTurn frees the turn of an upload whose request returned.
func (u *uploads) endTurn() { <-u.turns }

// done records file i as uploaded as a, in the save and its journal.
func (u *uploads) done(i int, a object.Attrs) error {
	u.jmu.Lock()
	defer u.jmu.Unlock()
	s, sv := u.s, u.sv
	s.mu.Lock()
	sv.j.Files[i].Generation = a.Generation
	sv.uploaded += sv.j.Files[i].Size
	s.figures.UploadedBytes += sv.j.Files[i].Size
	j := sv.j
	j.Files = slices.Clone(j.Files)
	s.notifyLocked()
	s.mu.Unlock()
	return writeJournal(sv.dir, &j)
}

// objectOf returns the object of sv's file name.
func (s *Store) objectOf(sv *save, name string) object.Object {
	p := s.prefix(sv)
	return object.Object{Bucket: p.Bucket, Name: p.Name + name}
}

// create writes o from n bytes at off of file i of sv, whose CRC32C is
// crc (a resumable upload if chunked), retrying transient errors; a write
// that finds o written by this save already takes it. A file shorter than
// that since it was saved is ErrChanged.
func (s *Store) create(ctx context.Context, sv *save, i int, o object.Object, off, n int64, crc uint32,
	chunked bool) (object.Attrs, error) {
	opt := fetch.WriteOptions{CRC32C: crc, Metadata: s.metadata(sv)}
	if chunked {
		opt.ChunkSize = uploadChunk
	}
	name := sv.j.Files[i].Name
	var a object.Attrs
	err := s.retry(ctx, sv, func() error {
		f, err := os.Open(dataPath(sv.dir, i))
		if err != nil {
			return fmt.Errorf("checkpoint: %w: %s: %w", ErrChanged, name, err)
		}
		defer f.Close()
		if err := checkLength(f, name, off+n); err != nil {
			return err
		}
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

// uploadParts uploads file i of u's save as up to maxParts parts of at
// most Config.PartSize (larger when that makes more than maxParts), each
// started in its turn; the last part up composes them into the file's
// object (outside the turns), deletes them and records the file done. It
// reports false once the run is cancelled.
func (s *Store) uploadParts(u *uploads, i int) bool {
	ctx, sv := u.ctx, u.sv
	f := sv.j.Files[i]
	p := dataPath(sv.dir, i)
	n := min(int64(maxParts), (f.Size+s.cfg.PartSize-1)/s.cfg.PartSize)
	size := (f.Size + n - 1) / n
	parts := make([]object.Object, n)
	var left atomic.Int64 // parts not up yet; the last one's goroutine composes
	left.Store(n)
	for k := range n {
		off := k * size
		m := min(size, f.Size-off)
		ok := u.start(func() error {
			err := func() error {
				defer u.endTurn()
				crc, err := sectionCRC(p, f.Name, off, m)
				if err != nil {
					return err
				}
				a, err := s.create(ctx, sv, i, s.partOf(sv, i, int(k)), off, m, crc, m > partChunkAbove)
				parts[k] = a.Object
				return err
			}()
			if err != nil || left.Add(-1) > 0 {
				return err
			}
			a, err := s.compose(ctx, sv, i, parts)
			if err != nil {
				return err
			}
			return u.done(i, a)
		})
		if !ok {
			return false
		}
	}
	return true
}

// compose writes file i of sv as the composition of its parts, then
// deletes them.
func (s *Store) compose(ctx context.Context, sv *save, i int, parts []object.Object) (object.Attrs, error) {
	f := sv.j.Files[i]
	o := s.objectOf(sv, f.Name)
	var a object.Attrs
	err := s.retry(ctx, sv, func() error {
		var err error
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

// sectionCRC returns the CRC32C of n bytes at off of the file at p (the
// checkpoint's file name); a file shorter than that is ErrChanged.
func sectionCRC(p, name string, off, n int64) (uint32, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w: %s: %w", ErrChanged, name, err)
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	got, err := io.Copy(h, io.NewSectionReader(f, off, n))
	if err != nil {
		return 0, fmt.Errorf("checkpoint: read %s: %w", p, err)
	}
	if got != n {
		return 0, fmt.Errorf("%w: %s is shorter than when it was saved (%d bytes at %d, want %d)", ErrChanged,
			name, got, off, n)
	}
	return h.Sum32(), nil
}

// checkLength returns ErrChanged if f, the file name of a save, is
// shorter than n bytes: it was truncated since it was saved.
func checkLength(f *os.File, name string, n int64) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("checkpoint: %s: %w", name, err)
	}
	if fi.Size() < n {
		return fmt.Errorf("%w: %s is %d bytes, shorter than when it was saved", ErrChanged, name, fi.Size())
	}
	return nil
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
	if md[metaSave] == sv.j.Save && (a.Size != n || a.CRC32C != crc) && strings.Contains(o.Name, "/"+reservedDir+"parts/") {
		// This save's part, cut otherwise before a restart (part_size
		// changed): removed, then written again.
		if err := s.cfg.Bucket.Delete(ctx, a.Object); err != nil && !errors.Is(err, object.ErrNotFound) {
			return a, fmt.Errorf("checkpoint: remove a stale part: %w", err)
		}
		return a, fmt.Errorf("checkpoint: %s was a part of another size; written again", a.Object)
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
