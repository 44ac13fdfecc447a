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
	"github.com/cacheagent/cacheagent/fleet/peer"
	"github.com/cacheagent/cacheagent/metrics"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
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
func (c *statsCache) get() stats.Cache { return c.cache.Stats() }

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

// status assembles GET /v1/status.
func (d *Daemon) status() control.Status {
	cfg := d.Config()
	fs := d.fetchStats()
	sessions, leases := d.sessions.counts()
	var fl *stats.Fleet
	if s, ok := d.fleetStats(); ok {
		fl = &s
	}
	var mnt *stats.Mount
	if s, ok := d.mountStats(); ok {
		mnt = &s
	}
	return control.Status{
		Version: d.opts.Version, PID: pid, Started: d.started, ConfigFile: d.opts.ConfigFile,
		Socket: cfg.Control.Socket, MetricsAddr: d.MetricsAddr(), CacheDir: cfg.Tiers.Disk.Dir,
		Tiers: d.stats.get().Tiers, Fetch: &fs,
		Jobs:     d.jobs.counts(),
		Sessions: sessions, Leases: leases, Plans: d.plans.count(),
		Loaders: d.loaderStatus(), LoaderSessions: d.lsess.count(),
		Fleet: fl, Mount: mnt, Checkpoints: d.checkpointFigures(),
	}
}

// checkpointFigures returns the checkpoint store's figures (nil before it
// opens).
func (d *Daemon) checkpointFigures() *stats.Checkpoints {
	if d.ckpt == nil {
		return nil
	}
	f := d.ckpt.Figures()
	return &f
}

// mountStats returns the mount's figures, and false without a mount.
// d.mnt is set before requests are served and never changes.
func (d *Daemon) mountStats() (stats.Mount, bool) {
	if d.mnt == nil {
		return stats.Mount{}, false
	}
	return d.mnt.Stats(), true
}

// StatusLine summarises the daemon in one line, for systemd's STATUS=.
func (d *Daemon) StatusLine() string {
	all := d.stats.get()
	s := all.Base()
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
	line := fmt.Sprintf("%s %s of %s (%.1f%%), %d objects", s.Name,
		humanize.IBytes(uint64(s.UsedBytes)), humanize.IBytes(uint64(s.MaxBytes)), pct, s.Entries)
	if shm, ok := all.Shm(); ok {
		line += fmt.Sprintf("; shm %s of %s, %d objects", humanize.IBytes(uint64(shm.UsedBytes)),
			humanize.IBytes(uint64(shm.MaxBytes)), shm.Entries)
	}
	return line + fmt.Sprintf("; %d jobs running; %d leases", running, leases)
}

// metricSources wires the collectors to the daemon's state. It runs before
// the cache opens (the cache's downloader records metrics): the cache is
// read through closures.
func (d *Daemon) metricSources() metrics.Sources {
	return metrics.Sources{
		Tiers:   func() stats.Cache { return d.stats.get() },
		Fetch:   d.fetchStats,
		Pending: func() map[object.Priority]int { return d.jobs.pending() },
		Leases:  d.sessions.counts,
		Plans:   func() stats.Plan { return d.cache.PlanStats() },
		Loaders: d.plans.loaderTotals,
		Fleet:   d.fleetStats,
		Mount:   d.mountStats,
		Checkpoints: func() stats.Checkpoints {
			if f := d.checkpointFigures(); f != nil {
				return *f
			}
			return stats.Checkpoints{}
		},
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
func ListObjects(ctx context.Context, src object.Source, cache *tier.Cache, bucket, prefix string) (control.ListResult, error) {
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

// cachedOnly lists cache entries as objects, leaving out the chunk copies
// a fleet node keeps for its peers.
func cachedOnly(entries []tier.Entry, warning string) control.ListResult {
	rows := make([]control.Object, 0, len(entries))
	for _, e := range entries {
		if peer.IsChunk(e.Attrs.Name) {
			continue
		}
		rows = append(rows, control.Object{Name: e.Attrs.Name, Generation: e.Attrs.Generation, Size: e.Attrs.Size,
			Tier: string(e.Tier), Pinned: e.Pinned})
	}
	return control.ListResult{Objects: rows, Warning: warning}
}
