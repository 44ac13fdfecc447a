package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
	"github.com/cacheagent/cacheagent/tier"
)

// Durability levels a caller waits for, lowest first.
const (
	// Local: the files are fsynced on this agent's disk.
	Local = "local"
	// Peers: also held, verified, by Config.Replicas other members.
	Peers = "peers"
	// GCS: uploaded and committed (the manifest is written).
	GCS = "gcs"
	// Failed is a save's state once it failed for good.
	Failed = "failed"
)

// Defaults of zero Config fields.
const (
	DefaultConnections = 16
	DefaultPartSize    = 32 << 20
	DefaultKeepLocal   = 2
	// keepJournals is how many finished saves' records Status keeps.
	keepJournals = 256
)

// Bucket is where checkpoints go: *fetch.GCS, writing conditionally.
type Bucket interface {
	object.Source
	Create(ctx context.Context, o object.Object, r io.Reader, size int64, opt fetch.WriteOptions) (object.Attrs, error)
	Compose(ctx context.Context, o object.Object, parts []object.Object, size int64, opt fetch.WriteOptions) (object.Attrs, error)
	Delete(ctx context.Context, o object.Object) error
	Metadata(ctx context.Context, o object.Object) (object.Attrs, map[string]string, error)
}

// Config configures a Store.
type Config struct {
	// Dir holds the saves (saves/<id>/) and staging directories
	// (staging/<id>/); it must be on the cache's disk tier's filesystem,
	// so that saving and adopting rename files instead of copying them.
	Dir string
	// Cache is the agent's cache: it holds the saves' dirty bytes in its
	// budget, adopts their files once uploaded, and serves restores.
	Cache *tier.Cache
	// Bucket writes and reads the checkpoints: a client of its own, so
	// that uploads never hold a reader's connection.
	Bucket Bucket
	// Node names this agent in manifests and objects' metadata.
	Node string
	// Connections bounds the uploads' concurrent requests (0: 16).
	Connections int
	// PartSize: files larger are uploaded as parts of at most this size
	// in parallel (up to 32) and composed (0: 32 MiB).
	PartSize int64
	// KeepLocal is how many newest committed checkpoints of each run (the
	// prefix's parent) stay pinned in the cache (0: 2; negative: none).
	KeepLocal int
	// Fleet is the fleet (nil: one agent, no replicas); Replicas how many
	// other members hold a verified copy of each save before it is durable
	// at "peers".
	Fleet    Fleet
	Replicas int
	// Logger receives what has no caller to return to; nil discards it.
	Logger *slog.Logger
}

// Store is an agent's checkpoints: the saves it holds until they are
// committed, their uploads, and what it knows of committed ones. Its
// methods are safe for concurrent use.
type Store struct {
	cfg  Config
	log  *slog.Logger
	sem  chan struct{} // upload requests in flight
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup // uploads

	sweep chan struct{} // asks replicaLoop to sweep now; capacity 1
	wb    *writeback    // nil without inotify

	mu        sync.Mutex
	saves     map[string]*save // by id
	beginning map[string]bool  // replicas ReplicaBegin is making, by id
	changed   chan struct{}    // closed and replaced at every state change
	closed    bool
	figures   stats.Checkpoints
}

// save is one save held by the store.
type save struct {
	dir  string // <Dir>/saves/<id>
	j    journal
	hold *tier.Hold // the dirty bytes; nil once adopted or failed
	// Guarded by Store.mu.
	uploaded int64  // bytes whose objects are written
	lastErr  string // the upload's last transient error
}

// Open opens the store in cfg.Dir and resumes the saves a previous run
// left: their dirty bytes are held in the cache again and their uploads
// carry on (a committed save whose files were not adopted yet is adopted).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Connections <= 0 {
		cfg.Connections = DefaultConnections
	}
	if cfg.PartSize <= 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.KeepLocal == 0 {
		cfg.KeepLocal = DefaultKeepLocal
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Cache == nil || cfg.Bucket == nil || cfg.Dir == "" {
		return nil, errors.New("checkpoint: Open needs a Dir, a Cache and a Bucket")
	}
	for _, d := range []string{"saves", "staging"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o711); err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
	}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s := &Store{cfg: cfg, log: log, sem: make(chan struct{}, cfg.Connections), ctx: sctx, stop: stop,
		saves: make(map[string]*save), beginning: make(map[string]bool), changed: make(chan struct{}),
		sweep: make(chan struct{}, 1)}
	if err := s.resume(ctx); err != nil {
		stop()
		s.wg.Wait()
		return nil, err
	}
	if cfg.Fleet != nil {
		s.wg.Go(s.replicaLoop)
	}
	if wb, err := newWriteback(filepath.Join(cfg.Dir, "staging"), log); err != nil {
		log.Warn("checkpoint: no writeback of staging directories as they are written (saves flush all "+
			"their files themselves)", "err", err)
	} else {
		s.wb = wb
		s.wg.Go(func() { wb.run(sctx) })
	}
	return s, nil
}

