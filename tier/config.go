package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/cacheagent/cacheagent/fetch"
)

// Downloader fetches one generation of an object into dst. *fetch.Downloader
// implements it; it must be safe for concurrent use.
type Downloader interface {
	Fetch(ctx context.Context, a fetch.Attrs, dst io.WriterAt, u *fetch.Urgency) error
}

var _ Downloader = (*fetch.Downloader)(nil)

// Defaults for zero Config fields.
const (
	// DefaultRevalidate is how long a cached generation is served before it
	// is checked against the source again.
	DefaultRevalidate = time.Minute
	// DefaultPrefetchParallelism is how many objects Prefetch keeps in flight.
	DefaultPrefetchParallelism = 64
	// defaultBudgetShare is the share of the filesystem used when MaxBytes is 0.
	defaultBudgetShare = 0.9
)

// Config configures Open. Open never modifies it.
type Config struct {
	// Dir is the cache directory (created if missing). Data files live under
	// Dir/data/xx/<hash>, the index under Dir/index, the lock in Dir/LOCK.
	Dir string
	// MaxBytes is the byte budget of cached files, counted in filesystem
	// blocks (st_blocks*512). 0 means 90% of the filesystem's size at Open.
	MaxBytes int64
	// Revalidate is how long a cached generation is served before Open checks
	// the source for a newer one. 0 means DefaultRevalidate; negative means
	// never (a cached generation is served until evicted).
	Revalidate time.Duration
	// Source answers Stat for misses and revalidation. Required.
	Source fetch.Source
	// Downloader fills the cache. Required.
	Downloader Downloader
	// Logger receives warnings and start-up summaries; nil discards them.
	Logger *slog.Logger
	// PrefetchParallelism is how many objects Prefetch downloads at once.
	// 0 means DefaultPrefetchParallelism.
	PrefetchParallelism int
}

// settings is a validated Config with defaults applied.
type settings struct {
	dir         string
	maxBytes    int64 // 0: derive from the filesystem
	revalidate  time.Duration
	src         fetch.Source
	dl          Downloader
	log         *slog.Logger
	parallelism int
}

// settings validates c and applies defaults, leaving c untouched.
func (c Config) settings() (settings, error) {
	switch {
	case c.Dir == "":
		return settings{}, errors.New("tier: Config.Dir is empty")
	case c.MaxBytes < 0:
		return settings{}, fmt.Errorf("tier: Config.MaxBytes %d is negative", c.MaxBytes)
	case c.Source == nil:
		return settings{}, errors.New("tier: Config.Source is nil")
	case c.Downloader == nil:
		return settings{}, errors.New("tier: Config.Downloader is nil")
	case c.PrefetchParallelism < 0:
		return settings{}, fmt.Errorf("tier: Config.PrefetchParallelism %d is negative", c.PrefetchParallelism)
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return settings{}, fmt.Errorf("tier: cache dir %q: %w", c.Dir, err)
	}
	s := settings{dir: dir, maxBytes: c.MaxBytes, revalidate: c.Revalidate, src: c.Source,
		dl: c.Downloader, log: c.Logger, parallelism: c.PrefetchParallelism}
	if s.revalidate == 0 {
		s.revalidate = DefaultRevalidate
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.parallelism == 0 {
		s.parallelism = DefaultPrefetchParallelism
	}
	return s, nil
}

// OpenOption adjusts one call of Cache.Open.
type OpenOption func(*openConfig)

// openConfig is the per-call configuration of Cache.Open.
type openConfig struct {
	revalidate time.Duration // negative: never
}

// WithRevalidate overrides Config.Revalidate for one Open: the cached
// generation is checked against the source if it was last checked longer ago
// than d. 0 means always check; negative means never.
func WithRevalidate(d time.Duration) OpenOption {
	return func(o *openConfig) { o.revalidate = d }
}
