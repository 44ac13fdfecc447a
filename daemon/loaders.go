package daemon

import (
	"fmt"
	"net/http"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/stats"
)

// Loaders in other processes report their stats (stats.Loader: totals
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
func (s *planStore) report(id string, cur stats.Loader) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.plans[id]
	if !ok {
		return false
	}
	s.loaders = s.loaders.Add(statsGrowth(e.last, cur))
	e.last = &cur
	return true
}

// loaderTotals returns the number of plans whose loaders reported and the
// running totals.
func (s *planStore) loaderTotals() (reporting int, totals stats.Loader) {
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
func statsGrowth(last *stats.Loader, cur stats.Loader) stats.Loader {
	if last == nil || cur.Below(*last) {
		return cur
	}
	return cur.Sub(*last)
}

// validStats checks that a report has no negative total.
func validStats(s stats.Loader) error {
	if s.Below(stats.Loader{}) {
		return fmt.Errorf("%w: negative loader stats %+v", control.ErrInvalid, s)
	}
	return nil
}

// handleStats serves POST /v1/plans/{id}/stats: a loader's report.
func (d *Daemon) handleStats(w http.ResponseWriter, r *http.Request) {
	var req stats.Loader
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
