package daemon

import (
	"fmt"
	"net/http"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/metrics"
)

// Loaders in other processes report their stats (loader.Stats: totals
// since each loader started) through their plans: POST
// /v1/plans/{id}/stats. The daemon keeps each plan's last report and adds
// what grew since then to running totals, which the metrics export without
// per-loader labels. A report below the last one in any field comes from a
// new loader under the same plan id (a restart): its totals count in full,
// from zero. A plan's last report goes when the plan is dropped; the
// totals stay.

// report adds what plan id's loader's totals cur grew since its last
// report to the running totals and records cur; false if there is no such
// plan.
func (s *planStore) report(id string, cur control.LoaderStats) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.plans[id]
	if !ok {
		return false
	}
	d := statsGrowth(e.last, cur)
	t := &s.loaders
	t.Batches += d.Batches
	t.Samples += d.Samples
	t.Bytes += d.Bytes
	t.WaitSeconds += d.WaitSeconds
	t.FetchSeconds += d.FetchSeconds
	t.PromoteSeconds += d.PromoteSeconds
	t.GatherSeconds += d.GatherSeconds
	t.OtherSeconds += d.OtherSeconds
	e.last = &cur
	return true
}

// loaderTotals returns the number of plans whose loaders reported and the
// running totals.
func (s *planStore) loaderTotals() (reporting int, totals control.LoaderStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.plans {
		if e.last != nil {
			reporting++
		}
	}
	return reporting, s.loaders
}

// statsGrowth returns what totals cur add to last: cur - last, or all of
// cur if there is no last report or cur is below it in any field (a new
// loader counting from zero). Never negative.
func statsGrowth(last *control.LoaderStats, cur control.LoaderStats) control.LoaderStats {
	if last == nil || below(cur, *last) {
		return cur
	}
	return control.LoaderStats{
		Batches:        cur.Batches - last.Batches,
		Samples:        cur.Samples - last.Samples,
		Bytes:          cur.Bytes - last.Bytes,
		WaitSeconds:    cur.WaitSeconds - last.WaitSeconds,
		FetchSeconds:   cur.FetchSeconds - last.FetchSeconds,
		PromoteSeconds: cur.PromoteSeconds - last.PromoteSeconds,
		GatherSeconds:  cur.GatherSeconds - last.GatherSeconds,
		OtherSeconds:   cur.OtherSeconds - last.OtherSeconds,
	}
}

// below reports whether a is below b in any field.
func below(a, b control.LoaderStats) bool {
	return a.Batches < b.Batches || a.Samples < b.Samples || a.Bytes < b.Bytes ||
		a.WaitSeconds < b.WaitSeconds || a.FetchSeconds < b.FetchSeconds ||
		a.PromoteSeconds < b.PromoteSeconds || a.GatherSeconds < b.GatherSeconds ||
		a.OtherSeconds < b.OtherSeconds
}

// validStats checks that a report has no negative total.
func validStats(s control.LoaderStats) error {
	if below(s, control.LoaderStats{}) {
		return fmt.Errorf("%w: negative loader stats %+v", control.ErrInvalid, s)
	}
	return nil
}

// handleStats serves POST /v1/plans/{id}/stats: a loader's report.
func (d *Daemon) handleStats(w http.ResponseWriter, r *http.Request) {
	var req control.LoaderStats
	if err := decodeBody(w, r, &req, maxRequestBody); err != nil {
		writeError(w, err)
		return
	}
	if err := validStats(req); err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if !d.plans.report(id, req) {
		writeError(w, fmt.Errorf("plan %q: %w", id, control.ErrNotFound))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// loaderStatus is the loaders' part of the status.
func (d *Daemon) loaderStatus() *control.LoadersStatus {
	n, t := d.plans.loaderTotals()
	return &control.LoadersStatus{Reporting: n, Totals: t}
}

// loaderMetrics is the loaders' part of the metrics.
func (d *Daemon) loaderMetrics() metrics.LoaderStats {
	n, t := d.plans.loaderTotals()
	return metrics.LoaderStats{Plans: n, Batches: t.Batches, Samples: t.Samples, Bytes: t.Bytes,
		FetchSeconds: t.FetchSeconds, PromoteSeconds: t.PromoteSeconds, GatherSeconds: t.GatherSeconds,
		OtherSeconds: t.OtherSeconds}
}
