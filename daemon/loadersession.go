package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/formats"
	"github.com/cacheagent/cacheagent/loader/ring"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// Loader session limits.
const (
	maxLoaderSlots = 64
	maxRingBytes   = 64 << 30
	// idsArray names the array of the samples' ids, the ring's last.
	idsArray = "ids"
)

// loaderSession is one client's loader and ring. openLoaderSession builds
// it; the handler's goroutine runs it (run) and frees it (free).
type loaderSession struct {
	// Immutable after openLoaderSession.
	d      *Daemon
	id     string
	token  string
	info   control.LoaderSession
	cfg    loader.Config // the first loader's; a Seek changes epochs and resume
	layout ring.Layout
	ring   *ring.Ring
	store  *mmapstore.Store
	attach chan *ring.Conn // the client's data connection, sent once by the manager

	joined bool // a client joined (attach was sent); guarded by loaderSessions.mu

	// Owned by the goroutine running the session.
	l     *loader.Loader // the current loader, nil after a failed Seek
	alloc int            // NewBuffer calls during the current loader.New
}

// openLoaderSession validates sp, builds the dataset (reading the shards'
// headers), creates the ring and starts the loader. Malformed requests
// are errors matching control.ErrInvalid; missing objects or buckets
// object.ErrNotFound.
func (d *Daemon) openLoaderSession(ctx context.Context, sp spec.Spec) (*loaderSession, error) {
	cfg, err := loader.ResolveSettings(sp)
	if err != nil {
		return nil, invalid(err)
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = loader.DefaultPrefetch
	}
	switch {
	case cfg.Prefetch > maxLoaderSlots:
		return nil, invalid(fmt.Errorf("%w: prefetch %d: want 1 to %d slots", loader.ErrConfig, cfg.Prefetch, maxLoaderSlots))
	case cfg.FieldBytes > maxRingBytes:
		return nil, invalid(fmt.Errorf("%w: field_bytes %d: want 0 to %d", loader.ErrConfig, cfg.FieldBytes, int64(maxRingBytes)))
	}
	// The store lends WebDataset tars to index them, then the loader's
	// shards.
	store := mmapstore.New(d.cache.Opener(), mmapstore.Config{Logger: d.log})
	s, err := d.newLoaderSession(ctx, sp, cfg, store)
	if err != nil {
		if cerr := store.Close(); cerr != nil {
			d.log.Warn("loader session: close store", "err", cerr)
		}
		return nil, err
	}
	return s, nil
}

// newLoaderSession is openLoaderSession once the settings are checked: on
// error the caller closes store.
func (d *Daemon) newLoaderSession(ctx context.Context, sp spec.Spec, cfg loader.Config,
	store *mmapstore.Store) (*loaderSession, error) {
	var err error
	if cfg.Dataset, err = loader.ResolveDataset(ctx, sp, d.loaderEnv(store)); err != nil {
		return nil, invalid(err)
	}
	s := &loaderSession{d: d, id: newID(), token: newToken(), attach: make(chan *ring.Conn, 1), store: store}
	cfg.Planner, cfg.PlanID, cfg.Stager = sessionPlanner{d}, "loader-session-"+s.id, d.cache.Stager()
	cfg.CopyAlways, cfg.NewBuffer, cfg.Logger = true, s.newBuffer, d.log
	layout, err := loader.LayoutOf(cfg)
	if err != nil {
		return nil, invalid(err)
	}
	arrays, err := ringArrays(layout, cfg.BatchSize)
	if err != nil {
		return nil, invalid(err)
	}
	if s.layout, err = ring.NewLayout(cfg.BatchSize, arrays); err != nil {
		return nil, invalid(err)
	}
	if s.layout.SlotBytes > maxRingBytes/cfg.Prefetch {
		return nil, fmt.Errorf("%w: %d slots of %d bytes exceed the %d-byte limit of a ring", control.ErrInvalid,
			cfg.Prefetch, s.layout.SlotBytes, int64(maxRingBytes))
	}
	if s.ring, err = ring.New("cacheagent-loader-"+s.id, cfg.Prefetch, s.layout.SlotBytes); err != nil {
		return nil, err
	}
	s.cfg = cfg
	if s.l, err = s.newLoader(cfg); err != nil {
		s.l = nil
		if cerr := s.ring.Close(); cerr != nil {
			d.log.Warn("loader session: close ring", "session", s.id, "err", cerr)
		}
		return nil, invalid(err)
	}
	st := s.l.State()
	fields := make([]string, len(layout.Fields))
	for j, f := range layout.Fields {
		fields[j] = f.Name
	}
	s.info = control.LoaderSession{Protocol: ring.Protocol, Session: s.id, Token: s.token,
		RingBytes: int64(len(s.ring.Bytes())), SlotBytes: int64(s.layout.SlotBytes), Slots: cfg.Prefetch,
		BatchSize: cfg.BatchSize, Format: cfg.Dataset.FormatName(), Arrays: arrays,
		Fields: fields, BatchesPerEpoch: s.l.BatchesPerEpoch(),
		Start: spec.State{Epoch: st.Epoch, Batch: st.Batch, Fingerprint: st.Fingerprint}}
	return s, nil
}

