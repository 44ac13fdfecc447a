package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fleet"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// checkFleet validates the fleet section, if any.
func (c Config) checkFleet() *fieldError {
	if c.Fleet == nil {
		return nil
	}
	err := c.Fleet.Validate()
	if err == nil {
		return nil
	}
	var ce *fleet.ConfigError
	if errors.As(err, &ce) {
		return &fieldError{path: append([]string{"fleet"}, strings.Split(ce.Field, ".")...), msg: ce.Problem}
	}
	return &fieldError{path: []string{"fleet"}, msg: err.Error()}
}

// startFleet opens the peer port and joins the fleet of cfg's fleet
// section, if any, weighted by the disk tier's budget, then serves peers
// and reads through them. The cache must be open.
func (d *Daemon) startFleet(ctx context.Context, cfg Config) error {
	if cfg.Fleet == nil {
		return nil
	}
	p := d.peers
	if err := p.server(d.cache, sourceBuckets(cfg.Sources), d.log); err != nil {
		return err
	}
	h, err := peerHandler(p, d.ckpt.Store)
	if err != nil {
		return err
	}
	p.http.Handler = h
	for _, c := range d.ckpt.Status(object.URI{}) {
		if u, err := object.ParsePrefix(c.URI); err == nil {
			p.srv.AllowBucket(u.Bucket) // its saves' files are cached here
		}
	}
	if err := p.listen(cfg.Fleet.PeerListen); err != nil {
		return err
	}
	f, err := fleet.Start(ctx, *cfg.Fleet, fleet.Options{Weight: d.fleetWeight(), Version: d.opts.Version,
		PeerAddr: p.ln.Addr().String(), Logger: d.log, Keys: p.keys})
	if err != nil {
		p.ln.Close()
		return fmt.Errorf("daemon: fleet: %w", err)
	}
	d.fleet = f
	p.owners.f.Store(f)
	d.ckptFleet.f.Store(f)
	listCtx, stopListing := context.WithCancel(context.Background())
	p.stopListing = stopListing
	// The disk tier keeps what this node owns first; ownership moves with
	// every membership change.
	p.owners.rebalance()
	d.cache.SetOwnership(p.src.Keeps)
	changes, _ := f.Subscribe() // closed when the fleet closes
	d.servers.Go(func() {
		for range changes {
			p.owners.rebalance()
			d.cache.SetOwnership(p.src.Keeps)
			d.ckpt.SweepReplicas() // a saver may have died
		}
	})
	// The sources a warm job will not list are listed once now, so
	// their datasets are balanced (see fleetOwners) before readers come.
	for _, s := range cfg.Sources {
		if !s.Warm {
			d.servers.Go(func() { d.listForBalance(listCtx, s.URI) })
		}
	}
	d.servers.Go(func() {
		if err := p.http.Serve(p.ln); !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("peer server failed", "err", err)
			d.failed <- fmt.Errorf("daemon: peer server: %w", err)
		}
	})
	return nil
}

// fleetListed balances this node's owners over the dataset uri (objs),
// listed for a prefetch or a pin, tells the disk tier what it now owns,
// and returns the order to prefetch objs in (fleetOwners.interleave).
// Without a fleet it returns objs.
func (d *Daemon) fleetListed(uri string, objs []object.Attrs) []object.Attrs {
	if d.peers == nil {
		return objs
	}
	if d.peers.owners.register(d.peers.src, uri, objs) {
		d.cache.SetOwnership(d.peers.src.Keeps)
	}
	return d.peers.owners.interleave(objs)
}

// maxListedForBalance bounds the objects of one source listed at fleet
// start (their attributes are held until balanced: about 200 MiB at the
// bound); a larger source is placed by rendezvous alone.
const maxListedForBalance = 1 << 20

// listForBalance lists the source u and balances its owners over the
// objects (at most maxListedForBalance of them), so that reads of a
// dataset no prefetch lists are placed the balanced way too.
func (d *Daemon) listForBalance(ctx context.Context, u object.URI) {
	var objs []object.Attrs
	for a, err := range d.src.List(ctx, u.Bucket, u.Path) {
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("fleet: list a source to balance its owners", "uri", u, "err", err)
			}
			return
		}
		if objs = append(objs, a); len(objs) > maxListedForBalance {
			d.log.Info("fleet: source too large to balance; its objects are placed by hashing alone", "uri", u)
			return
		}
	}
	d.fleetListed(u.String(), objs)
	d.log.Info("fleet: balanced the owners of a source", "uri", u, "objects", len(objs))
}

// fleetWeight is this agent's placement weight: its disk tier's budget.
func (d *Daemon) fleetWeight() float64 { return float64(max(d.stats.get().Base().MaxBytes, 1)) }

// setFleetWeight tells the fleet the disk budget after it changed.
func (d *Daemon) setFleetWeight() {
	if d.fleet == nil {
		return
	}
	if err := d.fleet.SetWeight(d.fleetWeight()); err != nil {
		d.log.Warn("fleet: announce the new disk budget", "err", err)
	}
}

// closeFleet leaves the fleet, if any, within ctx, then stops answering
// peers (the others stop asking once they see this node leave).
func (d *Daemon) closeFleet(ctx context.Context) error {
	if d.fleet == nil {
		return nil
	}
	d.peers.owners.f.Store(nil) // this node's reads go to GCS from now on
	d.ckptFleet.f.Store(nil)
	defer d.ckptFleet.close()
	d.peers.stopListing()
	return errors.Join(d.fleet.Close(ctx), shutdown(ctx, d.peers.http))
}

// fleetStats counts the fleet's members by state; false without a fleet.
func (d *Daemon) fleetStats() (stats.Fleet, bool) {
	if d.fleet == nil {
		return stats.Fleet{}, false
	}
	s := stats.Fleet{Self: d.fleet.Name(), Members: make(map[string]int, len(stats.FleetStates))}
	for _, state := range stats.FleetStates {
		s.Members[state] = 0
	}
	for _, m := range d.fleet.Members() {
		s.Members[string(m.State)]++
	}
	d.peers.stats(&s)
	return s, true
}

// handleFleet serves GET /v1/fleet: every member with its share of the
// current placement table.
func (d *Daemon) handleFleet(w http.ResponseWriter, _ *http.Request) {
	if d.fleet == nil {
		writeError(w, control.ErrNoFleet)
		return
	}
	table := d.fleet.Table()
	members := d.fleet.Members()
	res := control.FleetStatus{Self: d.fleet.Name(), Members: make([]control.FleetMember, len(members))}
	for i, m := range members {
		res.Members[i] = control.FleetMember{Name: m.Name, Addr: m.Addr, PeerAddr: m.PeerAddr, State: string(m.State),
			Weight: m.Weight, OwnedShare: table.OwnedShare(m.Name), Version: m.Version}
	}
	res.Traffic, _ = d.fleetStats()
	writeJSON(w, http.StatusOK, res)
}
