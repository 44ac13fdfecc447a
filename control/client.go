package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// baseURL prefixes every request; the host is ignored (the transport dials
// the socket).
const baseURL = "http://cacheagent"

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// Client talks to the daemon over its Unix socket. Create it with Dial and
// Close it when done. It is safe for concurrent use.
//
// Leases (Acquire, Open) live in a lease session: one streaming request the
// client keeps open, opened on the first Acquire. When the session's
// connection closes (Close, a crash, a daemon restart) the daemon releases
// every lease of it, and the client marks them stale.
type Client struct {
	// Immutable after Dial.
	socket string
	tr     *http.Transport
	hc     *http.Client
	info   Info

	// openMu serialises opening a lease session; it is held during that
	// request, and taken before mu.
	openMu sync.Mutex

	mu     sync.Mutex // protects the fields below
	sess   *session   // the current lease session, nil if none
	closed bool

	readers sync.WaitGroup // session stream readers
}

// Dial connects to the daemon listening on socket and checks that it
// answers. If nothing listens there, the error matches ErrUnavailable; if
// the socket may not be used, fs.ErrPermission.
func Dial(ctx context.Context, socket string) (*Client, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	c := &Client{socket: socket, tr: tr, hc: &http.Client{Transport: tr}}
	if err := c.do(ctx, http.MethodGet, "/v1/ping", nil, nil, &c.info); err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	return c, nil
}

// Info describes the daemon as it answered Dial.
func (c *Client) Info() Info { return c.info }

// Socket returns the socket the client talks to.
func (c *Client) Socket() string { return c.socket }

// Close ends the lease session (the daemon releases its leases, and they
// turn stale), waits for its reader and closes idle connections. Later
// calls fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.closed = true
	s := c.sess
	c.sess = nil
	c.mu.Unlock()
	if s != nil {
		s.cancel()
	}
	c.readers.Wait()
	c.tr.CloseIdleConnections()
	return nil
}

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, nil, &s)
	return s, err
}

// Prefetch starts a job that caches every object of bucket under prefix at
// priority p (object.Warm or object.Plan) and returns it at once.
func (c *Client) Prefetch(ctx context.Context, bucket, prefix string, p object.Priority) (Job, error) {
	var j Job
	err := c.do(ctx, http.MethodPost, "/v1/prefetch", nil,
		PrefetchRequest{Bucket: bucket, Prefix: prefix, Priority: p.String()}, &j)
	return j, err
}

// Job returns the job with the given id (ErrNotFound if the daemon does not
// know it: finished jobs are kept for a while, not forever).
func (c *Client) Job(ctx context.Context, id string) (Job, error) {
	var j Job
	err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil, nil, &j)
	return j, err
}

// Jobs returns the jobs the daemon knows, oldest first.
func (c *Client) Jobs(ctx context.Context) ([]Job, error) {
	var js []Job
	err := c.do(ctx, http.MethodGet, "/v1/jobs", nil, nil, &js)
	return js, err
}

// CancelJob cancels a job: it starts no more downloads, and the ones in
// flight finish (other readers may share them). Cancelling a finished job
// does nothing.
func (c *Client) CancelJob(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/jobs/"+url.PathEscape(id), nil, nil, nil)
}

// Pin caches (at plan priority) and pins every object of bucket under
// prefix; hot also promotes them to the shm tier. It returns how many
// entries it newly pinned.
func (c *Client) Pin(ctx context.Context, bucket, prefix string, hot bool) (int, error) {
	var r CountResult
	err := c.do(ctx, http.MethodPost, "/v1/pin", nil, PrefixRequest{Bucket: bucket, Prefix: prefix, Hot: hot}, &r)
	return r.Count, err
}

// Unpin unpins every cached object of bucket under prefix and returns how
// many entries it unpinned.
func (c *Client) Unpin(ctx context.Context, bucket, prefix string) (int, error) {
	var r CountResult
	err := c.do(ctx, http.MethodPost, "/v1/unpin", nil, PrefixRequest{Bucket: bucket, Prefix: prefix}, &r)
	return r.Count, err
}

