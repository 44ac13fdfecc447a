package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// Downloader fetches one generation of an object into dst. *fetch.Downloader
// implements it; it must be safe for concurrent use.
type Downloader interface {
	Fetch(ctx context.Context, a object.Attrs, dst io.WriterAt, u *object.Urgency) error
}

var _ Downloader = (*fetch.Downloader)(nil)

// Defaults for zero Config fields.
const (
	// DefaultRevalidate is how long a cached generation is served before it
	// is checked against the source again.
	DefaultRevalidate = time.Minute
	// DefaultPrefetchParallelism is how many objects Prefetch keeps in flight.
	DefaultPrefetchParallelism = 64
	// DefaultPromoteHits is how many Opens within DefaultPromoteWindow copy
	// an object to the shm tier.
	DefaultPromoteHits = 2
	// DefaultPromoteWindow is the window in which PromoteHits Opens promote
	// an object: long enough to span an epoch's revisits of a shard by the
	// ranks of one VM, short enough that one pass over a data set larger than
	// the shm tier does not churn it.
	DefaultPromoteWindow = 10 * time.Minute
	// DefaultPackBelow is Config.PackBelow's default: objects this small
	// cost more in a file's fixed work than in their bytes (see
	// docs/architecture.md, tier).
	DefaultPackBelow = 1 << 20
	// defaultBudgetShare is the share of the filesystem used when MaxBytes is 0.
	defaultBudgetShare = 0.9
	// defaultShmShare is the share of the filesystem used when ShmMaxBytes
	// is 0: a tmpfs is memory, and /dev/shm is shared with the training
	// processes.
	defaultShmShare = 0.25
)

// Config configures Open. Open never modifies it.
//
// The cache has one or two tiers. The base tier holds every cached object:
// Dir (disk, normally local NVMe), or ShmDir when Dir is "" (shm-only). With
// both Dir and ShmDir set, ShmDir is the shm (hot) tier above it: a tmpfs
// holding copies of the objects opened most, a subset of the disk tier.
type Config struct {
	// Dir is the disk tier's directory (created if missing). Data files live
	// under Dir/data/xx/<hash>, the index under Dir/index, the lock in
	// Dir/LOCK. "" makes the cache shm-only (ShmDir is then required).
	Dir string
	// MaxBytes is the disk tier's byte budget, counted in filesystem blocks
	// (st_blocks*512). 0 means 90% of the filesystem's size at Open. Must be
	// 0 when Dir is "".
	MaxBytes int64
	// ShmDir is the shm tier's directory, normally on a tmpfs
	// (/dev/shm/cacheagent); created if missing and locked like Dir. "" (the
	// default) disables the shm tier. In shm-only mode (Dir == "") it holds
	// the index too, in ShmDir/index: a tmpfs does not survive a reboot, and
	// neither does a shm-only cache.
	ShmDir string
	// ShmMaxBytes is the shm tier's byte budget in filesystem blocks. 0
	// means a quarter of the filesystem holding ShmDir, measured at Open.
	ShmMaxBytes int64
	// PromoteHits is how many Opens within PromoteWindow copy an object from
	// the disk tier to the shm tier (in the background; the first Open, a
	// miss, counts). 0 means DefaultPromoteHits; negative disables promotion
	// on hits (Promote and PinHot still promote).
	PromoteHits int
	// PromoteWindow is the window for PromoteHits. Windows are counted per
	// object from the first Open after the previous window ended, so with
	// PromoteHits 2 any two Opens at most PromoteWindow apart promote. 0
	// means DefaultPromoteWindow.
	PromoteWindow time.Duration
	// Revalidate is how long a cached generation is served before Open checks
	// the source for a newer one. 0 means DefaultRevalidate; negative means
	// never (a cached generation is served until evicted).
	Revalidate time.Duration
	// Source answers Stat for misses and revalidation. Required.
	Source object.Source
	// Downloader fills the cache. Required.
	Downloader Downloader
	// Logger receives warnings and start-up summaries; nil discards them.
	Logger *slog.Logger
	// PrefetchParallelism is how many objects Prefetch downloads at once,
	// and the planner too (see Plan). 0 means DefaultPrefetchParallelism;
	// Cache.SetPrefetchParallelism changes it.
	PrefetchParallelism int
	// PackBelow is the size under which objects are packed: appended to
	// segment files of the base tier (page-aligned, synced and indexed in
	// groups) instead of each getting a file of its own. 0 means
	// DefaultPackBelow; negative packs nothing. Changing it leaves objects
	// cached before where they are.
	PackBelow int64

	// hooks, set by tests, observes background work from the start.
	hooks *testHooks
}

// settings is a validated Config with defaults applied.
type settings struct {
	dir           string // the base tier's directory: Dir, or ShmDir when shm-only
	baseTier      Kind   // Disk, or Shm when shm-only
	maxBytes      int64  // base budget; 0: baseShare of the filesystem
	baseShare     float64
	shmDir        string // the hot tier's directory; "" when there is none
	shmMaxBytes   int64  // 0: defaultShmShare of the filesystem
	promoteHits   int    // ≤ 0: no promotion on hits
	promoteWindow time.Duration
	revalidate    time.Duration
	src           object.Source
	dl            Downloader
	log           *slog.Logger
	parallelism   int
	packBelow     int64 // 0: nothing is packed
	warmEntries   int   // the warm set's bound (see trimWarmLocked)
	hooks         *testHooks
}

