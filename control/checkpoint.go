package control

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/cacheagent/cacheagent/stats"
)

// Durability levels of a checkpoint save, lowest first.
const (
	DurabilityLocal = "local" // fsynced on the saving agent
	DurabilityPeers = "peers" // also held by other fleet members
	DurabilityGCS   = "gcs"   // uploaded and committed
)

// CheckpointSave is the body of POST /v1/checkpoints: save the files under
// Dir as the checkpoint at URI (gs://BUCKET/PREFIX/) and answer once it is
// durable at Wait.
type CheckpointSave struct {
	Dir string `json:"dir"`
	URI string `json:"uri"`
	// Wait is the durability to wait for: "local" (the default), "peers"
	// or "gcs".
	Wait string `json:"wait,omitempty"`
}

// CheckpointWait is the body of POST /v1/checkpoints/wait.
type CheckpointWait struct {
	URI string `json:"uri"`
	// Durability is "local", "peers" or "gcs" (the default).
	Durability string `json:"durability,omitempty"`
	// TimeoutMillis bounds the wait (0: until the client gives up).
	TimeoutMillis int64 `json:"timeout_ms,omitempty"`
}

// CheckpointRestore is the body of POST /v1/checkpoints/restore: place the
// committed checkpoint at URI in Dir, or, without Dir, in a fresh
// directory the answer names.
type CheckpointRestore struct {
	URI string `json:"uri"`
	Dir string `json:"dir,omitempty"`
}

// CheckpointDir is the answer of POST /v1/checkpoints/staging: a fresh,
// empty directory on the cache's filesystem, owned by the caller, to write
// a checkpoint into and then save (the save removes it).
type CheckpointDir struct {
	Dir string `json:"dir"`
}

// Checkpoints is the answer of GET /v1/checkpoints (this agent's saves)
// and of GET /v1/checkpoints/list (the committed checkpoints of a run),
// newest first.
type Checkpoints struct {
	Checkpoints []stats.Checkpoint `json:"checkpoints"`
	// Skipped says why prefixes with a manifest were left out of a list
	// (a malformed manifest, objects that no longer match it).
	Skipped []string `json:"skipped,omitempty"`
}

// SaveCheckpoint saves the files under dir (which the daemon reads: a
// path on its machine) as the checkpoint at uri and waits until it is
// durable at wait ("" is local).
func (c *Client) SaveCheckpoint(ctx context.Context, dir, uri, wait string) (stats.Checkpoint, error) {
	var out stats.Checkpoint
	err := c.do(ctx, http.MethodPost, "/v1/checkpoints", nil, CheckpointSave{Dir: dir, URI: uri, Wait: wait}, &out)
	return out, err
}

// CheckpointStaging returns a fresh directory to write a checkpoint into.
func (c *Client) CheckpointStaging(ctx context.Context) (string, error) {
	var out CheckpointDir
	err := c.do(ctx, http.MethodPost, "/v1/checkpoints/staging", nil, struct{}{}, &out)
	return out.Dir, err
}

// RemoveStaging removes dir, a directory CheckpointStaging or a restore
// into a fresh directory gave this caller, with what is left in it.
func (c *Client) RemoveStaging(ctx context.Context, dir string) error {
	return c.do(ctx, http.MethodDelete, "/v1/checkpoints/staging", url.Values{"dir": {dir}}, nil, nil)
}

// WaitCheckpoint waits until the save of uri is durable at durability
// ("" is gcs), for at most timeout (0: as long as ctx allows).
func (c *Client) WaitCheckpoint(ctx context.Context, uri, durability string, timeout time.Duration) (stats.Checkpoint, error) {
	var out stats.Checkpoint
	err := c.do(ctx, http.MethodPost, "/v1/checkpoints/wait", nil,
		CheckpointWait{URI: uri, Durability: durability, TimeoutMillis: timeout.Milliseconds()}, &out)
	return out, err
}

// CheckpointStatus returns the saves the daemon holds or held: all, or
// those under uri if it is not "".
func (c *Client) CheckpointStatus(ctx context.Context, uri string) (Checkpoints, error) {
	var out Checkpoints
	q := url.Values{}
	if uri != "" {
		q.Set("uri", uri)
	}
	err := c.do(ctx, http.MethodGet, "/v1/checkpoints", q, nil, &out)
	return out, err
}

// ListCheckpoints returns the committed checkpoints under run, newest
// first.
func (c *Client) ListCheckpoints(ctx context.Context, run string) (Checkpoints, error) {
	var out Checkpoints
	err := c.do(ctx, http.MethodGet, "/v1/checkpoints/list", url.Values{"uri": {run}}, nil, &out)
	return out, err
}

// RestoreCheckpoint places the committed checkpoint at uri in dir (a path
// on the daemon's machine; "" for a fresh directory).
func (c *Client) RestoreCheckpoint(ctx context.Context, uri, dir string) (stats.Restore, error) {
	var out stats.Restore
	err := c.do(ctx, http.MethodPost, "/v1/checkpoints/restore", nil, CheckpointRestore{URI: uri, Dir: dir}, &out)
	return out, err
}
