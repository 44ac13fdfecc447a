package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/metrics"
	"github.com/cacheagent/cacheagent/tier"
)

// statsTTL is how long an encoded status is reused. tier.Cache.Stats is
// O(1) (the tiers keep their figures as they change), but encoding the
// whole status costs an allocation-heavy JSON marshal, and every byte a
// request allocates brings the next garbage collection closer, which with
// a large index is what delays requests: under many clients, status
// serves one encoding for up to statsTTL. The daemon's own changes (pin,
// evict, leases, reloads) invalidate it.
const statsTTL = 250 * time.Millisecond

// statsCache reads the cache's stats and shares the encoded status. Lock
// order: rebuild, then bodyMu, then the cache's locks (Stats takes them).
type statsCache struct {
	cache *tier.Cache  // immutable
	epoch atomic.Int64 // advanced by invalidate

	// rebuild is held by the one request rebuilding the status body.
	rebuild sync.Mutex

	bodyMu    sync.Mutex // protects the fields below; never held during a rebuild
	bodyAt    time.Time
	bodyEpoch int64
	body      []byte // the encoded status, nil if none yet
}

func newStatsCache(c *tier.Cache) *statsCache { return &statsCache{cache: c} }

// get returns the cache's stats now. It takes the cache's lock briefly
// (O(1)), which is also what Healthy checks.
func (c *statsCache) get() tier.Stats { return c.cache.Stats() }

// invalidate makes the next status fresh.
func (c *statsCache) invalidate() { c.epoch.Add(1) }

// statusBody returns the encoded status (GET /v1/status), rebuilt at most
// every statsTTL: under many clients, status costs a buffer copy. A body
// older than statsTTL is rebuilt by one request while the others are
// served the previous one; one from before an invalidation is never
// served.
func (d *Daemon) statusBody() ([]byte, error) {
	c := d.stats
	epoch := c.epoch.Load()
	body, fresh := c.cachedBody(epoch)
	switch {
	case fresh:
		return body, nil
	case body != nil: // current but old: rebuild unless another request does
		if !c.rebuild.TryLock() {
			return body, nil
		}
	default:
		c.rebuild.Lock()
	}
	defer c.rebuild.Unlock()
	if body, fresh := c.cachedBody(epoch); fresh { // rebuilt while this one waited
		return body, nil
	}
	b, err := json.Marshal(d.status())
	if err != nil {
		return nil, fmt.Errorf("daemon: encode status: %w", err)
	}
	b = append(b, '\n')
	c.bodyMu.Lock()
	c.body, c.bodyAt, c.bodyEpoch = b, time.Now(), epoch
	c.bodyMu.Unlock()
	return b, nil
}

// cachedBody returns the status body if it was built in epoch (else nil),
// and whether it is also younger than statsTTL.
func (c *statsCache) cachedBody(epoch int64) ([]byte, bool) {
	c.bodyMu.Lock()
	defer c.bodyMu.Unlock()
	if c.body == nil || c.bodyEpoch != epoch {
		return nil, false
	}
	return c.body, time.Since(c.bodyAt) < statsTTL
}

