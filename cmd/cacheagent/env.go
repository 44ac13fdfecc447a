package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/tier"
)

// agent is the standalone wiring of source, downloader and disk tier that the
// subcommands share. Close releases the cache directory.
type agent struct {
	src   *fetch.GCS
	dl    *fetch.Downloader
	cache *tier.Cache
}

// openAgent connects to GCS and opens the cache directory, taking its lock,
// as the resolved config (opts.config()) says. If another process holds the
// lock, the error names its pid and the socket where no daemon answered.
func openAgent(ctx context.Context, opts *options) (*agent, error) {
	cfg := opts.config()
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
	return &agent{src: src, dl: dl, cache: cache}, nil
}

// Close flushes the index and releases the cache directory.
func (a *agent) Close() error {
	err := a.cache.Close()
	return errors.Join(err, a.src.Close())
}