// resume loads the journals of cfg.Dir/saves and restarts what is
// unfinished.
func (s *Store) resume(ctx context.Context) error {
	root := filepath.Join(s.cfg.Dir, "saves")
	ents, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	keep := make(map[string]bool) // staging directories saves cut short were taking
	for _, e := range ents {
		dir := filepath.Join(root, e.Name())
		j, err := readJournal(dir)
		if err != nil {
			// A save that never wrote its journal was never acknowledged.
			s.log.Warn("checkpoint: removing a save without a journal", "dir", dir, "err", err)
			os.RemoveAll(dir)
			continue
		}
		sv := &save{dir: dir, j: *j}
		if j.Taking != nil {
			if d, ok := s.stagingOf(j.Taking.Dir); ok {
				keep[d] = true
			}
			s.untake(dir, j)
			continue
		}
		if j.Replica && !j.Complete {
			// A replica cut short is of no use: its saver sends it again.
			os.RemoveAll(dir)
			continue
		}
		if !j.Adopted && j.Failed == "" {
			if sv.hold, err = s.cfg.Cache.Hold(ctx, s.dataBytes(sv), s.prefix(sv)); err != nil {
				return fmt.Errorf("checkpoint: resume %s: %w", j.URI, err)
			}
		}
		for _, f := range j.Files {
			if f.Generation != 0 {
				sv.uploaded += f.Size
			}
		}
		s.saves[j.Save] = sv
		if !j.Adopted && j.Failed == "" && (!j.Replica || j.TakenOver) {
			s.log.Info("checkpoint: resuming a save", "uri", j.URI, "files", len(j.Files), "committed", j.Committed != 0)
			s.start(sv)
		}
	}
	// An adoption records itself before it pins the run's newest
	// checkpoints: a stop in between leaves pins to finish.
	runs := make(map[string]bool)
	for _, sv := range s.saves {
		if run := runOf(sv.j.URI); sv.j.Adopted && sv.j.Failed == "" && !runs[run] {
			runs[run] = true
			s.pinNewest(ctx, sv)
		}
	}
	return s.emptyStaging(keep)
}

// dataBytes returns the bytes of sv's files still in its data directory.
func (s *Store) dataBytes(sv *save) int64 {
	var n int64
	for i, f := range sv.j.Files {
		if _, err := os.Stat(dataPath(sv.dir, i)); err == nil {
			n += f.Size
		}
	}
	return n
}

// prefix returns sv's prefix as an object (for errors and holds).
func (s *Store) prefix(sv *save) object.Object {
	u, _ := object.ParsePrefix(sv.j.URI)
	return object.Object{Bucket: u.Bucket, Name: u.Path}
}

// Close stops the uploads (a save not committed yet resumes at the next
// Open) and waits for them.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
	s.mu.Lock()
	for _, sv := range s.saves {
		if sv.hold != nil {
			sv.hold.Release()
		}
	}
	close(s.changed)
	s.mu.Unlock()
	return nil
}