// TierStatuses describes the tiers of a cache, fastest first: the shm
// tier (if any; its directory is shmDir) and the base tier (dir). Hits are
// split by the tier that served them.
func TierStatuses(dir, shmDir string, s tier.Stats) []control.TierStatus {
	base := control.TierStatus{Name: string(s.Tier), Dir: dir, Entries: int64(s.Entries),
		UsedBytes: s.UsedBytes, MaxBytes: s.MaxBytes, PinnedBytes: s.PinnedBytes,
		ReservedBytes: s.ReservedBytes, InUseBytes: s.InUseBytes, PendingBytes: s.PendingBytes,
		Hits: s.Hits - s.ShmHits, Misses: s.Misses, Fetched: s.BytesFetched, Evictions: s.Evictions}
	out := []control.TierStatus{base}
	if s.ShmMaxBytes > 0 {
		shm := control.TierStatus{Name: string(tier.Shm), Dir: shmDir, Entries: int64(s.ShmEntries),
			UsedBytes: s.ShmUsedBytes, MaxBytes: s.ShmMaxBytes, PinnedBytes: s.ShmPinnedBytes,
			ReservedBytes: s.ShmReservedBytes, InUseBytes: s.ShmInUseBytes, PendingBytes: s.ShmPendingBytes,
			Hits: s.ShmHits, Misses: s.Hits - s.ShmHits + s.Misses, Evictions: s.Demotions,
			Promotions: s.Promotions}
		out = []control.TierStatus{shm, base}
	}
	for i := range out {
		if n := out[i].Hits + out[i].Misses; n > 0 {
			out[i].HitRatio = float64(out[i].Hits) / float64(n)
		}
	}
	return out
}

// tierMetrics converts a snapshot for the metrics collectors.
func tierMetrics(s tier.Stats) []metrics.TierStats {
	out := []metrics.TierStats{{Tier: string(s.Tier), Objects: int64(s.Entries), UsedBytes: s.UsedBytes,
		MaxBytes: s.MaxBytes, PinnedBytes: s.PinnedBytes, ReservedBytes: s.ReservedBytes,
		InUseBytes: s.InUseBytes, PendingBytes: s.PendingBytes, Hits: s.Hits - s.ShmHits, Misses: s.Misses,
		Evictions: s.Evictions, Fills: s.Fills, BytesFetched: s.BytesFetched, Revalidations: s.Revalidations,
		Damaged: s.Damaged}}
	if s.ShmMaxBytes > 0 {
		out = append(out, metrics.TierStats{Tier: string(tier.Shm), Objects: int64(s.ShmEntries),
			UsedBytes: s.ShmUsedBytes, MaxBytes: s.ShmMaxBytes, PinnedBytes: s.ShmPinnedBytes,
			ReservedBytes: s.ShmReservedBytes, InUseBytes: s.ShmInUseBytes, PendingBytes: s.ShmPendingBytes,
			Hits: s.ShmHits, Misses: s.Hits - s.ShmHits + s.Misses, Evictions: s.Demotions,
			Promotions: s.Promotions, PromotionsSkipped: s.PromotionsSkipped, HasPromotions: true})
	}
	return out
}

// status assembles GET /v1/status.
func (d *Daemon) status() control.Status {
	cfg := d.Config()
	fs := d.dl.Stats()
	retries := make(map[string]int64, len(fs.Retries))
	for i, n := range fs.Retries {
		retries[fetch.RetryCause(i).String()] = n
	}
	sessions, leases := d.sessions.counts()
	return control.Status{
		Version: d.opts.Version, PID: pid, Started: d.started, ConfigFile: d.opts.ConfigFile,
		Socket: cfg.Control.Socket, MetricsAddr: d.MetricsAddr(), CacheDir: cfg.Tiers.Disk.Dir,
		Tiers: TierStatuses(cfg.Tiers.Disk.Dir, cfg.Tiers.Shm.Dir, d.stats.get()),
		Fetch: &control.FetchStatus{Connections: cfg.Fetch.Connections, ConnsInUse: fs.Conns,
			WaitingSlices: fs.Waiting + fs.SmallWaiting, SmallConnsInUse: fs.SmallConns, SliceBytes: int64(cfg.Fetch.Slice), Objects: fs.Objects,
			Failures: fs.Failures, Bytes: fs.Bytes, Ranges: fs.Ranges, Retries: retries,
			CRCFailures: fs.CRCFailures, Stalls: fs.Stalls},
		Jobs:     d.jobs.counts(),
		Sessions: sessions, Leases: leases, Plans: d.plans.count(),
		Loaders: d.loaderStatus(),
	}
}

