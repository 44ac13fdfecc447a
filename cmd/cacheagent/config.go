package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/daemon"
)

// dialTimeout bounds reaching the daemon: a socket that accepts but does
// not answer is a wedged daemon, not a missing one.
const dialTimeout = 5 * time.Second

// resolveConfig builds the configuration a subcommand runs with: the
// defaults, then the config file (--config), then the flags given on the
// command line. It reads the file again on every call (serve's reloads).
func resolveConfig(cmd *cobra.Command, opts *options) (daemon.Config, error) {
	flags := opts.flagConfig()
	if opts.configFile == "" {
		flags = withShmDefault(flags)
		return flags, flags.Validate()
	}
	cfg, err := daemon.LoadConfig(opts.configFile)
	if err != nil {
		return daemon.Config{}, err
	}
	f := cmd.Flags()
	// use reports whether the flag's value wins: given, or unset in the file.
	use := func(name string, unset bool) bool { return f.Changed(name) || unset }
	if use("cache-dir", cfg.Tiers.Disk.Dir == "") {
		cfg.Tiers.Disk.Dir = flags.Tiers.Disk.Dir
	}
	if use("disk-max", cfg.Tiers.Disk.Max == 0) {
		cfg.Tiers.Disk.Max = flags.Tiers.Disk.Max
	}
	if use("shm-dir", cfg.Tiers.Shm.Dir == "") {
		cfg.Tiers.Shm.Dir = flags.Tiers.Shm.Dir
	}
	if use("shm-max", cfg.Tiers.Shm.Max == 0) {
		cfg.Tiers.Shm.Max = flags.Tiers.Shm.Max
	}
	if use("promote-hits", cfg.Tiers.Shm.PromoteHits == 0) {
		cfg.Tiers.Shm.PromoteHits = flags.Tiers.Shm.PromoteHits
	}
	if use("endpoint", cfg.Fetch.Endpoint == "") {
		cfg.Fetch.Endpoint = flags.Fetch.Endpoint
	}
	if use("connections", cfg.Fetch.Connections == 0) {
		cfg.Fetch.Connections = flags.Fetch.Connections
	}
	if use("slice", cfg.Fetch.Slice == 0) {
		cfg.Fetch.Slice = flags.Fetch.Slice
	}
	if use("revalidate", cfg.Fetch.Revalidate == 0) {
		cfg.Fetch.Revalidate = flags.Fetch.Revalidate
	}
	if use("socket", cfg.Control.Socket == "") {
		cfg.Control.Socket = flags.Control.Socket
	}
	cfg = withShmDefault(cfg.WithDefaults())
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("flags: %w", err)
	}
	return cfg, nil
}

// shmAuto is --shm-dir's default: the shm tier at defaultShmDir when the
// cache dir is the default one, and none for any other cache dir (an shm
// dir belongs to one cache dir, and its lock says so).
const shmAuto = "auto"

// withShmDefault resolves shmAuto (and "none") in cfg's shm dir.
func withShmDefault(cfg daemon.Config) daemon.Config {
	switch cfg.Tiers.Shm.Dir {
	case "none":
		cfg.Tiers.Shm.Dir = ""
	case shmAuto:
		cfg.Tiers.Shm.Dir = ""
		if sameDir(cfg.Tiers.Disk.Dir, defaultCacheDir()) {
			cfg.Tiers.Shm.Dir = defaultShmDir()
		}
	}
	return cfg
}

// defaultShmDir is /dev/shm/cacheagent for root (the service) and
// /dev/shm/cacheagent-UID for other users.
func defaultShmDir() string {
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Sprintf("/dev/shm/cacheagent-%d", uid)
	}
	return "/dev/shm/cacheagent"
}

// flagConfig is the configuration the flag values alone describe.
func (o *options) flagConfig() daemon.Config {
	return daemon.Config{
		Tiers: daemon.TiersConfig{
			Disk: daemon.TierConfig{Dir: o.cacheDir, Max: daemon.Size(o.diskMax)},
			Shm:  daemon.TierConfig{Dir: o.shmDir, Max: daemon.Size(o.shmMax), PromoteHits: o.promoteHits},
		},
		Fetch: daemon.FetchConfig{Endpoint: o.endpoint, Connections: o.connections, Slice: daemon.Size(o.slice),
			Revalidate: daemon.Duration(o.revalidate)},
		Control: daemon.ControlConfig{Socket: o.socket},
	}.WithDefaults()
}

// config returns the resolved configuration, or, for options built
// without a command line (tests), the flags' one.
func (o *options) config() daemon.Config {
	if o.resolved {
		return o.cfg
	}
	return withShmDefault(o.flagConfig())
}

// dialDaemon returns a client of the daemon on the configured socket, or
// nil if none answers there (the caller works standalone). A daemon that
// serves another cache directory than an explicit --cache-dir is not used.
func dialDaemon(cmd *cobra.Command, opts *options) (*control.Client, error) {
	socket := opts.config().Control.Socket
	ctx, cancel := context.WithTimeout(cmd.Context(), dialTimeout)
	defer cancel()
	c, err := control.Dial(ctx, socket)
	switch {
	case errors.Is(err, control.ErrUnavailable):
		slog.Debug("no daemon answers; working standalone", "socket", socket, "err", err)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("daemon socket %s: %w", socket, err)
	}
	if cmd.Flags().Changed("cache-dir") && !sameDir(c.Info().CacheDir, opts.config().Tiers.Disk.Dir) {
		slog.Debug("the daemon serves another cache dir; working standalone",
			"daemon_dir", c.Info().CacheDir, "cache_dir", opts.config().Tiers.Disk.Dir)
		c.Close()
		return nil, nil
	}
	return c, nil
}

// sameDir reports whether a and b name the same directory path.
func sameDir(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == bb
}

// withCache runs remote through the daemon when one answers, and local on
// the cache directory otherwise.
func withCache(cmd *cobra.Command, opts *options, remote func(*control.Client) error, local func(*agent) error) error {
	c, err := dialDaemon(cmd, opts)
	if err != nil {
		return err
	}
	if c != nil {
		defer c.Close()
		return remote(c)
	}
	a, err := openAgent(cmd.Context(), opts)
	if err != nil {
		return err
	}
	defer a.Close()
	return local(a)
}