// loaderEnv is what loader sessions build their datasets through: the
// daemon's source for listings and headers, store for whole shards (a
// WebDataset tar, indexed once: the indexes are kept under the disk
// tier's directory, as `cacheagent loader` keeps them), and every format.
func (d *Daemon) loaderEnv(store *mmapstore.Store) loader.Env {
	return loader.Env{Source: d.src, Records: loader.FromStore(store),
		Index: loader.DirIndex(filepath.Join(d.Config().Tiers.Disk.Dir, "wds-index")), Formats: formats.All}
}

// invalid marks the loader's and the ring's validation errors as
// control.ErrInvalid; others (object.ErrNotFound, …) pass as they are.
func invalid(err error) error {
	for _, e := range []error{loader.ErrDataset, loader.ErrManifest, loader.ErrPattern, loader.ErrConfig,
		loader.ErrResume, sampler.ErrConfig, ring.ErrLayout, object.ErrInvalidName} {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: %w", control.ErrInvalid, err)
		}
	}
	return err
}

// newLoader starts a loader on cfg whose buffers are the ring's slots.
func (s *loaderSession) newLoader(cfg loader.Config) (*loader.Loader, error) {
	s.alloc = 0
	return loader.New(loader.FromStore(s.store), cfg)
}

// newBuffer is the loaders' NewBuffer: a loader allocates its slots one
// after the other, each one buffer per dataset array in order, so slot k's
// array j is the ring's slot k's payload j. The buffer's capacity is the
// payload's (at least a page), so that every buffer has its own address.
func (s *loaderSession) newBuffer(n int) ([]byte, error) {
	arrays := len(s.layout.Arrays) - 1 // the ids are the session's to write
	k, j := s.alloc/arrays, s.alloc%arrays
	s.alloc++
	if k >= s.ring.Slots() || n > s.layout.Capacity[j] {
		return nil, fmt.Errorf("daemon: loader buffer %d (slot %d, array %d) of %d bytes does not fit the ring",
			s.alloc-1, k, j, n)
	}
	off := s.layout.Offsets[j]
	return s.ring.Slot(k)[off : off+n : off+s.layout.Capacity[j]], nil
}

// free closes the loader, the store and the ring. Batches the client held
// were released by run.
func (s *loaderSession) free() {
	var errs []error
	if s.l != nil {
		errs = append(errs, s.l.Close())
	}
	errs = append(errs, s.store.Close(), s.ring.Close())
	if err := errors.Join(errs...); err != nil {
		s.d.log.Warn("loader session: free", "session", s.id, "err", err)
	}
}

// sessionPlanner is a session's loader's Planner: the daemon's cache, and
// the plan store, so that the plans show in GET /v1/plans and the loaders'
// stats in the metrics, as for loaders in other processes.
type sessionPlanner struct{ d *Daemon }

// Plan implements loader.Planner.
func (p sessionPlanner) Plan(ctx context.Context, id string, objs []object.Object) error {
	if err := p.d.plans.admit(id); err != nil {
		return err
	}
	if err := p.d.cache.Plan(ctx, id, objs); err != nil {
		return err
	}
	p.d.plans.put(control.Plan{ID: id, Objects: len(objs), Created: time.Now()})
	return nil
}

// AdvancePlan implements loader.Planner.
func (p sessionPlanner) AdvancePlan(ctx context.Context, id string, pos int) error {
	if err := p.d.cache.AdvancePlan(ctx, id, pos); err != nil {
		return err
	}
	p.d.plans.advance(id, pos)
	return nil
}

// DropPlan implements loader.Planner.
func (p sessionPlanner) DropPlan(ctx context.Context, id string) error {
	p.d.plans.remove(id)
	return p.d.cache.DropPlan(ctx, id)
}

// ReportStats implements loader.StatsReporter.
func (p sessionPlanner) ReportStats(_ context.Context, id string, st stats.Loader) error {
	p.d.plans.report(id, st)
	return nil
}
