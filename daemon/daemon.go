package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/fleet"
	"github.com/cacheagent/cacheagent/metrics"
	"github.com/cacheagent/cacheagent/mount"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
	"github.com/cacheagent/cacheagent/tier"
)

// Options are the parts of a daemon that do not come from its config.
type Options struct {
	// Logger receives the daemon's logs; nil discards them.
	Logger *slog.Logger
	// Version is reported by status and metrics.
	Version string
	// ConfigFile is the config's path, for status; "" if none.
	ConfigFile string
}

// Daemon is a running cacheagent daemon: the cache, the downloader, the
// control server on a Unix socket and the metrics server. Create it with
// Start and stop it with Close. Its methods are safe for concurrent use.
type Daemon struct {
	// Immutable after Start.
	opts     Options
	log      *slog.Logger
	started  time.Time
	src      *fetch.GCS
	dl       *fetch.Downloader
	cache    *tier.Cache
	met      *metrics.Metrics
	stats    *statsCache
	jobs     *jobManager
	sessions *sessionManager
	lsess    *loaderSessions // loader sessions and the data socket
	plans    *planStore
	ctrl     *http.Server
	ctrlLn   net.Listener
	metSrv   *http.Server // nil when metrics are off
	metLn    net.Listener
	mnt      *mount.Server // nil without mount.path
	scrub    *scrubber     // the background scrub (idle when off)
	fleet    *fleet.Fleet  // nil without a fleet: section
	peers    *peerPlane    // the fleet's data plane; nil without a fleet: section
	ckpt     *CheckpointStore
	// ckptFleet carries checkpoint replicas; nil without a fleet.
	ckptFleet *ckptFleet
	// stopRequests cancels the context of every control request, ending
	// lease sessions and job watches at shutdown.
	stopRequests context.CancelFunc
	failed       chan error     // a server that stopped on its own; buffered
	servers      sync.WaitGroup // the server goroutines
	ready        atomic.Bool

	// reloadMu serialises Reload; it is taken before mu.
	reloadMu sync.Mutex

	mu     sync.Mutex // protects cfg and closed
	cfg    Config     // the running config (restart-only fields as started)
	closed bool
}

// Start opens the cache in cfg (taking its lock and reconciling the index
// with the data files), listens on the control socket and the metrics
// address, starts serving, and starts warming the warm sources. When it
// returns the daemon is ready. cfg must have its defaults applied and the
// disk tier's directory set.
func Start(ctx context.Context, cfg Config, opts Options) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Tiers.Disk.Dir == "" {
		return nil, fmt.Errorf("%w: tiers.disk.dir is empty", ErrConfig)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{opts: opts, log: log, started: time.Now(), cfg: cfg,
		failed: make(chan error, 2)}
	if err := d.openCache(ctx, cfg); err != nil {
		return nil, err
	}
	if err := d.openCheckpoints(ctx, cfg); err != nil {
		return nil, errors.Join(err, d.closeCache())
	}
	if err := d.startFleet(ctx, cfg); err != nil {
		return nil, errors.Join(err, d.closeCache())
	}
	if err := d.listen(cfg); err != nil {
		err = errors.Join(err, d.closeFleet(ctx))
		d.servers.Wait() // the fleet's goroutines
		return nil, errors.Join(err, d.closeCache())
	}
	if err := d.mount(ctx, cfg); err != nil {
		d.stopRequests()
		d.ctrlLn.Close()
		if d.metLn != nil {
			d.metLn.Close()
		}
		err = errors.Join(err, d.closeFleet(ctx))
		d.servers.Wait() // the fleet's goroutines
		return nil, errors.Join(err, d.closeCache())
	}
	d.serve()
	d.scrub = startScrubber(d.cache, d.log, cfg.Tiers.Scrub)
	d.ready.Store(true)
	for _, s := range cfg.Sources {
		if s.Warm {
			d.warm(s.URI)
		}
	}
	log.Info("daemon ready", "cache_dir", cfg.Tiers.Disk.Dir, "socket", cfg.Control.Socket,
		"metrics", d.MetricsAddr(), "entries", d.stats.get().Base().Entries)
	return d, nil
}

// openCache creates the source, the downloader, the metrics and the cache.
func (d *Daemon) openCache(ctx context.Context, cfg Config) error {
	src, err := fetch.NewGCS(ctx, cfg.Fetch.GCS())
	if err != nil {
		return err
	}
	dl, err := fetch.NewDownloader(src, cfg.Fetch.Downloader())
	if err != nil {
		src.Close()
		return err
	}
	d.src, d.dl = src, dl
	var tsrc object.Source = src
	var tdl tier.Downloader = dl
	if cfg.Fleet != nil { // the tier reads through the peers
		p, err := newPeerPlane(src, cfg.Fleet, cfg.Fetch.Downloader())
		if err != nil {
			src.Close()
			return err
		}
		d.peers, tsrc, tdl = p, p.src, p.dl
	}
	d.jobs = newJobManager(d.log)
	d.sessions = newSessionManager(d.log)
	d.plans = newPlanStore()
	d.met = metrics.New(d.opts.Version, d.metricSources())
	d.lsess = newLoaderSessions(d)
	cache, err := tier.Open(ctx, cfg.Tier(tsrc, d.met.WrapDownloader(tdl), d.log))
	if err != nil {
		d.closeSources()
		return err
	}
	d.cache = cache
	d.jobs.cache, d.jobs.src = cache, src
	d.stats = newStatsCache(cache)
	d.jobs.onChange = d.stats.invalidate
	if d.peers != nil { // a fleet node balances its owners over each whole listing
		d.jobs.onList = d.fleetListed
		d.jobs.prefetch = d.prefetchObjects
	}
	return nil
}

