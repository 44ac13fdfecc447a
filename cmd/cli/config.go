package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/daemon"
)

// ResolveConfig builds the configuration a subcommand runs with: the
// defaults, then the config file (--config), then the flags given on the
// command line. It reads the file again on every call (serve's reloads).
func ResolveConfig(cmd *cobra.Command, opts *Options) (daemon.Config, error) {
	flags := opts.flagConfig()
	if opts.ConfigFile == "" {
		flags = withShmDefault(flags)
		return flags, flags.Validate()
	}
	cfg, err := daemon.LoadConfig(opts.ConfigFile)
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
		if SameDir(cfg.Tiers.Disk.Dir, defaultCacheDir()) {
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
func (o *Options) flagConfig() daemon.Config {
	return daemon.Config{
		Tiers: daemon.TiersConfig{
			Disk: daemon.TierConfig{Dir: o.CacheDir, Max: daemon.Size(o.DiskMax)},
			Shm:  daemon.TierConfig{Dir: o.ShmDir, Max: daemon.Size(o.ShmMax), PromoteHits: o.PromoteHits},
		},
		Fetch: daemon.FetchConfig{Endpoint: o.Endpoint, Connections: o.Connections, Slice: daemon.Size(o.Slice),
			Revalidate: daemon.Duration(o.Revalidate)},
		Control: daemon.ControlConfig{Socket: o.Socket},
	}.WithDefaults()
}

// Setup sets up logging at level (text on a terminal, JSON otherwise) and
// resolves the configuration cmd runs with (Resolve). The root commands
// run it before every subcommand.
func (o *Options) Setup(cmd *cobra.Command, level string) error {
	if err := setupLogging(level); err != nil {
		return err
	}
	return o.Resolve(cmd)
}

// Resolve resolves the configuration cmd runs with (ResolveConfig) and
// keeps it for Config.
func (o *Options) Resolve(cmd *cobra.Command) error {
	cfg, err := ResolveConfig(cmd, o)
	o.cfg, o.resolved = cfg, err == nil
	return err
}

// Config returns the resolved configuration, or, for options built
// without a command line (tests), the flags' one.
func (o *Options) Config() daemon.Config {
	if o.resolved {
		return o.cfg
	}
	return withShmDefault(o.flagConfig())
}

// SameDir reports whether a and b name the same directory path.
func SameDir(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == bb
}
