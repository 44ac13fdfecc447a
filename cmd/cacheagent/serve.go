package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/daemon"
)

// shutdownTimeout bounds a graceful shutdown; systemd's TimeoutStopSec is
// longer (the unit says 15s).
const shutdownTimeout = 8 * time.Second

// statusEvery is how often systemd's STATUS= line is refreshed.
const statusEvery = 10 * time.Second

func newServeCmd(opts *cli.Options) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: control socket, metrics, warm sources, live config reload",
		Long: `serve runs the cacheagent daemon, one per machine, shared by every job and rank on it.
It reads --config (flags override it), opens the cache (reconciling its index),
listens on the control socket and the metrics address, tells systemd it is
ready, and prefetches the warm sources. SIGHUP, or an edit of the config file,
reloads budgets, sources and the connection budget live; SIGTERM or SIGINT shuts
it down gracefully.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, opts) },
	}
}

// defaultGCPercent is the daemon's GOGC unless the environment sets one:
// its heap is mostly the cache's index, long-lived, and allocation is low
// between bursts, so half the default headroom costs little CPU and keeps
// the resident size near the live heap (docs/operations.md, Memory).
//
// serve sets no GOMEMLIMIT by default: the live heap grows with the number
// of cached objects (about 270 bytes each), so any fixed limit is one that
// a large enough cache reaches, after which the collector runs back to
// back; and at GOGC=50 the RSS with 100k cached objects measures 117-145
// MiB, binary included (docs/benchmarks.md, Daemon). Operators who want a
// cap set GOMEMLIMIT themselves.
const defaultGCPercent = 50

// runServe runs the daemon until a signal stops it.
func runServe(cmd *cobra.Command, opts *cli.Options) error {
	ctx, log := cmd.Context(), slog.Default()
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	d, err := daemon.Start(ctx, opts.Config(), daemon.Options{Logger: log, Version: buildVersion(),
		ConfigFile: opts.ConfigFile})
	if err != nil {
		return err
	}
	notify(log, sd.SdNotifyReady)
	notify(log, "STATUS="+d.StatusLine())

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reloads := make(chan string, 1) // coalesces reload requests
	request := func(why string) {
		select {
		case reloads <- why:
		default:
		}
	}
	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { keepAlive(bg, d, log) })
	if opts.ConfigFile != "" {
		cw, err := daemon.WatchConfig(opts.ConfigFile)
		if err != nil {
			log.Warn("not watching the config file; reload with SIGHUP", "err", err)
		} else {
			wg.Go(func() { cw.Run(bg, daemon.DefaultDebounce, log, func() { request("config file changed") }) })
		}
	}
	runErr := serveLoop(ctx, cmd, opts, d, hup, reloads)
	stopBG()
	wg.Wait()

	notify(log, sd.SdNotifyStopping)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	return errors.Join(runErr, d.Close(sctx))
}

// serveLoop handles reloads until ctx ends (SIGTERM, SIGINT) or a server
// fails.
func serveLoop(ctx context.Context, cmd *cobra.Command, opts *cli.Options, d *daemon.Daemon,
	hup <-chan os.Signal, reloads <-chan string) error {
	log := slog.Default()
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down", "cause", context.Cause(ctx))
			return nil
		case err := <-d.Failed():
			return err
		case <-hup:
			reload(ctx, cmd, opts, d, "SIGHUP")
		case why := <-reloads:
			reload(ctx, cmd, opts, d, why)
		}
	}
}

// reload re-reads the config file, applies the flags again and hands the
// result to the daemon. A bad config changes nothing.
func reload(ctx context.Context, cmd *cobra.Command, opts *cli.Options, d *daemon.Daemon, why string) {
	log := slog.Default()
	cfg, err := cli.ResolveConfig(cmd, opts)
	if err != nil {
		d.ReloadFailed(err)
		log.Error("config reload failed; keeping the running config", "trigger", why, "err", err)
		return
	}
	changed, err := d.Reload(ctx, cfg)
	if err != nil {
		log.Error("config reload failed; keeping the running config", "trigger", why, "err", err)
		return
	}
	log.Info("config reloaded", "trigger", why, "changed", changed)
	notify(log, "STATUS="+d.StatusLine())
}

// keepAlive pings systemd's watchdog at half its interval while the
// daemon is healthy, and refreshes STATUS= every statusEvery, until ctx
// ends.
func keepAlive(ctx context.Context, d *daemon.Daemon, log *slog.Logger) {
	status := time.NewTicker(statusEvery)
	defer status.Stop()
	var ping <-chan time.Time
	if wd, err := sd.SdWatchdogEnabled(false); err != nil {
		log.Warn("systemd watchdog", "err", err)
	} else if wd > 0 {
		t := time.NewTicker(wd / 2)
		defer t.Stop()
		ping = t.C
		log.Info("systemd watchdog on", "interval", wd.String())
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping:
			if d.Healthy() {
				notify(log, sd.SdNotifyWatchdog)
			}
		case <-status.C:
			notify(log, "STATUS="+d.StatusLine())
		}
	}
}

// notifyTimeout bounds one notification. sd.SdNotify would block for as
// long as the receiver does not read (its queue holds a few datagrams),
// which would hold up the watchdog loop and, through it, shutdown.
const notifyTimeout = time.Second

// notify sends state to systemd if it listens ($NOTIFY_SOCKET, "@" for an
// abstract socket), giving up after notifyTimeout.
func notify(log *slog.Logger, state string) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err == nil {
		conn.SetWriteDeadline(time.Now().Add(notifyTimeout))
		_, err = conn.Write([]byte(state))
		conn.Close()
	}
	if err != nil {
		log.Warn("systemd notify", "state", state, "err", err)
	}
}

// buildVersion is the module version the binary was built from.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}