// closeCache closes the checkpoint store (if open), the cache and the
// sources.
func (d *Daemon) closeCache() error {
	return errors.Join(d.closeCheckpoints(), d.cache.Close(), d.closeSources())
}

// closeSources closes the peer source, if any, and the GCS source.
func (d *Daemon) closeSources() error {
	var err error
	if d.peers != nil {
		err = d.peers.src.Close()
	}
	return errors.Join(err, d.src.Close())
}

// fetchStats returns the downloads' figures: with a fleet, both budgets'.
func (d *Daemon) fetchStats() stats.Fetch {
	if d.peers != nil {
		return d.peers.fetchStats()
	}
	return d.dl.Stats()
}

// mount serves the cache at cfg.Mount.Path, showing the sources; with no
// sources the mount is dynamic (any bucket, on its first lookup).
func (d *Daemon) mount(ctx context.Context, cfg Config) error {
	if cfg.Mount.Path == "" {
		return nil
	}
	var roots []mount.Root
	for _, s := range cfg.Sources {
		roots = append(roots, mount.Root{Bucket: s.URI.Bucket, Prefix: s.URI.Path})
	}
	srv, err := mount.Mount(ctx, cfg.Mount.Path, mount.Config{Cache: d.cache, Source: d.src, Roots: roots,
		AllowOther: true, Open: cfg.Mount.OpenMode(), Logger: d.log})
	if err != nil {
		return fmt.Errorf("daemon: mount: %w", err)
	}
	d.mnt = srv
	d.log.Info("mounted", "path", srv.Mountpoint(), "passthrough", srv.Passthrough(), "open", srv.Opening().String())
	return nil
}

// unmount unmounts the mount, if any, and waits within ctx for the files
// still open on it to be closed.
func (d *Daemon) unmount(ctx context.Context) error {
	if d.mnt == nil {
		return nil
	}
	err := d.mnt.Unmount()
	select {
	case <-d.mnt.Done():
	case <-ctx.Done():
		d.log.Warn("files still open on the mount at shutdown", "path", d.mnt.Mountpoint())
	}
	return err
}

// Config returns the running config.
func (d *Daemon) Config() Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

// Ready reports whether the daemon serves (between Start and Close).
func (d *Daemon) Ready() bool { return d.ready.Load() }

// Failed returns a channel that yields an error if a server stops on its
// own (its listener failed); the daemon should then be closed.
func (d *Daemon) Failed() <-chan error { return d.failed }

// Healthy checks that the cache answers (its lock is not wedged); it is
// what the systemd watchdog pings on.
func (d *Daemon) Healthy() bool {
	d.stats.get()
	return d.ready.Load()
}

// Close shuts the daemon down within ctx: it leaves the fleet (if any),
// stops accepting requests, cancels jobs and in-flight requests (downloads stop; nothing half-written
// is ever published), ends lease sessions, waits for the servers, then
// closes the cache (flushing its index) and the source. A second Close
// returns an error matching tier.ErrClosed.
func (d *Daemon) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fmt.Errorf("daemon: close: %w", tier.ErrClosed)
	}
	d.closed = true
	d.mu.Unlock()
	d.ready.Store(false)
	var errs []error
	errs = append(errs, d.closeFleet(ctx)) // first: peers stop asking this node
	d.jobs.close()
	d.stopRequests()
	errs = append(errs, shutdown(ctx, d.ctrl))
	if d.metSrv != nil {
		errs = append(errs, shutdown(ctx, d.metSrv))
	}
	d.servers.Wait()
	d.jobs.wait()
	d.scrub.close()
	d.sessions.close()
	d.lsess.close()
	errs = append(errs, d.unmount(ctx), d.closeCache())
	d.log.Info("daemon stopped", "uptime", time.Since(d.started).Round(time.Second).String())
	return errors.Join(errs...)
}

// shutdown stops srv gracefully within ctx, then forcibly.
func shutdown(ctx context.Context, srv *http.Server) error {
	err := srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, srv.Close())
	}
	return err
}

// serve starts the servers' goroutines.
func (d *Daemon) serve() {
	run := func(name string, srv *http.Server, ln net.Listener) {
		d.servers.Go(func() {
			err := srv.Serve(ln)
			if !errors.Is(err, http.ErrServerClosed) {
				d.log.Error(name+" server failed", "err", err)
				d.failed <- fmt.Errorf("daemon: %s server: %w", name, err)
			}
		})
	}
	run("control", d.ctrl, d.ctrlLn)
	if d.metSrv != nil {
		run("metrics", d.metSrv, d.metLn)
	}
}

// MetricsAddr returns the metrics server's address, "" when off.
func (d *Daemon) MetricsAddr() string {
	if d.metLn == nil {
		return ""
	}
	return d.metLn.Addr().String()
}

// pid is the process id, for status.
var pid = os.Getpid()
