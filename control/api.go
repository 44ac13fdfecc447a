package control

import (
	"time"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// DefaultSocket is the control socket's path unless configured otherwise.
// systemd creates its directory (RuntimeDirectory=cacheagent).
const DefaultSocket = "/run/cacheagent/control.sock"

// Info identifies a running daemon: GET /v1/ping.
type Info struct {
	Version  string    `json:"version"`
	PID      int       `json:"pid"`
	CacheDir string    `json:"cache_dir"`
	Started  time.Time `json:"started"`
}

// Status is the daemon's state (GET /v1/status), and what
// `cacheagent status --json` prints, through the daemon or standalone (then
// only CacheDir and Tiers are set).
type Status struct {
	// Version, PID, Started and ConfigFile describe the daemon.
	Version    string    `json:"version,omitempty"`
	PID        int       `json:"pid,omitempty"`
	Started    time.Time `json:"started,omitzero"`
	ConfigFile string    `json:"config_file,omitempty"`
	// Socket and MetricsAddr are where the daemon listens ("" when metrics
	// are off).
	Socket      string `json:"socket,omitempty"`
	MetricsAddr string `json:"metrics_addr,omitempty"`
	// CacheDir is the disk tier's directory.
	CacheDir string `json:"cache_dir"`
	// Tiers describes each tier, fastest first (see stats.Cache).
	Tiers []stats.Tier `json:"tiers"`
	// Fetch describes the downloader; nil standalone.
	Fetch *stats.Fetch `json:"fetch,omitempty"`
	// Jobs counts jobs by state; nil standalone.
	Jobs map[JobState]int `json:"jobs,omitempty"`
	// Sessions and Leases count lease sessions and the leases they hold;
	// Plans counts announced plans.
	Sessions int `json:"sessions"`
	Leases   int `json:"leases"`
	Plans    int `json:"plans"`
	// Loaders sums the stats of the loaders that report them (through
	// their plans); nil standalone.
	Loaders *LoadersStatus `json:"loaders,omitempty"`
	// LoaderSessions counts open loader sessions (POST /v1/loaders).
	LoaderSessions int `json:"loader_sessions"`
	// Fleet counts the fleet's members by state; nil without fleet mode
	// (GET /v1/fleet lists them).
	Fleet *stats.Fleet `json:"fleet,omitempty"`
	// Mount describes the FUSE mount; nil without mount.path.
	Mount *stats.Mount `json:"mount,omitempty"`
	// Checkpoints are the checkpoint store's figures; nil standalone.
	Checkpoints *stats.Checkpoints `json:"checkpoints,omitempty"`
}

// LoadersStatus sums the stats that loaders report through their plans
// (POST /v1/plans/{id}/stats).
type LoadersStatus struct {
	// Reporting counts the announced plans whose loaders report stats.
	Reporting int `json:"reporting"`
	// Totals sums what every loader delivered and waited since the daemon
	// started, dropped plans included; a loader that restarts under the
	// same plan id counts from zero again.
	Totals stats.Loader `json:"totals"`
}

// JobState is where a job is in its life.
type JobState string

// Job states. Done, Failed and Cancelled are final.
const (
	JobListing   JobState = "listing"
	JobRunning   JobState = "running"
	JobDone      JobState = "done"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
)

// Final reports whether s is a final state.
func (s JobState) Final() bool { return s == JobDone || s == JobFailed || s == JobCancelled }

// Job kinds.
const (
	// KindPrefetch is a prefetch asked for through the API.
	KindPrefetch = "prefetch"
	// KindWarm warms a configured source.
	KindWarm = "warm"
)

// Job is an asynchronous prefetch: GET /v1/jobs/{id}.
type Job struct {
	ID       string   `json:"id"`
	Kind     string   `json:"kind"`
	URI      string   `json:"uri"`
	Priority string   `json:"priority"`
	State    JobState `json:"state"`
	// Listed counts the objects listed so far: in state listing, or while
	// Progress.Listing (the objects are prefetched as they are listed).
	Listed   int       `json:"listed"`
	Progress Progress  `json:"progress"`
	Error    string    `json:"error,omitempty"`
	Created  time.Time `json:"created"`
	Finished time.Time `json:"finished,omitzero"`
}

// Progress is a job's advance; byte counts are object sizes (see
// tier.Progress).
type Progress struct {
	Objects      int   `json:"objects"`
	Bytes        int64 `json:"bytes"`
	ObjectsDone  int   `json:"objects_done"`
	BytesDone    int64 `json:"bytes_done"`
	BytesFetched int64 `json:"bytes_fetched"`
	Cached       int   `json:"cached"`
	Failed       int   `json:"failed"`
	// Listing is true while the prefix is still being listed and its
	// objects prefetched as they come: Objects and Bytes grow until then.
	Listing bool `json:"listing,omitempty"`
}

// PrefetchRequest starts a prefetch job: POST /v1/prefetch.
type PrefetchRequest struct {
	Bucket string `json:"bucket"`
	Prefix string `json:"prefix"`
	// Priority is "warm" (the default) or "plan".
	Priority string `json:"priority,omitempty"`
}

// PrefixRequest names the objects of Bucket whose names start with Prefix:
// POST /v1/pin, /v1/unpin and /v1/evict.
type PrefixRequest struct {
	Bucket string `json:"bucket"`
	Prefix string `json:"prefix"`
	// Hot also promotes pinned objects to the shm tier (pin only).
	Hot bool `json:"hot,omitempty"`
}

// CountResult is the answer to pin and unpin: how many entries changed.
type CountResult struct {
	Count int `json:"count"`
}

// EvictResult is the answer to evict (see tier.EvictResult).
type EvictResult struct {
	// Evicted counts copies removed, files deleted.
	Evicted int `json:"evicted"`
	// Pending counts copies in use: they left the cache, and their files
	// are deleted when their last reader (lease, open file) lets go.
	Pending int `json:"pending"`
	// Skipped counts pinned objects, left in place.
	Skipped int `json:"skipped"`
}

// VerifyRequest verifies cached copies against their CRC32C: POST
// /v1/verify (see tier.Cache.Verify).
type VerifyRequest struct {
	// Bucket and Prefix select the objects; Bucket "" selects every cached
	// object.
	Bucket string `json:"bucket,omitempty"`
	Prefix string `json:"prefix,omitempty"`
	// Rate bounds the bytes read per second; 0 means unlimited.
	Rate int64 `json:"rate,omitempty"`
}

// VerifyReport is one line of POST /v1/verify's answer (NDJSON): the
// counts so far, a few times a second, then a last line with Done set, the
// copies dropped and, if the verification stopped early, the error. It is
// also what `cacheagent verify --json` prints.
type VerifyReport struct {
	stats.Verify
	Done    bool          `json:"done,omitempty"`
	Dropped []DroppedCopy `json:"dropped,omitempty"`
	Error   string        `json:"error,omitempty"`
}

// DroppedCopy is one copy a verification dropped (see tier.DroppedCopy).
type DroppedCopy struct {
	Object ObjectRef `json:"object"`
	// Tier held the copy: shm or disk.
	Tier   string `json:"tier"`
	Reason string `json:"reason"`
}

// Object is one row of a listing (GET /v1/objects) and of `cacheagent ls
// --json`.
type Object struct {
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	Size       int64  `json:"size"`
	// Tier holds the live generation: "shm", "disk" or "none".
	Tier   string `json:"tier"`
	Pinned bool   `json:"pinned,omitempty"`
	// CachedGeneration is set when the cache holds another generation than
	// the live one.
	CachedGeneration int64 `json:"cached_generation,omitempty"`
}

// ListResult is the answer to GET /v1/objects.
type ListResult struct {
	Objects []Object `json:"objects"`
	// Warning is set when the source could not be listed and Objects holds
	// only what the cache has.
	Warning string `json:"warning,omitempty"`
}

// ObjectRef names an object, at one generation or (0) the live one.
type ObjectRef struct {
	Bucket     string `json:"bucket"`
	Name       string `json:"name"`
	Generation int64  `json:"generation,omitempty"`
}

// Object returns r as an object.Object.
func (r ObjectRef) Object() object.Object {
	return object.Object{Bucket: r.Bucket, Name: r.Name, Generation: r.Generation}
}

// RefOf returns o as an ObjectRef.
func RefOf(o object.Object) ObjectRef {
	return ObjectRef{Bucket: o.Bucket, Name: o.Name, Generation: o.Generation}
}

// PlanRequest announces a plan: POST /v1/plans. A plan is the order in
// which a reader (a loader in another process) will open objects; the
// cache prefetches ahead of it and evicts what it needs last (see
// tier.Cache.Plan).
type PlanRequest struct {
	// ID names the plan; a plan with the same ID is replaced. "" lets the
	// daemon choose one.
	ID      string      `json:"id,omitempty"`
	Objects []ObjectRef `json:"objects"`
}

// AdvanceRequest reports a plan reader's progress: POST
// /v1/plans/{id}/advance. The reader is about to open Objects[Position].
type AdvanceRequest struct {
	Position int `json:"position"`
}

// Plan describes an announced plan: the answer to POST /v1/plans, and GET
// /v1/plans and /v1/plans/{id}.
type Plan struct {
	ID       string    `json:"id"`
	Objects  int       `json:"objects"`
	Position int       `json:"position"`
	Created  time.Time `json:"created"`
	// Stats is the last report of the plan's loader (POST
	// /v1/plans/{id}/stats, or a loader session's own): its totals since it
	// started, stalls by cause included; absent before the first.
	Stats *stats.Loader `json:"stats,omitempty"`
}

// ObjectsRequest names objects to fetch (POST /v1/fetch) or promote to
// the shm tier (POST /v1/promote).
type ObjectsRequest struct {
	Objects []ObjectRef `json:"objects"`
}

// PromoteResult is the answer to POST /v1/promote.
type PromoteResult struct {
	// Promoted counts the objects copied into the shm tier.
	Promoted int `json:"promoted"`
	// Queued counts the objects whose disk copy was already in memory:
	// the daemon promotes them in the background.
	Queued int `json:"queued"`
}

// Attrs is object.Attrs on the wire.
type Attrs struct {
	Bucket     string    `json:"bucket"`
	Name       string    `json:"name"`
	Generation int64     `json:"generation"`
	Size       int64     `json:"size"`
	CRC32C     uint32    `json:"crc32c,omitempty"`
	HasCRC32C  bool      `json:"has_crc32c,omitempty"`
	Updated    time.Time `json:"updated,omitzero"`
}

// AttrsOf returns a as Attrs.
func AttrsOf(a object.Attrs) Attrs {
	return Attrs{Bucket: a.Bucket, Name: a.Name, Generation: a.Generation, Size: a.Size,
		CRC32C: a.CRC32C, HasCRC32C: a.HasCRC32C, Updated: a.Updated}
}

// Fetch returns a as object.Attrs.
func (a Attrs) Fetch() object.Attrs {
	return object.Attrs{Object: object.Object{Bucket: a.Bucket, Name: a.Name, Generation: a.Generation},
		Size: a.Size, CRC32C: a.CRC32C, HasCRC32C: a.HasCRC32C, Updated: a.Updated}
}

// LeaseInfo is the answer to POST /v1/sessions/{sid}/leases: the lease's id
// within its session and the object's best local copy.
type LeaseInfo struct {
	ID   uint64 `json:"id"`
	Path string `json:"path"`
	// Offset is where the object's bytes start in the file at Path: 0 for
	// a file of its own; for a small object packed into a segment file with
	// others, a multiple of the page size (map Attrs.Size bytes from there).
	Offset int64 `json:"offset,omitempty"`
	// Tier holds the copy: shm or disk.
	Tier  string `json:"tier"`
	Attrs Attrs  `json:"attrs"`
}

// SessionEvent is one line of a lease session's stream (POST /v1/sessions):
// the first names the session, later ones list leases that went stale.
type SessionEvent struct {
	Session string   `json:"session,omitempty"`
	Stale   []uint64 `json:"stale,omitempty"`
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}