// StatusLine summarises the daemon in one line, for systemd's STATUS=.
func (d *Daemon) StatusLine() string {
	s := d.stats.get()
	pct := 0.0
	if s.MaxBytes > 0 {
		pct = 100 * float64(s.UsedBytes) / float64(s.MaxBytes)
	}
	_, leases := d.sessions.counts()
	running := 0
	for state, n := range d.jobs.counts() {
		if !state.Final() {
			running += n
		}
	}
	line := fmt.Sprintf("%s %s of %s (%.1f%%), %d objects", s.Tier,
		humanize.IBytes(uint64(s.UsedBytes)), humanize.IBytes(uint64(s.MaxBytes)), pct, s.Entries)
	if s.ShmMaxBytes > 0 {
		line += fmt.Sprintf("; shm %s of %s, %d objects", humanize.IBytes(uint64(s.ShmUsedBytes)),
			humanize.IBytes(uint64(s.ShmMaxBytes)), s.ShmEntries)
	}
	return line + fmt.Sprintf("; %d jobs running; %d leases", running, leases)
}

// metricSources wires the collectors to the daemon's state.
func (d *Daemon) metricSources() metrics.Sources {
	return metrics.Sources{
		Tiers:       func() []metrics.TierStats { return tierMetrics(d.stats.get()) },
		Fetch:       d.dl.Stats,
		Connections: func() int { return d.Config().Fetch.Connections },
		Pending:     func() map[fetch.Priority]int { return d.jobs.pending() },
		Leases:      d.sessions.counts,
		Plans: func() metrics.PlanStats {
			p := d.cache.PlanStats()
			return metrics.PlanStats{Plans: p.Plans, Objects: p.Objects, Prefetched: p.Prefetched,
				PrefetchedBytes: p.PrefetchedBytes, FetchRate: p.FetchRate, ConsumeRate: p.ConsumeRate,
				Lookahead: p.Lookahead}
		},
		Loaders: d.loaderMetrics,
		Jobs: func() map[string]int {
			out := make(map[string]int)
			for s, n := range d.jobs.counts() {
				out[string(s)] = n
			}
			return out
		},
	}
}

// ListObjects lists bucket under prefix at src and tells, for each object,
// which tier of cache holds its live generation. If the source cannot be
// listed (and ctx has not ended), it returns what the cache holds with a
// warning saying why.
func ListObjects(ctx context.Context, src fetch.Source, cache *tier.Cache, bucket, prefix string) (control.ListResult, error) {
	entries := cache.Entries(bucket, prefix)
	cached := make(map[string]tier.Entry, len(entries))
	for _, e := range entries {
		cached[e.Attrs.Name] = e
	}
	var rows []control.Object
	for a, err := range src.List(ctx, bucket, prefix) {
		if err != nil {
			if ctx.Err() != nil {
				return control.ListResult{}, fmt.Errorf("list gs://%s/%s: %w", bucket, prefix, err)
			}
			return cachedOnly(entries, fmt.Sprintf("source not listable (%v); showing cached objects only", err)), nil
		}
		r := control.Object{Name: a.Name, Generation: a.Generation, Size: a.Size, Tier: "none"}
		if e, ok := cached[a.Name]; ok {
			r.Pinned = e.Pinned
			if e.Attrs.Generation == a.Generation {
				r.Tier = string(e.Tier)
			} else {
				r.CachedGeneration = e.Attrs.Generation
			}
		}
		rows = append(rows, r)
	}
	if rows == nil {
		rows = []control.Object{}
	}
	return control.ListResult{Objects: rows}, nil
}

// cachedOnly lists cache entries as objects.
func cachedOnly(entries []tier.Entry, warning string) control.ListResult {
	rows := make([]control.Object, len(entries))
	for i, e := range entries {
		rows[i] = control.Object{Name: e.Attrs.Name, Generation: e.Attrs.Generation, Size: e.Attrs.Size,
			Tier: string(e.Tier), Pinned: e.Pinned}
	}
	return control.ListResult{Objects: rows, Warning: warning}
}
