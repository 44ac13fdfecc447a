package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/daemon"
)

// options are the flags common to every subcommand, and the configuration
// resolved from them and the config file.
type options struct {
	configFile  string
	cacheDir    string
	diskMax     sizeFlag
	shmDir      string
	shmMax      sizeFlag
	promoteHits int
	endpoint    string
	revalidate  time.Duration
	connections int
	slice       sizeFlag
	socket      string
	logLevel    string

	// cfg is resolved before every subcommand runs (resolveConfig):
	// defaults, then the config file, then the flags given. Read it with
	// config().
	cfg      daemon.Config
	resolved bool
}

func newRootCmd() *cobra.Command {
	opts := &options{slice: sizeFlag(32 << 20)}
	root := &cobra.Command{
		Use:   "cacheagent",
		Short: "Cache Google Cloud Storage datasets on local NVMe for ML training",
		Long: `cacheagent turns gs://bucket/prefix into verified files on local NVMe that survive
restarts: parallel sliced downloads, CRC32C verification, generation pinning, a byte
budget with LRU eviction and pinning.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			level := opts.logLevel
			if cmd.Name() == "serve" && !cmd.Flags().Changed("log-level") {
				level = "info"
			}
			if err := setupLogging(level); err != nil {
				return err
			}
			cfg, err := resolveConfig(cmd, opts)
			opts.cfg, opts.resolved = cfg, err == nil
			return err
		},
	}
	f := root.PersistentFlags()
	f.StringVar(&opts.configFile, "config", "", "YAML config file (see scripts/cacheagent.yaml); flags override it")
	f.StringVar(&opts.cacheDir, "cache-dir", defaultCacheDir(), "disk tier directory (data and index)")
	f.Var(&opts.diskMax, "disk-max", "disk tier byte budget, e.g. 300GiB (0 = 90% of the filesystem)")
	f.StringVar(&opts.shmDir, "shm-dir", shmAuto, "shm (hot) tier directory on a tmpfs; auto: /dev/shm/cacheagent with the default --cache-dir, none otherwise; none: no shm tier")
	f.Var(&opts.shmMax, "shm-max", "shm tier byte budget, e.g. 32GiB (0 = a quarter of the tmpfs)")
	f.IntVar(&opts.promoteHits, "promote-hits", 0, "opens within the promotion window that promote an object to shm (0 = 2; negative: only on request)")
	f.StringVar(&opts.endpoint, "endpoint", "", "GCS endpoint, e.g. http://127.0.0.1:4443 (STORAGE_EMULATOR_HOST is honoured too)")
	f.DurationVar(&opts.revalidate, "revalidate", time.Minute, "re-check an object's generation when last checked longer ago than this (negative: never)")
	f.IntVar(&opts.connections, "connections", 64, "process-wide budget of parallel range reads")
	f.Var(&opts.slice, "slice", "slice size of parallel ranged downloads")
	f.StringVar(&opts.socket, "socket", control.DefaultSocket, "the daemon's control socket; subcommands use the daemon when it answers there")
	f.StringVar(&opts.logLevel, "log-level", "warn", "log level: debug, info, warn, error (serve: info)")

	root.AddCommand(
		newServeCmd(opts),
		newPrefetchCmd(opts),
		newCatCmd(opts),
		newLsCmd(opts),
		newStatusCmd(opts),
		newPinCmd(opts, "pin"),
		newPinCmd(opts, "unpin"),
		newPinCmd(opts, "evict"),
		newVerifyCmd(opts),
		newJobsCmd(opts),
		newInspectCmd(opts),
		newLoaderCmd(opts),
		newMountCmd(opts),
		newDemoCmd(opts),
		newBenchCmd(opts),
		newGPUCmd(opts),
		newVersionCmd(),
	)
	return root
}

// newBenchCmd groups the project's benchmarks.
func newBenchCmd(opts *options) *cobra.Command {
	bench := &cobra.Command{
		Use:   "bench",
		Short: "Run the project's benchmarks",
	}
	bench.AddCommand(newBenchGPUCmd(opts), newBenchControlCmd(opts), newBenchControlLoadCmd(opts),
		newBenchLoaderCmd(opts))
	return bench
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

// setupLogging logs text on a terminal and JSON otherwise (journald-friendly).
func setupLogging(level string) error {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	hopts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	if term.IsTerminal(int(os.Stderr.Fd())) {
		h = slog.NewTextHandler(os.Stderr, hopts)
	} else {
		h = slog.NewJSONHandler(os.Stderr, hopts)
	}
	slog.SetDefault(slog.New(h))
	return nil
}

// sizeFlag is a byte count given as "300GiB", "32MiB", "1.5GB" or "1048576".
type sizeFlag int64

func (s *sizeFlag) String() string {
	if *s == 0 {
		return "0"
	}
	return humanize.IBytes(uint64(*s))
}

func (s *sizeFlag) Set(v string) error {
	n, err := humanize.ParseBytes(v)
	if err != nil {
		return fmt.Errorf("bad size %q: %w", v, err)
	}
	if n > 1<<62 {
		return fmt.Errorf("size %q is too large", v)
	}
	*s = sizeFlag(n)
	return nil
}

func (s *sizeFlag) Type() string { return "size" }