// Evict removes every cached object of bucket under prefix except pinned
// and in-use ones, which it counts as skipped.
func (c *Client) Evict(ctx context.Context, bucket, prefix string) (EvictResult, error) {
	var r EvictResult
	err := c.do(ctx, http.MethodPost, "/v1/evict", nil, PrefixRequest{Bucket: bucket, Prefix: prefix}, &r)
	return r, err
}

// List lists the objects of bucket under prefix at the source with the tier
// holding each.
func (c *Client) List(ctx context.Context, bucket, prefix string) (ListResult, error) {
	var r ListResult
	q := url.Values{"bucket": {bucket}, "prefix": {prefix}}
	err := c.do(ctx, http.MethodGet, "/v1/objects", q, nil, &r)
	return r, err
}

// Plan announces that a reader will open objs in this order, as plan id
// (replacing a plan with that id); the reader is at position 0. With
// AdvancePlan and DropPlan it implements the loader's Planner through the
// daemon.
func (c *Client) Plan(ctx context.Context, id string, objs []object.Object) error {
	return c.do(ctx, http.MethodPost, "/v1/plans", nil, PlanRequest{ID: id, Objects: refsOf(objs)}, nil)
}

// AdvancePlan reports that plan id's reader is about to open the object at
// position pos (ErrNotFound if the plan is not announced).
func (c *Client) AdvancePlan(ctx context.Context, id string, pos int) error {
	return c.do(ctx, http.MethodPost, "/v1/plans/"+url.PathEscape(id)+"/advance", nil, AdvanceRequest{Position: pos}, nil)
}

// ReportStats reports the stats of plan id's loader (totals since it
// started), which the daemon exports as metrics (ErrNotFound if the plan
// is not announced). It makes *Client a loader.StatsReporter.
func (c *Client) ReportStats(ctx context.Context, id string, s stats.Loader) error {
	return c.do(ctx, http.MethodPost, "/v1/plans/"+url.PathEscape(id)+"/stats", nil, s, nil)
}

// DropPlan forgets plan id (ErrNotFound if it is not announced).
func (c *Client) DropPlan(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/plans/"+url.PathEscape(id), nil, nil, nil)
}

// Plans describes the announced plans, oldest first.
func (c *Client) Plans(ctx context.Context) ([]Plan, error) {
	var ps []Plan
	err := c.do(ctx, http.MethodGet, "/v1/plans", nil, nil, &ps)
	return ps, err
}

// Fetch returns once every object in objs is cached, downloading the
// missing ones at demand priority. With Promote it implements the
// loader's Stager through the daemon.
func (c *Client) Fetch(ctx context.Context, objs []object.Object) error {
	return c.do(ctx, http.MethodPost, "/v1/fetch", nil, ObjectsRequest{Objects: refsOf(objs)}, nil)
}

// Promote returns once every cached object in objs is in the shm tier, or
// as fast to read from disk (its disk copy is wholly in memory; the daemon
// promotes it in the background), or could not be placed there (it is then
// served from disk; the error says why). Without a shm tier it does
// nothing.
func (c *Client) Promote(ctx context.Context, objs []object.Object) error {
	return c.do(ctx, http.MethodPost, "/v1/promote", nil, ObjectsRequest{Objects: refsOf(objs)}, nil)
}

// refsOf converts objects for the wire.
func refsOf(objs []object.Object) []ObjectRef {
	refs := make([]ObjectRef, len(objs))
	for i, o := range objs {
		refs[i] = RefOf(o)
	}
	return refs
}

