package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

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
	src, err := fetch.NewGCS(ctx, fetch.GCSConfig{Endpoint: cfg.Fetch.Endpoint})
	if err != nil {
		return nil, err
	}
	dl, err := fetch.NewDownloader(src, cfg.Fetch.Downloader())
	if err != nil {
		src.Close()
		return nil, err
	}
	cache, err := tier.Open(ctx, tier.Config{
		Dir:         cfg.Tiers.Disk.Dir,
		MaxBytes:    int64(cfg.Tiers.Disk.Max),
		ShmDir:      cfg.Tiers.Shm.Dir,
		ShmMaxBytes: int64(cfg.Tiers.Shm.Max),
		PromoteHits: cfg.Tiers.Shm.PromoteHits,
		Revalidate:  time.Duration(cfg.Fetch.Revalidate),
		Source:      src,
		Downloader:  dl,
		Logger:      slog.Default(),
	})
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

// gsURI is a parsed gs://bucket/path.
type gsURI struct {
	Bucket string
	Path   string // object name or prefix; may be empty
}

func (u gsURI) String() string { return "gs://" + u.Bucket + "/" + u.Path }

// parseGS parses gs://BUCKET[/PATH]. The path is kept verbatim: object names
// may contain anything GCS allows, including "..", and are never used as
// local paths.
func parseGS(s string) (gsURI, error) {
	rest, ok := strings.CutPrefix(s, "gs://")
	if !ok {
		return gsURI{}, fmt.Errorf("%q is not a gs://BUCKET/PATH URI", s)
	}
	bucket, path, _ := strings.Cut(rest, "/")
	if bucket == "" {
		return gsURI{}, fmt.Errorf("%q has no bucket", s)
	}
	return gsURI{Bucket: bucket, Path: path}, nil
}
