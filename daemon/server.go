package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// Request body limits.
const (
	maxRequestBody = 1 << 20   // every request but plans
	maxPlanBody    = 256 << 20 // a plan of a few million objects
)

// watchEvery bounds how often a job watch sends a snapshot.
const watchEvery = 200 * time.Millisecond

// routes returns the control API's handler.
func (d *Daemon) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ping", d.handlePing)
	mux.HandleFunc("GET /v1/status", d.handleStatus)
	mux.HandleFunc("POST /v1/prefetch", d.handlePrefetch)
	mux.HandleFunc("GET /v1/jobs", d.handleJobs)
	mux.HandleFunc("GET /v1/jobs/{id}", d.handleJob)
	mux.HandleFunc("DELETE /v1/jobs/{id}", d.handleCancelJob)
	mux.HandleFunc("POST /v1/pin", d.handlePin)
	mux.HandleFunc("POST /v1/unpin", d.handleUnpin)
	mux.HandleFunc("POST /v1/evict", d.handleEvict)
	mux.HandleFunc("POST /v1/verify", d.handleVerify)
	mux.HandleFunc("GET /v1/objects", d.handleList)
	mux.HandleFunc("GET /v1/object", d.handleRead)
	mux.HandleFunc("POST /v1/plans", d.handlePlan)
	mux.HandleFunc("POST /v1/plans/{id}/advance", d.handleAdvance)
	mux.HandleFunc("POST /v1/plans/{id}/stats", d.handleStats)
	mux.HandleFunc("GET /v1/plans", d.handlePlans)
	mux.HandleFunc("GET /v1/plans/{id}", d.handleGetPlan)
	mux.HandleFunc("DELETE /v1/plans/{id}", d.handleDropPlan)
	mux.HandleFunc("POST /v1/fetch", d.handleFetch)
	mux.HandleFunc("POST /v1/promote", d.handlePromote)
	mux.HandleFunc("POST /v1/sessions", d.handleSession)
	mux.HandleFunc("POST /v1/sessions/{sid}/leases", d.handleAcquire)
	mux.HandleFunc("DELETE /v1/sessions/{sid}/leases/{id}", d.handleRelease)
	mux.HandleFunc("POST /v1/loaders", d.handleLoaderSession)
	mux.HandleFunc("GET /v1/fleet", d.handleFleet)
	mux.HandleFunc("POST /v1/checkpoints", d.handleCheckpointSave)
	mux.HandleFunc("POST /v1/checkpoints/staging", d.handleCheckpointStaging)
	mux.HandleFunc("DELETE /v1/checkpoints/staging", d.handleCheckpointUnstage)
	mux.HandleFunc("POST /v1/checkpoints/wait", d.handleCheckpointWait)
	mux.HandleFunc("GET /v1/checkpoints", d.handleCheckpointStatus)
	mux.HandleFunc("GET /v1/checkpoints/list", d.handleCheckpointList)
	mux.HandleFunc("POST /v1/checkpoints/restore", d.handleCheckpointRestore)
	return d.counted(mux)
}

// counted counts requests by route pattern and status for the metrics.
func (d *Daemon) counted(next *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		d.met.ObserveRequest(route, sw.code)
	})
}

// statusWriter records the status a handler sent.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeJSON sends v with the given status.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// writeError sends err as an ErrorBody with the status its code maps to.
func writeError(w http.ResponseWriter, err error) {
	code, status := codeOf(err)
	writeJSON(w, status, control.ErrorBody{Error: err.Error(), Code: code})
}

// decodeBody decodes a JSON body of at most limit bytes into v, strictly.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %w", control.ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: body: more than one JSON value", control.ErrInvalid)
	}
	return nil
}

// checkBucket refuses requests without a bucket.
func checkBucket(bucket string) error {
	if bucket == "" {
		return fmt.Errorf("%w: no bucket", control.ErrInvalid)
	}
	return nil
}

func (d *Daemon) handlePing(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, control.Info{Version: d.opts.Version, PID: pid,
		CacheDir: d.Config().Tiers.Disk.Dir, Started: d.started})
}

func (d *Daemon) handleStatus(w http.ResponseWriter, _ *http.Request) {
	b, err := d.statusBody()
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

func (d *Daemon) handlePrefetch(w http.ResponseWriter, r *http.Request) {
	var req control.PrefetchRequest
	if err := decodeBody(w, r, &req, maxRequestBody); err != nil {
		writeError(w, err)
		return
	}
	prio := object.Warm
	switch req.Priority {
	case "", "warm":
	case "plan":
		prio = object.Plan
	default:
		writeError(w, fmt.Errorf("%w: priority %q is not warm or plan", control.ErrInvalid, req.Priority))
		return
	}
	if err := checkBucket(req.Bucket); err != nil {
		writeError(w, err)
		return
	}
	j, err := d.jobs.start(jobSpec{kind: control.KindPrefetch, uri: "gs://" + req.Bucket + "/" + req.Prefix,
		bucket: req.Bucket, prefix: req.Prefix, prio: prio})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, j.snapshot())
}

