package daemon

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// Reload applies a new config to the running daemon. The budgets
// (tiers.disk.max, tiers.shm.max), the connection budget
// (fetch.connections), the scrub (tiers.scrub) and sources change live: warm sources that are new are prefetched, warm jobs of
// sources no longer warm are cancelled. Fields that need a restart keep
// their running values and are logged. An invalid config changes nothing
// and is returned as an error matching ErrConfig. A budget that pinned and
// in-use objects exceed still applies (the error is logged, not returned).
// It returns the names of the fields that changed.
func (d *Daemon) Reload(ctx context.Context, cfg Config) ([]string, error) {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	changed, err := d.reload(ctx, cfg)
	d.met.ObserveReload(err)
	return changed, err
}

// ReloadFailed records a reload whose config could not be read or parsed
// (the caller logs why); the running config stays.
func (d *Daemon) ReloadFailed(err error) { d.met.ObserveReload(err) }

func (d *Daemon) reload(ctx context.Context, cfg Config) ([]string, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("daemon: reload: %w", tier.ErrClosed)
	}
	old := d.cfg
	d.mu.Unlock()
	cfg = d.keepRestartOnly(old, cfg)
	applied := old // what runs, recorded even if a later step fails
	defer func() {
		d.mu.Lock()
		d.cfg = applied
		d.mu.Unlock()
		d.stats.invalidate()
	}()
	var changed []string
	if cfg.Fetch.Connections != old.Fetch.Connections {
		set := d.dl.SetConnections
		if d.peers != nil {
			set = d.peers.setConnections
		}
		if err := set(cfg.Fetch.Connections); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		d.cache.SetPrefetchParallelism(cfg.inFlight()) // as many objects as the lanes allow reads
		applied.Fetch.Connections = cfg.Fetch.Connections
		changed = append(changed, "fetch.connections")
	}
	if cfg.Tiers.Disk.Max != old.Tiers.Disk.Max {
		err := d.cache.SetMaxBytes(ctx, int64(cfg.Tiers.Disk.Max))
		switch {
		case errors.Is(err, tier.ErrNoSpace):
			d.log.Warn("new disk budget applies, but pinned or in-use objects exceed it", "err", err)
		case err != nil:
			return changed, fmt.Errorf("daemon: reload: %w", err)
		}
		applied.Tiers.Disk.Max = cfg.Tiers.Disk.Max
		changed = append(changed, "tiers.disk.max")
		d.setFleetWeight()
	}
	if cfg.Tiers.Shm.Max != old.Tiers.Shm.Max {
		err := d.cache.SetShmMaxBytes(ctx, int64(cfg.Tiers.Shm.Max))
		switch {
		case errors.Is(err, tier.ErrNoSpace):
			d.log.Warn("new shm budget applies, but pinned or in-use shm copies exceed it", "err", err)
		case errors.Is(err, tier.ErrNoShm):
			d.log.Warn("tiers.shm.max changed but there is no shm tier; keeping the running value")
			cfg.Tiers.Shm.Max = old.Tiers.Shm.Max
		case err != nil:
			return changed, fmt.Errorf("daemon: reload: %w", err)
		}
		if cfg.Tiers.Shm.Max != old.Tiers.Shm.Max {
			applied.Tiers.Shm.Max = cfg.Tiers.Shm.Max
			changed = append(changed, "tiers.shm.max")
		}
	}
	if d.scrub.set(cfg.Tiers.Scrub) {
		applied.Tiers.Scrub = cfg.Tiers.Scrub
		changed = append(changed, "tiers.scrub")
	}
	if !reflect.DeepEqual(cfg.Sources, old.Sources) {
		d.applySources(old.Sources, cfg.Sources)
		changed = append(changed, "sources")
		if d.mnt != nil {
			d.log.Warn("the mount shows the sources it was started with until a restart")
		}
	}
	applied = cfg
	return changed, nil
}