// notifyLocked wakes the waiters: a save's state changed.
func (s *Store) notifyLocked() {
	if !s.closed {
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// CheckDurability returns ErrNoPeers if durability is Peers and this
// store has no fleet or no replicas: a caller asks before a Save it would
// wait for so.
func (s *Store) CheckDurability(durability string) error {
	if durability == Peers && (s.cfg.Fleet == nil || s.cfg.Replicas <= 0) {
		return ErrNoPeers
	}
	return nil
}

// SaveOptions configure a Save.
type SaveOptions struct {
	// Owner is the user saving: the directory and its files must be
	// theirs (nil: no check).
	Owner *Owner
	// Staged marks a staging directory, one the agent made and gave to
	// Owner (GiveDir): its top is the agent's, not the owner's, and it is
	// removed once its files are saved. Otherwise the emptied directory
	// tree is left.
	Staged bool
}

// Save takes the files under dir (regular files only; anything else is
// ErrUnsafeFile) as the checkpoint at prefix u: it claims the prefix in
// the bucket (ErrCommitted if a checkpoint is committed there, ErrBusy if
// another save owns it; an unknown bucket or a missing permission fails
// here), holds the files' size in the cache's budget (tier.ErrNoSpace if
// it cannot), moves them into the store (renamed: nothing copied on the
// cache's filesystem; copied from another), computes their CRC32Cs and
// fsyncs them. It returns once the save is durable on this agent (state
// Local); the upload and the commit go on in the background. On error
// nothing is kept and dir is as it was.
func (s *Store) Save(ctx context.Context, dir string, u object.URI, opt SaveOptions) (stats.Checkpoint, error) {
	u, err := checkPrefix(u)
	if err != nil {
		return stats.Checkpoint{}, err
	}
	if err := s.busy(u); err != nil {
		return stats.Checkpoint{}, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return stats.Checkpoint{}, fmt.Errorf("checkpoint: save %s: %w", dir, err)
	}
	defer root.Close()
	found, err := scan(root, u, opt.Owner, opt.Staged)
	if err != nil {
		return stats.Checkpoint{}, fmt.Errorf("checkpoint: save %s: %w", dir, err)
	}
	var total int64
	for _, f := range found {
		total += f.size
	}
	id := newID()
	j := journal{Format: journalFormat, Manifest: Manifest{Format: manifestFormat, URI: u.String(), Save: id,
		Node: s.cfg.Node, Created: time.Now().UTC()}}
	sv := &save{dir: filepath.Join(s.cfg.Dir, "saves", id), j: j}
	if err := s.checkUncommitted(ctx, u); err != nil {
		return stats.Checkpoint{}, err
	}
	if sv.hold, err = s.cfg.Cache.Hold(ctx, total, object.Object{Bucket: u.Bucket, Name: u.Path}); err != nil {
		return stats.Checkpoint{}, fmt.Errorf("checkpoint: save %s: %w", u, err)
	}
	// Until the journal has the files, it says what is being taken, so
	// that an agent that dies before Save returns undoes it at its start.
	pre := j
	pre.Taking = takingOf(dir, found)
	err = os.MkdirAll(sv.dir, 0o700)
	if err == nil {
		err = writeJournal(sv.dir, &pre)
	}
	if err == nil {
		err = syncDir(filepath.Dir(sv.dir))
	}
	if err != nil {
		sv.hold.Release()
		os.RemoveAll(sv.dir)
		return stats.Checkpoint{}, fmt.Errorf("checkpoint: save %s: %w", dir, err)
	}
	if err := s.claim(ctx, u, id); err != nil {
		sv.hold.Release()
		os.RemoveAll(sv.dir)
		return stats.Checkpoint{}, err
	}
	abandon := func(err error) (stats.Checkpoint, error) {
		sv.hold.Release()
		os.RemoveAll(sv.dir)
		s.unclaim(u, id)
		return stats.Checkpoint{}, fmt.Errorf("checkpoint: save %s: %w", dir, err)
	}
	data := filepath.Join(sv.dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return abandon(err)
	}
	files, undo, err := take(root, found, data)
	if err != nil {
		return abandon(err)
	}
	sv.j.Files = files
	err = writeJournal(sv.dir, &sv.j)
	if err == nil {
		err = syncDir(filepath.Dir(sv.dir))
	}
	if err != nil {
		return abandon(errors.Join(err, undo()))
	}
	if opt.Staged {
		root.Close()
		if err := os.RemoveAll(dir); err != nil {
			s.log.Warn("checkpoint: remove the staging directory", "dir", dir, "err", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saves[id] = sv
	s.figures.Saves++
	s.notifyLocked()
	if s.closed {
		// The next Open resumes it, and holds its bytes again; Close
		// released the holds it found before this one.
		sv.hold.Release()
	} else {
		s.start(sv)
	}
	return s.infoLocked(sv), nil
}

// checkPrefix checks a checkpoint's prefix and returns it ending in '/'.
func checkPrefix(u object.URI) (object.URI, error) {
	if u.Generation != 0 {
		return u, fmt.Errorf("checkpoint: %s: a checkpoint's prefix cannot pin a generation", u)
	}
	if u.Path == "" {
		return u, fmt.Errorf("checkpoint: %s: give a prefix (gs://BUCKET/PREFIX/), not a whole bucket", u)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u, nil
}

// busy returns ErrBusy if this agent holds an unfinished save of u.
func (s *Store) busy(u object.URI) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	for _, sv := range s.saves {
		if sv.j.URI == u.String() && sv.j.Committed == 0 && sv.j.Failed == "" && (!sv.j.Replica || sv.j.TakenOver) {
			return fmt.Errorf("%w: %s is being saved by this agent (save %s)", ErrBusy, u, sv.j.Save)
		}
	}
	return nil
}

// newID returns a fresh save id.
func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
