package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cacheagent/cacheagent/control"
)

// DialTimeout bounds reaching the daemon: a socket that accepts but does
// not answer is a wedged daemon, not a missing one.
const DialTimeout = 5 * time.Second

// DialDaemon returns a client of the daemon on the configured socket, or
// nil if none answers there (the caller works standalone). A daemon that
// serves another cache directory than an explicit --cache-dir
// (cacheDirGiven) is not used.
func DialDaemon(ctx context.Context, opts *Options, cacheDirGiven bool) (*control.Client, error) {
	socket := opts.Config().Control.Socket
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	c, err := control.Dial(ctx, socket)
	switch {
	case errors.Is(err, control.ErrUnavailable):
		slog.Debug("no daemon answers; working standalone", "socket", socket, "err", err)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("daemon socket %s: %w", socket, err)
	}
	if cacheDirGiven && !SameDir(c.Info().CacheDir, opts.Config().Tiers.Disk.Dir) {
		slog.Debug("the daemon serves another cache dir; working standalone",
			"daemon_dir", c.Info().CacheDir, "cache_dir", opts.Config().Tiers.Disk.Dir)
		c.Close()
		return nil, nil
	}
	return c, nil
}
