package control

import (
	"time"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/loader"
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
	// Tiers describes each tier, fastest first.
	Tiers []TierStatus `json:"tiers"`
	// Fetch describes the downloader; nil standalone.
	Fetch *FetchStatus `json:"fetch,omitempty"`
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
}

// LoadersStatus sums the stats that loaders report through their plans
// (POST /v1/plans/{id}/stats).
type LoadersStatus struct {
	// Reporting counts the announced plans whose loaders report stats.
	Reporting int `json:"reporting"`
	// Totals sums what every loader delivered and waited since the daemon
	// started, dropped plans included; a loader that restarts under the
	// same plan id counts from zero again.
	Totals LoaderStats `json:"totals"`
}

// TierStatus describes one tier's usage and counters.
type TierStatus struct {
	Name string `json:"name"`
	Dir  string `json:"dir"`
	// Entries is the number of cached objects.
	Entries int64 `json:"entries"`
	// UsedBytes, MaxBytes, PinnedBytes, ReservedBytes, InUseBytes and
	// PendingBytes are byte counts in filesystem blocks (see tier.Stats).
	// PendingBytes is held by copies that left the cache while in use.
	UsedBytes     int64 `json:"used_bytes"`
	MaxBytes      int64 `json:"max_bytes"`
	PinnedBytes   int64 `json:"pinned_bytes"`
	ReservedBytes int64 `json:"reserved_bytes"`
	InUseBytes    int64 `json:"in_use_bytes"`
	PendingBytes  int64 `json:"pending_bytes"`
	// Hits counts opens this tier served; Misses opens it could not serve
	// (for disk: that had to fetch; for shm: served by disk or fetched).
	// HitRatio is Hits/(Hits+Misses), 0 before any open.
	Hits     int64   `json:"hits"`
	Misses   int64   `json:"misses"`
	HitRatio float64 `json:"hit_ratio"`
	// Fetched is the bytes downloaded into the tier (disk).
	Fetched int64 `json:"bytes_fetched"`
	// Evictions counts copies removed to make room or by evict (for shm:
	// demotions).
	Evictions int64 `json:"evictions"`
	// Promotions counts copies made into the tier from disk (shm only).
	Promotions int64 `json:"promotions,omitempty"`
}

// FetchStatus describes the downloader.
type FetchStatus struct {
	// Connections is the connection budget; ConnsInUse the slots in use;
	// WaitingSlices the slices queued for a slot; SmallConnsInUse the
	// small-object lane's slots in use.
	Connections     int   `json:"connections"`
	ConnsInUse      int   `json:"conns_in_use"`
	WaitingSlices   int   `json:"waiting_slices"`
	SmallConnsInUse int   `json:"small_conns_in_use"`
	SliceBytes      int64 `json:"slice_bytes"`
	// Objects and Failures count finished downloads; Bytes the bytes
	// written; Ranges the range reads opened.
	Objects  int64 `json:"objects"`
	Failures int64 `json:"failures"`
	Bytes    int64 `json:"bytes"`
	Ranges   int64 `json:"ranges"`
	// Retries counts retries by cause (fetch.RetryCause names).
	Retries     map[string]int64 `json:"retries"`
	CRCFailures int64            `json:"crc_failures"`
	Stalls      int64            `json:"stalls"`
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
	// Listed counts the objects listed so far (state listing).
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

// Object returns r as a fetch.Object.
func (r ObjectRef) Object() fetch.Object {
	return fetch.Object{Bucket: r.Bucket, Name: r.Name, Generation: r.Generation}
}

// RefOf returns o as an ObjectRef.
func RefOf(o fetch.Object) ObjectRef {
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

// LoaderStats is loader.Stats on the wire: the body of POST
// /v1/plans/{id}/stats, where the loader reading plan id reports its
// totals since it started. The daemon adds what grew since the plan's last
// report to its metrics.
type LoaderStats struct {
	// Batches and Samples count what the loader delivered; Bytes the size
	// of their arrays.
	Batches int64 `json:"batches"`
	Samples int64 `json:"samples"`
	Bytes   int64 `json:"bytes"`
	// WaitSeconds is the time the loader's consumer waited for batches
	// (stalled); the other four split it by what the batch waited for:
	// a fetch, a promotion to shm, the gather, or anything else.
	WaitSeconds    float64 `json:"wait_seconds"`
	FetchSeconds   float64 `json:"fetch_seconds"`
	PromoteSeconds float64 `json:"promote_seconds"`
	GatherSeconds  float64 `json:"gather_seconds"`
	OtherSeconds   float64 `json:"other_seconds"`
}

// LoaderStatsOf returns s on the wire.
func LoaderStatsOf(s loader.Stats) LoaderStats {
	return LoaderStats{Batches: s.Batches, Samples: s.Samples, Bytes: s.Bytes,
		WaitSeconds: s.Wait.Seconds(), FetchSeconds: s.WaitFetch.Seconds(),
		PromoteSeconds: s.WaitPromote.Seconds(), GatherSeconds: s.WaitGather.Seconds(),
		OtherSeconds: s.WaitOther.Seconds()}
}

// Plan describes an announced plan: the answer to POST /v1/plans, and GET
// /v1/plans and /v1/plans/{id}.
type Plan struct {
	ID       string    `json:"id"`
	Objects  int       `json:"objects"`
	Position int       `json:"position"`
	Created  time.Time `json:"created"`
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

// Attrs is fetch.Attrs on the wire.
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
func AttrsOf(a fetch.Attrs) Attrs {
	return Attrs{Bucket: a.Bucket, Name: a.Name, Generation: a.Generation, Size: a.Size,
		CRC32C: a.CRC32C, HasCRC32C: a.HasCRC32C, Updated: a.Updated}
}

// Fetch returns a as fetch.Attrs.
func (a Attrs) Fetch() fetch.Attrs {
	return fetch.Attrs{Object: fetch.Object{Bucket: a.Bucket, Name: a.Name, Generation: a.Generation},
		Size: a.Size, CRC32C: a.CRC32C, HasCRC32C: a.HasCRC32C, Updated: a.Updated}
}

// LeaseInfo is the answer to POST /v1/sessions/{sid}/leases: the lease's id
// within its session and the object's best local copy.
type LeaseInfo struct {
	ID   uint64 `json:"id"`
	Path string `json:"path"`
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
