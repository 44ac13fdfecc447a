package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/cacheagent/cacheagent/bench/fleettest"
)

// soloRun is one node's part of a phase 5 round.
type soloRun struct {
	fleet   bool
	h       *fleettest.Harness
	cold    float64   // seconds
	warm    []float64 // seconds, each warm epoch
	errs    int
	corrupt int64
	first   string
}

// epoch reads the node's dataset once and records it as cold or warm.
func (r *soloRun) epoch(ctx context.Context, o opts, seed uint64, cold bool) {
	es := readAll(ctx, o, r.h, r.h.Nodes, seed)
	errs, corrupt, first := problems(es)
	r.errs += errs
	r.corrupt += corrupt
	if r.first == "" {
		r.first = first
	}
	if cold {
		r.cold = es[0].took.Seconds()
	} else {
		r.warm = append(r.warm, es[0].took.Seconds())
	}
}

// solo is phase 5, issue 18's "one node with fleet configured: ≥ 0.98×
// today's cold and warm figures". Each of o.soloRounds rounds starts two
// single-node harnesses on the same shaped links, one without a fleet
// section and one with (key file, listen addresses, itself the only
// member), each on a fresh cache with a dataset of o.soloObjects objects.
// Their cold epochs run one after the other, then o.soloWarm warm epochs
// each, alternated (without, with, without, …; the round's first side
// alternates too), so that the warm pairs see the same machine load. The
// ratios are time without / time with: ≥ 0.98 meets the goal.
func solo(ctx context.Context, o opts) error {
	so := o
	so.objects = o.soloObjects
	D := int64(so.objects) * so.size
	report("\n## 5. one node: with a fleet section vs without (%d × %s = %s, same links), %d rounds; %d warm epochs each, alternated",
		so.objects, mib(so.size), mib(D), o.soloRounds, o.soloWarm)
	var colds [2][]float64 // [without, with]
	var warms [2][]float64
	for r := range o.soloRounds {
		runs, err := soloRound(ctx, so, r)
		if err != nil {
			return err
		}
		for k, run := range runs {
			g, _, err := run.h.GCSBytes(ctx)
			run.h.Close()
			if err != nil {
				return fmt.Errorf("GCS bytes: %w", err)
			}
			report("  round %d, %-10s cold %.2fs, warm median %.3fs (%s); GCS bytes %.3f·D; read errors %d %s; corrupt bytes %d",
				r+1, map[bool]string{false: "no fleet:", true: "fleet:"}[run.fleet], run.cold, median(run.warm),
				secs(run.warm), float64(g)/float64(D), run.errs, run.first, run.corrupt)
			colds[k] = append(colds[k], run.cold)
			warms[k] = append(warms[k], run.warm...)
		}
		report("  round %d: without/with: cold %.3f, warm (medians) %.3f", r+1, runs[0].cold/runs[1].cold,
			median(runs[0].warm)/median(runs[1].warm))
	}
	c0, c1, w0, w1 := median(colds[0]), median(colds[1]), median(warms[0]), median(warms[1])
	report("all rounds, medians: cold %.2fs without, %.2fs with: %.3f×; warm %.3fs without, %.3fs with: %.3f× (target ≥ 0.98×)",
		c0, c1, c0/c1, w0, w1, w0/w1)
	return nil
}

// soloRound runs round r: both harnesses, cold then warm; runs[0] is the
// one without a fleet section. The caller closes the harnesses.
func soloRound(ctx context.Context, o opts, r int) ([2]*soloRun, error) {
	var runs [2]*soloRun
	D := int64(o.objects) * o.size
	for k, withFleet := range []bool{false, true} {
		h, err := start(ctx, o.cfg(1, 2*D, !withFleet))
		if err != nil {
			for _, run := range runs[:k] {
				run.h.Close()
			}
			return runs, err
		}
		runs[k] = &soloRun{fleet: withFleet, h: h}
	}
	if err := runs[1].h.WaitAlive(ctx, 30*time.Second); err != nil {
		runs[0].h.Close()
		runs[1].h.Close()
		return runs, fmt.Errorf("one-node fleet: %w", err)
	}
	order := []int{0, 1}
	if r%2 == 1 {
		order = []int{1, 0}
	}
	seed := uint64(r) * 100
	for _, k := range order {
		runs[k].epoch(ctx, o, seed, true)
	}
	for ep := range o.soloWarm {
		for _, k := range order {
			runs[k].epoch(ctx, o, seed+1+uint64(ep), false)
		}
	}
	return runs, nil
}

// secs lists durations in seconds.
func secs(v []float64) string {
	s := ""
	for i, x := range v {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%.2f", x)
	}
	return s
}

// median is the median of v (0 if empty); it sorts a copy of v.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = append([]float64(nil), v...)
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
