package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fleet"
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

// startFleet joins the fleet of cfg's fleet section, if any, weighted by
// the disk tier's budget. The cache must be open.
func (d *Daemon) startFleet(ctx context.Context, cfg Config) error {
	if cfg.Fleet == nil {
		return nil
	}
	f, err := fleet.Start(ctx, *cfg.Fleet, fleet.Options{Weight: d.fleetWeight(), Version: d.opts.Version,
		Logger: d.log})
	if err != nil {
		return fmt.Errorf("daemon: fleet: %w", err)
	}
	d.fleet = f
	return nil
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

// closeFleet leaves the fleet, if any, within ctx.
func (d *Daemon) closeFleet(ctx context.Context) error {
	if d.fleet == nil {
		return nil
	}
	return d.fleet.Close(ctx)
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
	writeJSON(w, http.StatusOK, res)
}