func (d *Daemon) handleJobs(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, d.jobs.snapshots())
}

// handleJob serves GET /v1/jobs/{id}; with ?watch=1 it streams snapshots
// (NDJSON) until the job reaches a final state.
func (d *Daemon) handleJob(w http.ResponseWriter, r *http.Request) {
	j, ok := d.jobs.get(r.PathValue("id"))
	if !ok {
		writeError(w, fmt.Errorf("job %q: %w", r.PathValue("id"), control.ErrNotFound))
		return
	}
	if r.URL.Query().Get("watch") == "" {
		writeJSON(w, http.StatusOK, j.snapshot())
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	for {
		s, changed := j.watch()
		if enc.Encode(s) != nil || rc.Flush() != nil || s.State.Final() {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
		t := time.NewTimer(watchEvery) // coalesce bursts of progress
		select {
		case <-t.C:
		case <-j.done:
			t.Stop()
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
}

func (d *Daemon) handleCancelJob(w http.ResponseWriter, r *http.Request) {
	j, ok := d.jobs.get(r.PathValue("id"))
	if !ok {
		writeError(w, fmt.Errorf("job %q: %w", r.PathValue("id"), control.ErrNotFound))
		return
	}
	j.cancel()
	w.WriteHeader(http.StatusNoContent)
}

// handlePin serves POST /v1/pin: cache at plan priority, then pin.
func (d *Daemon) handlePin(w http.ResponseWriter, r *http.Request) {
	var req control.PrefixRequest
	if err := decodeBody(w, r, &req, maxRequestBody); err != nil {
		writeError(w, err)
		return
	}
	if err := checkBucket(req.Bucket); err != nil {
		writeError(w, err)
		return
	}
	defer d.stats.invalidate()
	ctx := r.Context()
	var objs []object.Attrs
	for a, err := range d.src.List(ctx, req.Bucket, req.Prefix) {
		if err != nil {
			writeError(w, fmt.Errorf("list gs://%s/%s: %w", req.Bucket, req.Prefix, err))
			return
		}
		objs = append(objs, a)
	}
	objs = d.fleetListed("gs://"+req.Bucket+"/"+req.Prefix, objs)
	if err := d.cache.Prefetch(ctx, objs, object.Plan, nil); err != nil {
		writeError(w, err)
		return
	}
	pin := d.cache.Pin
	if req.Hot {
		pin = d.cache.PinHot
	}
	n, err := pin(ctx, req.Bucket, req.Prefix)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, control.CountResult{Count: n})
}

func (d *Daemon) handleUnpin(w http.ResponseWriter, r *http.Request) {
	var req control.PrefixRequest
	if err := decodeBody(w, r, &req, maxRequestBody); err != nil {
		writeError(w, err)
		return
	}
	defer d.stats.invalidate()
	n, err := d.cache.Unpin(r.Context(), req.Bucket, req.Prefix)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, control.CountResult{Count: n})
}

func (d *Daemon) handleEvict(w http.ResponseWriter, r *http.Request) {
	var req control.PrefixRequest
	if err := decodeBody(w, r, &req, maxRequestBody); err != nil {
		writeError(w, err)
		return
	}
	defer d.stats.invalidate()
	res, err := d.cache.Evict(r.Context(), req.Bucket, req.Prefix)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, control.EvictResult{Evicted: res.Evicted, Pending: res.Pending, Skipped: res.Skipped})
}

func (d *Daemon) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := checkBucket(q.Get("bucket")); err != nil {
		writeError(w, err)
		return
	}
	res, err := ListObjects(r.Context(), d.src, d.cache, q.Get("bucket"), q.Get("prefix"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// handleRead serves GET /v1/object?bucket=&name=[&generation=][&revalidate=]:
// the object's bytes through the cache (ranges supported).
func (d *Daemon) handleRead(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o := object.Object{Bucket: q.Get("bucket"), Name: q.Get("name")}
	var opts []tier.OpenOption
	var err error
	if g := q.Get("generation"); g != "" {
		if o.Generation, err = strconv.ParseInt(g, 10, 64); err != nil {
			writeError(w, fmt.Errorf("%w: generation %q", control.ErrInvalid, g))
			return
		}
	}
	if v := q.Get("revalidate"); v != "" {
		rv, err := time.ParseDuration(v)
		if err != nil {
			writeError(w, fmt.Errorf("%w: revalidate %q", control.ErrInvalid, v))
			return
		}
		opts = append(opts, tier.WithRevalidate(rv))
	}
	h, err := d.cache.Open(r.Context(), o, opts...)
	d.stats.invalidate()
	if err != nil {
		writeError(w, err)
		return
	}
	defer h.Close()
	a := h.Attrs()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Generation", strconv.FormatInt(a.Generation, 10))
	http.ServeContent(w, r, "", a.Updated, ctxReader{r.Context(), io.NewSectionReader(h, 0, h.Size())})
}

// ctxReader stops reading once ctx ends, so that a long read does not hold
// up shutdown.
type ctxReader struct {
	ctx context.Context // the request's: this adapter lives as long as it
	*io.SectionReader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.SectionReader.Read(p)
}