// settings validates c and applies defaults, leaving c untouched.
func (c Config) settings() (settings, error) {
	if err := c.validate(); err != nil {
		return settings{}, err
	}
	s := settings{baseTier: Disk, maxBytes: c.MaxBytes, baseShare: defaultBudgetShare,
		shmMaxBytes: c.ShmMaxBytes, promoteHits: c.PromoteHits, promoteWindow: c.PromoteWindow,
		revalidate: c.Revalidate, src: c.Source, dl: c.Downloader, log: c.Logger, parallelism: c.PrefetchParallelism,
		hooks: c.hooks, warmEntries: defaultWarmEntries}
	if c.hooks != nil && c.hooks.warmEntries > 0 {
		s.warmEntries = c.hooks.warmEntries
	}
	dir, shm, err := absDirs(c.Dir, c.ShmDir)
	if err != nil {
		return settings{}, err
	}
	s.dir, s.shmDir = dir, shm
	if dir == "" { // shm-only: the shm directory is the base tier
		s.dir, s.shmDir, s.baseTier = shm, "", Shm
		s.maxBytes, s.baseShare, s.shmMaxBytes = c.ShmMaxBytes, defaultShmShare, 0
	}
	if s.promoteHits == 0 {
		s.promoteHits = DefaultPromoteHits
	}
	if s.promoteWindow == 0 {
		s.promoteWindow = DefaultPromoteWindow
	}
	if s.revalidate == 0 {
		s.revalidate = DefaultRevalidate
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.parallelism == 0 {
		s.parallelism = DefaultPrefetchParallelism
	}
	switch {
	case c.PackBelow == 0:
		s.packBelow = DefaultPackBelow
	case c.PackBelow > 0:
		s.packBelow = c.PackBelow
	}
	return s, nil
}

// validate rejects impossible configurations.
func (c Config) validate() error {
	switch {
	case c.Dir == "" && c.ShmDir == "":
		return errors.New("tier: Config.Dir and Config.ShmDir are both empty")
	case c.MaxBytes < 0:
		return fmt.Errorf("tier: Config.MaxBytes %d is negative", c.MaxBytes)
	case c.Dir == "" && c.MaxBytes != 0:
		return errors.New("tier: Config.MaxBytes is set without Config.Dir (shm-only caches use ShmMaxBytes)")
	case c.ShmMaxBytes < 0:
		return fmt.Errorf("tier: Config.ShmMaxBytes %d is negative", c.ShmMaxBytes)
	case c.PromoteWindow < 0:
		return fmt.Errorf("tier: Config.PromoteWindow %v is negative", c.PromoteWindow)
	case c.Source == nil:
		return errors.New("tier: Config.Source is nil")
	case c.Downloader == nil:
		return errors.New("tier: Config.Downloader is nil")
	case c.PrefetchParallelism < 0:
		return fmt.Errorf("tier: Config.PrefetchParallelism %d is negative", c.PrefetchParallelism)
	}
	return nil
}

// absDirs makes the tier directories absolute and checks that neither
// contains the other (each tier removes files it does not know).
func absDirs(dir, shm string) (string, string, error) {
	var err error
	if dir != "" {
		if dir, err = filepath.Abs(dir); err != nil {
			return "", "", fmt.Errorf("tier: cache dir %q: %w", dir, err)
		}
	}
	if shm != "" {
		if shm, err = filepath.Abs(shm); err != nil {
			return "", "", fmt.Errorf("tier: shm dir %q: %w", shm, err)
		}
	}
	if dir != "" && shm != "" && (within(dir, shm) || within(shm, dir)) {
		return "", "", fmt.Errorf("tier: Config.Dir %s and Config.ShmDir %s overlap", dir, shm)
	}
	return dir, shm, nil
}

// within reports whether p is dir or inside it (both clean and absolute).
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// OpenOption adjusts one call of Cache.Open.
type OpenOption func(*openConfig)

// openConfig is the per-call configuration of Cache.Open.
type openConfig struct {
	revalidate  time.Duration // negative: never
	cachedOnly  bool          // a miss is ErrNotCached
	noSpaceWait bool          // a fill it starts fails rather than wait for space
	statMiss    bool          // a miss is stat'ed, never served by listed attributes
}

// NoSpaceWait makes a fill that this Open starts fail with ErrNoSpace
// where it would wait for space (for other fills to finish, with the
// rest of the budget pinned or in use) rather than wait. A peer's request
// uses it: the space may be held by this node's own readers, who may be
// waiting on that peer, and the peer has GCS to turn to. An Open that
// joins a fill already running waits for that fill as usual.
func NoSpaceWait() OpenOption {
	return func(o *openConfig) { o.noSpaceWait = true }
}

// noSpaceWaitKey marks a fill's context: reserve does not wait.
type noSpaceWaitKey struct{}

// errWouldWait is why a NoSpaceWait fill failed: an Open that joined it
// without NoSpaceWait starts over with a fill of its own, which waits.
var errWouldWait = errors.New("would wait for other fills to free space")

// CachedOnly makes one Open serve a cached copy only: where it would
// download (or confirm a generation with the source) it returns an error
// matching ErrNotCached instead.
func CachedOnly() OpenOption {
	return func(o *openConfig) { o.cachedOnly = true }
}

// WithRevalidate overrides Config.Revalidate for one Open: the cached
// generation is checked against the source if it was last checked longer ago
// than d. 0 means always check; negative means never.
func WithRevalidate(d time.Duration) OpenOption {
	return func(o *openConfig) { o.revalidate = d }
}