// keepRestartOnly returns next with the fields that need a restart set back
// to their running values, logging each one that differs.
func (d *Daemon) keepRestartOnly(cur, next Config) Config {
	fields := []struct {
		name      string
		cur, next any
		reset     func()
	}{
		{"tiers.disk.dir", cur.Tiers.Disk.Dir, next.Tiers.Disk.Dir, func() { next.Tiers.Disk.Dir = cur.Tiers.Disk.Dir }},
		{"tiers.shm.dir", cur.Tiers.Shm.Dir, next.Tiers.Shm.Dir, func() { next.Tiers.Shm.Dir = cur.Tiers.Shm.Dir }},
		{"tiers.disk.pack_below", cur.Tiers.Disk.packBelow(), next.Tiers.Disk.packBelow(),
			func() { next.Tiers.Disk.PackBelow = cur.Tiers.Disk.PackBelow }},
		{"tiers.shm.promote_hits", cur.Tiers.Shm.PromoteHits, next.Tiers.Shm.PromoteHits,
			func() { next.Tiers.Shm.PromoteHits = cur.Tiers.Shm.PromoteHits }},
		{"fetch.endpoint", cur.Fetch.Endpoint, next.Fetch.Endpoint, func() { next.Fetch.Endpoint = cur.Fetch.Endpoint }},
		{"fetch.slice", cur.Fetch.Slice, next.Fetch.Slice, func() { next.Fetch.Slice = cur.Fetch.Slice }},
		{"fetch.small_object", cur.Fetch.SmallObject, next.Fetch.SmallObject,
			func() { next.Fetch.SmallObject = cur.Fetch.SmallObject }},
		{"fetch.small_connections", cur.Fetch.SmallConnections, next.Fetch.SmallConnections,
			func() { next.Fetch.SmallConnections = cur.Fetch.SmallConnections }},
		{"fetch.revalidate", cur.Fetch.Revalidate, next.Fetch.Revalidate, func() { next.Fetch.Revalidate = cur.Fetch.Revalidate }},
		{"fetch.checksum_attempts", cur.Fetch.ChecksumAttempts, next.Fetch.ChecksumAttempts,
			func() { next.Fetch.ChecksumAttempts = cur.Fetch.ChecksumAttempts }},
		{"mount.path", cur.Mount.Path, next.Mount.Path, func() { next.Mount.Path = cur.Mount.Path }},
		{"control.socket", cur.Control.Socket, next.Control.Socket, func() { next.Control.Socket = cur.Control.Socket }},
		{"metrics.listen", cur.Metrics.Listen, next.Metrics.Listen, func() { next.Metrics.Listen = cur.Metrics.Listen }},
		{"gpu", cur.GPU, next.GPU, func() { next.GPU = cur.GPU }},
	}
	if !reflect.DeepEqual(cur.Fleet, next.Fleet) {
		d.log.Warn("config change needs a restart; keeping the running value", "field", "fleet")
		next.Fleet = cur.Fleet
	}
	for _, f := range fields {
		if f.cur != f.next {
			d.log.Warn("config change needs a restart; keeping the running value",
				"field", f.name, "running", fmt.Sprint(f.cur), "configured", fmt.Sprint(f.next))
			f.reset()
		}
	}
	return next
}

// applySources warms sources that became warm and cancels the warm jobs of
// sources that no longer are.
func (d *Daemon) applySources(old, next []SourceConfig) {
	wasWarm := make(map[string]bool)
	for _, s := range old {
		wasWarm[s.URI.String()] = s.Warm
	}
	isWarm := make(map[string]bool)
	for _, s := range next {
		isWarm[s.URI.String()] = s.Warm
		if s.Warm && !wasWarm[s.URI.String()] {
			d.warm(s.URI)
		}
	}
	d.jobs.cancelWhere(func(kind, uri string) bool { return kind == control.KindWarm && !isWarm[uri] })
}

// warm starts a warm-priority prefetch of a source.
func (d *Daemon) warm(u object.URI) {
	if _, err := d.jobs.start(jobSpec{kind: control.KindWarm, uri: u.String(), bucket: u.Bucket, prefix: u.Path,
		prio: object.Warm}); err != nil {
		d.log.Warn("warm source", "uri", u, "err", err)
	}
}
