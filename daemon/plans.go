package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
	"github.com/cacheagent/cacheagent/tier"
)

// Plan limits.
const (
	maxPlans       = 1024
	maxPlanObjects = 4 << 20
	maxPlanID      = 256
)

// planStore describes the plans announced through the API, and keeps the
// stats their loaders report (loaders.go); the cache (tier.Cache.Plan)
// holds the plans themselves and acts on them.
type planStore struct {
	mu      sync.Mutex            // protects the fields below
	plans   map[string]*planEntry // by plan id
	loaders stats.Loader          // the sum of every report's growth
}

// planEntry is one announced plan.
type planEntry struct {
	plan control.Plan
	// last is its loader's last report, nil before the first. It outlives
	// a replacement of the plan (a loader announces its plan again every
	// epoch) and goes with the plan.
	last *stats.Loader
}

func newPlanStore() *planStore { return &planStore{plans: make(map[string]*planEntry)} }

// admit checks that a plan with id may be stored (one more, unless it
// replaces one).
func (s *planStore) admit(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.plans[id]; !ok && len(s.plans) >= maxPlans {
		return fmt.Errorf("%w: %d plans are announced already; drop some", control.ErrInvalid, maxPlans)
	}
	return nil
}

// put stores p, replacing the plan with its id but keeping that plan's
// last loader report.
func (s *planStore) put(p control.Plan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.plans[p.ID]; ok {
		e.plan = p
		return
	}
	s.plans[p.ID] = &planEntry{plan: p}
}

// advance records plan id's position; false if there is no such plan.
func (s *planStore) advance(id string, pos int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.plans[id]
	if ok {
		e.plan.Position = min(max(pos, 0), e.plan.Objects)
	}
	return ok
}

func (s *planStore) get(id string) (control.Plan, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.plans[id]
	if !ok {
		return control.Plan{}, false
	}
	p := e.plan
	if e.last != nil {
		st := *e.last
		p.Stats = &st
	}
	return p, true
}

// remove forgets plan id and its loader's last report; false if there was
// no such plan.
func (s *planStore) remove(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.plans[id]
	delete(s.plans, id)
	return ok
}

func (s *planStore) list() []control.Plan {
	s.mu.Lock()
	out := make([]control.Plan, 0, len(s.plans))
	for _, e := range s.plans {
		out = append(out, e.plan)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b control.Plan) int { return a.Created.Compare(b.Created) })
	return out
}

func (s *planStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.plans)
}

// objectsOf validates a list of objects from a request.
func objectsOf(refs []control.ObjectRef) ([]object.Object, error) {
	if len(refs) > maxPlanObjects {
		return nil, fmt.Errorf("%w: %d objects (at most %d)", control.ErrInvalid, len(refs), maxPlanObjects)
	}
	objs := make([]object.Object, len(refs))
	for i, r := range refs {
		if r.Bucket == "" || r.Name == "" {
			return nil, fmt.Errorf("%w: object %d has no bucket or name: %w", control.ErrInvalid, i, object.ErrInvalidName)
		}
		objs[i] = r.Object()
	}
	return objs, nil
}

// handlePlan serves POST /v1/plans: announce the plan to the cache.
func (d *Daemon) handlePlan(w http.ResponseWriter, r *http.Request) {
	var req control.PlanRequest
	if err := decodeBody(w, r, &req, maxPlanBody); err != nil {
		writeError(w, err)
		return
	}
	if len(req.ID) > maxPlanID || strings.ContainsRune(req.ID, 0) {
		writeError(w, fmt.Errorf("%w: plan id longer than %d bytes or with a NUL", control.ErrInvalid, maxPlanID))
		return
	}
	objs, err := objectsOf(req.Objects)
	if err == nil {
		if req.ID == "" {
			req.ID = newID()
		}
		err = d.plans.admit(req.ID)
	}
	if err == nil {
		err = d.cache.Plan(r.Context(), req.ID, objs)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	p := control.Plan{ID: req.ID, Objects: len(objs), Created: time.Now()}
	d.plans.put(p)
	d.stats.invalidate()
	writeJSON(w, http.StatusOK, p)
}

// handleAdvance serves POST /v1/plans/{id}/advance.
func (d *Daemon) handleAdvance(w http.ResponseWriter, r *http.Request) {
	var req control.AdvanceRequest
	if err := decodeBody(w, r, &req, maxRequestBody); err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if err := d.cache.AdvancePlan(r.Context(), id, req.Position); err != nil {
		writeError(w, err)
		return
	}
	d.plans.advance(id, req.Position)
	w.WriteHeader(http.StatusNoContent)
}

func (d *Daemon) handlePlans(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, d.plans.list())
}

func (d *Daemon) handleGetPlan(w http.ResponseWriter, r *http.Request) {
	p, ok := d.plans.get(r.PathValue("id"))
	if !ok {
		writeError(w, fmt.Errorf("plan %q: %w", r.PathValue("id"), control.ErrNotFound))
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// handleDropPlan serves DELETE /v1/plans/{id}.
func (d *Daemon) handleDropPlan(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := d.cache.DropPlan(r.Context(), id)
	if known := d.plans.remove(id); errors.Is(err, tier.ErrNoPlan) && known {
		err = nil // announced through the API, dropped by the cache already
	}
	if err != nil {
		writeError(w, err)
		return
	}
	d.stats.invalidate()
	w.WriteHeader(http.StatusNoContent)
}

// handleFetch serves POST /v1/fetch: cache every object, at demand
// priority, before answering.
func (d *Daemon) handleFetch(w http.ResponseWriter, r *http.Request) {
	var req control.ObjectsRequest
	if err := decodeBody(w, r, &req, maxPlanBody); err != nil {
		writeError(w, err)
		return
	}
	objs, err := objectsOf(req.Objects)
	if err == nil {
		err = d.cache.FetchObjects(r.Context(), objs, object.Demand)
	}
	d.stats.invalidate()
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handlePromote serves POST /v1/promote: stage cached objects for reading
// (tier.Cache.StageObjects: copied into the shm tier before the answer,
// or queued for the promoter when the disk copy is already in memory;
// nothing without a shm tier).
func (d *Daemon) handlePromote(w http.ResponseWriter, r *http.Request) {
	var req control.ObjectsRequest
	if err := decodeBody(w, r, &req, maxPlanBody); err != nil {
		writeError(w, err)
		return
	}
	objs, err := objectsOf(req.Objects)
	var n, q int
	if err == nil {
		n, q, err = d.cache.StageObjects(r.Context(), objs)
	}
	d.stats.invalidate()
	if err != nil && !errors.Is(err, tier.ErrNoShm) {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, control.PromoteResult{Promoted: n, Queued: q})
}
