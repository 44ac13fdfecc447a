package stats

import "time"

// Checkpoint is one checkpoint save as an agent knows it (`cacheagent
// checkpoint status`), or a committed checkpoint as its manifest says
// (`checkpoint list`).
type Checkpoint struct {
	// URI is the checkpoint's prefix, gs://BUCKET/PREFIX/.
	URI string `json:"uri"`
	// Save identifies the save; Node is the agent that took it, Created
	// when.
	Save    string    `json:"save,omitempty"`
	Node    string    `json:"node,omitempty"`
	Created time.Time `json:"created"`
	// Files and Bytes are its files' count and total size.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// State is "local" (fsynced on the saving agent), "peers" (also held
	// by the configured number of other members), "gcs" (uploaded and
	// committed), "failed" (Error says why) or, on a member holding
	// another's save, "replica".
	State string `json:"state"`
	// UploadedBytes are the bytes of its files whose objects are written.
	UploadedBytes int64 `json:"uploaded_bytes"`
	// Replicas counts the other members holding a verified copy.
	Replicas int `json:"replicas"`
	// Error is why it failed, or the upload's last transient error while
	// it retries.
	Error string `json:"error,omitempty"`
}

// Checkpoints are an agent's checkpoint figures since it started (gauges
// at the time of the snapshot).
type Checkpoints struct {
	// Saves counts the saves taken; Commits those committed; Restores
	// the restores served.
	Saves    int64 `json:"saves"`
	Commits  int64 `json:"commits"`
	Restores int64 `json:"restores"`
	// Pending is the saves not committed yet; DirtyBytes their bytes held
	// in the cache (never evicted until uploaded).
	Pending    int64 `json:"pending"`
	DirtyBytes int64 `json:"dirty_bytes"`
	// UploadedBytes counts the bytes written to the bucket; ReplicatedBytes
	// those sent to other members' replicas.
	UploadedBytes   int64 `json:"uploaded_bytes"`
	ReplicatedBytes int64 `json:"replicated_bytes"`
	// Retries counts upload requests retried after a transient error.
	Retries int64 `json:"retries"`
	// FailuresByCause counts the saves that failed for good, by cause
	// ("changed", "conflict", "other").
	FailuresByCause map[string]int64 `json:"failures_by_cause"`
}

// Restore says how a checkpoint restore placed its files.
type Restore struct {
	// Dir is the directory the files are in.
	Dir string `json:"dir"`
	// Files and Bytes count them; Linked are those hard-linked from the
	// cache's copies (the others were copied).
	Files  int   `json:"files"`
	Bytes  int64 `json:"bytes"`
	Linked int   `json:"linked"`
}
