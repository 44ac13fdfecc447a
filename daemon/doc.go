// Package daemon is the cacheagent daemon: one per machine, shared by every
// training job and rank on it. It owns the cache (tier), the downloader
// (fetch) and serves:
//
//   - the control API (package control documents it) as HTTP/JSON on a
//     Unix socket of mode 0660, never TCP;
//   - Prometheus metrics, /healthz and /readyz on a loopback TCP address
//     (package metrics);
//   - prefetch jobs: warm sources from the config, and prefetches asked for
//     through the API, at warm (or plan) priority, below demand reads;
//   - access plans for the cache's clairvoyant planner, and staging
//     (fetch, promote) for loaders in other processes, whose stats
//     (stall time by cause, samples, batches) it sums into metrics;
//   - optionally, the read-only FUSE mount of the sources (mount.path);
//   - optionally, membership in a fleet of agents (package fleet; the
//     fleet: section), weighted by the disk budget, shown by GET /v1/fleet.
//
// # Usage
//
//	cfg, err := daemon.LoadConfig("/etc/cacheagent/cacheagent.yaml")
//	…
//	d, err := daemon.Start(ctx, cfg.WithDefaults(), daemon.Options{Logger: log})
//	…                                  // ready: notify systemd
//	changed, err := d.Reload(ctx, next) // on SIGHUP or a config edit
//	err = d.Close(shutdownCtx)          // on SIGTERM
//
// cmd/cacheagent's serve command wires signals, systemd notification and
// WatchConfig around it.
//
// # Leases
//
// A lease session is a streaming request (POST /v1/sessions) that the
// daemon holds open; leases acquired in it are tier handles the daemon keeps
// open (the copy is neither evicted nor deleted) until the client releases
// them or the session's request ends. The request ends when its connection
// closes, so a client that crashes or is killed leaves nothing held: the
// kernel closes its socket and net/http cancels the request.
//
// # Shutdown
//
// Close leaves the fleet (so peers stop asking this agent), stops
// accepting connections, cancels jobs and in-flight requests
// (downloads stop; the tier never publishes a partial file), ends every
// lease session, waits for the servers, unmounts, and closes the cache,
// which flushes its index and releases the directory lock.
//
// # Reload
//
// Reload applies the budgets, the connection budget, the scrub and sources
// live.
// Fields that need a restart (directories, the shm budget, endpoint, slice
// size, revalidation, socket, metrics address, mount, gpu, fleet) keep
// their running values; each difference is logged. A new disk budget is
// announced to the fleet as this agent's weight.
//
// # Concurrency
//
// A Daemon is safe for concurrent use. Its parts each have one mutex and
// never hold it during I/O. Lock orders: jobManager.mu before job.mu;
// sessionManager.mu before session.mu. Every goroutine has an owner that
// waits for it: the servers (Daemon.servers), jobs (jobManager.running),
// the scrubber (its own WaitGroup; Close stops it before closing the
// cache), and each request's handler (POST /v1/verify verifies in its
// handler's goroutine).
//
// # Errors
//
// Conditions callers test: ErrConfig (a config that cannot work),
// ErrSocketInUse (another daemon answers on the socket), and the cache's
// own (tier.ErrLocked with *tier.LockedError naming the owner's pid).
// Errors sent to clients carry a code (codeOf, errors.go) that the client maps
// back to the same sentinels.
package daemon