// Read copies o's bytes, through the cache, to w and returns how many it
// wrote. revalidate, if not nil, overrides the daemon's revalidation
// interval for this read (0: check the source now).
func (c *Client) Read(ctx context.Context, o object.Object, w io.Writer, revalidate *time.Duration) (int64, error) {
	q := url.Values{"bucket": {o.Bucket}, "name": {o.Name}}
	if o.Generation != 0 {
		q.Set("generation", strconv.FormatInt(o.Generation, 10))
	}
	if revalidate != nil {
		q.Set("revalidate", revalidate.String())
	}
	resp, err := c.send(ctx, http.MethodGet, "/v1/object", q, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("control: read %s: %w", o, err)
	}
	return n, nil
}

// do sends a request with in (if not nil) as its JSON body and decodes the
// JSON answer into out (if not nil).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("control: %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	resp, err := c.send(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
	} else {
		err = json.NewDecoder(resp.Body).Decode(out)
	}
	if err != nil {
		return fmt.Errorf("control: %s %s: read answer: %w", method, path, err)
	}
	return nil
}

// send sends a request and returns the response if its status is 2xx; an
// error answer becomes an *Error.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Response, error) {
	u := baseURL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("control: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportError(method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// transportError wraps a failed round trip; a socket nobody listens on
// matches ErrUnavailable.
func (c *Client) transportError(method, path string, err error) error {
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("control: no daemon answers on %s: %w: %w", c.socket, ErrUnavailable, err)
	}
	return fmt.Errorf("control: %s %s on %s: %w", method, path, c.socket, err)
}

// decodeError turns an error response into an *Error.
func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var eb ErrorBody
	if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
		eb = ErrorBody{Error: fmt.Sprintf("%s: %q", resp.Status, b), Code: CodeInternal}
	}
	return &Error{Status: resp.StatusCode, Code: eb.Code, Message: eb.Error}
}

// WatchJob follows a job until it reaches a final state or ctx ends: fn
// (if not nil) is called with each snapshot the daemon sends (at most a few
// per second, and always the final one), and the final snapshot is
// returned.
func (c *Client) WatchJob(ctx context.Context, id string, fn func(Job)) (Job, error) {
	q := url.Values{"watch": {"1"}}
	resp, err := c.send(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), q, nil)
	if err != nil {
		return Job{}, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	var j Job
	for {
		var next Job
		if err := dec.Decode(&next); err != nil {
			if ctx.Err() != nil {
				return j, fmt.Errorf("control: watch job %s: %w", id, ctx.Err())
			}
			return j, fmt.Errorf("control: watch job %s: stream ended in state %q: %w: %w", id, j.State, ErrUnavailable, err)
		}
		j = next
		if fn != nil {
			fn(j)
		}
		if j.State.Final() {
			return j, nil
		}
	}
}

// Verify has the daemon read the cached copies req selects and check them
// against their CRC32C, dropping those that fail (see tier.Cache.Verify),
// and returns its final report. progress, if not nil, is called with the
// counts as they grow (a few times a second). If the verification stopped
// early, the report holds what it found and the error says why; cancelling
// ctx stops it.
func (c *Client) Verify(ctx context.Context, req VerifyRequest, progress func(stats.Verify)) (VerifyReport, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return VerifyReport{}, fmt.Errorf("control: verify: %w", err)
	}
	resp, err := c.send(ctx, http.MethodPost, "/v1/verify", nil, bytes.NewReader(b))
	if err != nil {
		return VerifyReport{}, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	var r VerifyReport
	for {
		var next VerifyReport
		if err := dec.Decode(&next); err != nil {
			if ctx.Err() != nil {
				return r, fmt.Errorf("control: verify: %w", ctx.Err())
			}
			return r, fmt.Errorf("control: verify: stream ended early: %w: %w", ErrUnavailable, err)
		}
		r = next
		switch {
		case r.Done && r.Error != "":
			return r, fmt.Errorf("control: verify: %s", r.Error)
		case r.Done:
			return r, nil
		case progress != nil:
			progress(r.Verify)
		}
	}
}
