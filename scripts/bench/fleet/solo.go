package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/cacheagent/cacheagent/fleet/fleettest"
)

// soloRun is one run of phase 5: a fresh node's cold epoch, then a warm one.
type soloRun struct {
	fleet      bool
	cold, warm float64 // seconds; warm: the median of the warm epochs
	gcs        int64   // GCS bytes over both epochs
	errs       int
	corrupt    int64
	first      string
}

// solo is phase 5, issue 18's "one node with fleet configured: ≥ 0.98×
// today's cold and warm figures": one node reads a dataset of
// o.soloObjects objects cold, then warm, on a fresh cache, without a fleet
// section and with one (key file, listen addresses, itself as the only
// member), alternated o.soloRounds times on the same shaped links; each
// run reads o.soloWarm warm epochs after the cold one. The
// ratios are time without / time with (≥ 0.98 meets the goal), per round
// and of the medians.
func solo(ctx context.Context, o opts) error {
	so := o
	so.objects = o.soloObjects
	D := int64(so.objects) * so.size
	report("\n## 5. one node: with a fleet section vs without (%d × %s = %s, same links), %d rounds alternated; warm: median of %d epochs",
		so.objects, mib(so.size), mib(D), o.soloRounds, o.soloWarm)
	var runs []soloRun
	for r := range o.soloRounds {
		for _, withFleet := range []bool{false, true} {
			h, err := start(ctx, so.cfg(1, 2*D, !withFleet))
			if err != nil {
				return err
			}
			run, err := soloEpochs(ctx, so, h, withFleet, uint64(r))
			h.Close()
			if err != nil {
				return err
			}
			report("  round %d, %-13s cold %.2fs, warm %.2fs; GCS bytes %.3f·D; read errors %d %s; corrupt bytes %d",
				r+1, map[bool]string{false: "no fleet:", true: "fleet:"}[withFleet], run.cold, run.warm,
				float64(run.gcs)/float64(D), run.errs, run.first, run.corrupt)
			runs = append(runs, run)
		}
		a, b := runs[len(runs)-2], runs[len(runs)-1]
		report("  round %d: without/with: cold %.3f, warm %.3f", r+1, a.cold/b.cold, a.warm/b.warm)
	}
	med := func(fleet bool, f func(soloRun) float64) float64 {
		var v []float64
		for _, r := range runs {
			if r.fleet == fleet {
				v = append(v, f(r))
			}
		}
		return median(v)
	}
	cold := func(r soloRun) float64 { return r.cold }
	warm := func(r soloRun) float64 { return r.warm }
	report("medians: cold %.2fs without, %.2fs with: %.3f×; warm %.2fs without, %.2fs with: %.3f× (target ≥ 0.98×)",
		med(false, cold), med(true, cold), med(false, cold)/med(true, cold),
		med(false, warm), med(true, warm), med(false, warm)/med(true, warm))
	return nil
}

// soloEpochs reads hh's single node's dataset cold, then o.soloWarm times
// warm; the run's warm time is the median of those.
func soloEpochs(ctx context.Context, o opts, hh *fleettest.Harness, withFleet bool, seed uint64) (soloRun, error) {
	run := soloRun{fleet: withFleet}
	if withFleet {
		if err := hh.WaitAlive(ctx, 30*time.Second); err != nil {
			return run, fmt.Errorf("one-node fleet: %w", err)
		}
	}
	var warm []float64
	for ep := range 1 + o.soloWarm {
		es := readAll(ctx, o, hh, hh.Nodes, seed*100+uint64(ep))
		errs, corrupt, first := problems(es)
		run.errs += errs
		run.corrupt += corrupt
		if run.first == "" {
			run.first = first
		}
		if ep == 0 {
			run.cold = es[0].took.Seconds()
		} else {
			warm = append(warm, es[0].took.Seconds())
		}
	}
	run.warm = median(warm)
	g, _, err := hh.GCSBytes(ctx)
	if err != nil {
		return run, fmt.Errorf("GCS bytes: %w", err)
	}
	run.gcs = g
	return run, nil
}

// median is the median of v (0 if empty); it sorts v.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
