package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cacheagent/cacheagent/daemon"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/tier"
)

// Agent is the standalone wiring of source, downloader and disk tier that the
// subcommands share. Close releases the cache directory.
type Agent struct {
	Source *fetch.GCS // where the cache fills from
	dl     *fetch.Downloader
	Cache  *tier.Cache // the cache directory's tiers, locked
}

// OpenAgent connects to GCS and opens the cache directory, taking its lock,
// as cfg (the resolved config, Options.Config) says. If another process holds
// the lock, the error names its pid and the socket where no daemon answered.
func OpenAgent(ctx context.Context, cfg daemon.Config) (*Agent, error) {
	src, err := fetch.NewGCS(ctx, cfg.Fetch.GCS())
	if err != nil {
		return nil, err
	}
	dl, err := fetch.NewDownloader(src, cfg.Fetch.Downloader())
	if err != nil {
		src.Close()
		return nil, err
	}
	cache, err := tier.Open(ctx, cfg.Tier(src, dl, slog.Default()))
	if err != nil {
		src.Close()
		if le := (*tier.LockedError)(nil); errors.As(err, &le) {
			return nil, fmt.Errorf("%w, and no daemon answers on %s: stop that process, "+
				"or point --socket (or --config) at its daemon", err, cfg.Control.Socket)
		}
		return nil, err
	}
	return &Agent{Source: src, dl: dl, Cache: cache}, nil
}

// Close flushes the index and releases the cache directory.
func (a *Agent) Close() error {
	err := a.Cache.Close()
	return errors.Join(err, a.Source.Close())
}
