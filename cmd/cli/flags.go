package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/pflag"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/daemon"
)

// Options are the flags common to every subcommand, and the configuration
// resolved from them and the config file.
type Options struct {
	ConfigFile  string
	CacheDir    string
	DiskMax     Size
	ShmDir      string
	ShmMax      Size
	PromoteHits int
	Endpoint    string
	Revalidate  time.Duration
	Connections int
	Slice       Size
	Socket      string
	LogLevel    string

	// cfg is resolved before every subcommand runs (Resolve): defaults,
	// then the config file, then the flags given. Read it with Config.
	cfg      daemon.Config
	resolved bool
}

// Register adds the common flags to f (a root command's persistent flags),
// setting the options to their defaults.
func (o *Options) Register(f *pflag.FlagSet) {
	o.Slice = Size(32 << 20)
	f.StringVar(&o.ConfigFile, "config", "", "YAML config file (see scripts/cacheagent.yaml); flags override it")
	f.StringVar(&o.CacheDir, "cache-dir", defaultCacheDir(), "disk tier directory (data and index)")
	f.Var(&o.DiskMax, "disk-max", "disk tier byte budget, e.g. 300GiB (0 = 90% of the filesystem)")
	f.StringVar(&o.ShmDir, "shm-dir", shmAuto, "shm (hot) tier directory on a tmpfs; auto: /dev/shm/cacheagent with the default --cache-dir, none otherwise; none: no shm tier")
	f.Var(&o.ShmMax, "shm-max", "shm tier byte budget, e.g. 32GiB (0 = a quarter of the tmpfs)")
	f.IntVar(&o.PromoteHits, "promote-hits", 0, "opens within the promotion window that promote an object to shm (0 = 2; negative: only on request)")
	f.StringVar(&o.Endpoint, "endpoint", "", "GCS endpoint, e.g. http://127.0.0.1:4443 (STORAGE_EMULATOR_HOST is honoured too)")
	f.DurationVar(&o.Revalidate, "revalidate", time.Minute, "re-check an object's generation when last checked longer ago than this (negative: never)")
	f.IntVar(&o.Connections, "connections", 64, "process-wide budget of parallel range reads")
	f.Var(&o.Slice, "slice", "slice size of parallel ranged downloads")
	f.StringVar(&o.Socket, "socket", control.DefaultSocket, "the daemon's control socket; subcommands use the daemon when it answers there")
	f.StringVar(&o.LogLevel, "log-level", "warn", "log level: debug, info, warn, error (serve: info)")
}

// defaultCacheDir is /var/cache/cacheagent for root (the service) and the
// user's cache directory otherwise.
func defaultCacheDir() string {
	if os.Geteuid() == 0 {
		return "/var/cache/cacheagent"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "cacheagent")
	}
	return filepath.Join(os.TempDir(), "cacheagent")
}

// Size is a byte count flag given as "300GiB", "32MiB", "1.5GB" or
// "1048576".
type Size int64

// String renders the size in IEC units; it implements pflag.Value.
func (s *Size) String() string {
	if *s == 0 {
		return "0"
	}
	return humanize.IBytes(uint64(*s))
}

// Set parses v; it implements pflag.Value.
func (s *Size) Set(v string) error {
	n, err := humanize.ParseBytes(v)
	if err != nil {
		return fmt.Errorf("bad size %q: %w", v, err)
	}
	if n > 1<<62 {
		return fmt.Errorf("size %q is too large", v)
	}
	*s = Size(n)
	return nil
}

// Type implements pflag.Value.
func (s *Size) Type() string { return "size" }
