// Package control is the cacheagent daemon's control API: its wire types
// and a Go client. The daemon (package daemon) serves HTTP/1.1 with JSON
// bodies on a Unix socket (DefaultSocket, mode 0660); there is no TCP
// listener, so access is the socket file's permission.
//
// # Usage
//
//	c, err := control.Dial(ctx, control.DefaultSocket)
//	…
//	defer c.Close()
//	l, err := c.Acquire(ctx, object.Object{Bucket: "b", Name: "train/x-0001.npy"})
//	…
//	defer l.Close()
//	// map or read l.Size() bytes at l.Offset() of l.Path(); l.Stale() turns true when the daemon moves on
//
// *Client is an mmapstore.Opener (its Files are *Lease), so a Store over it maps the daemon's
// copies: every job and rank on a machine shares one cache, one download
// per object and one budget. It also implements the loader's Planner (Plan,
// AdvancePlan, DropPlan), StatsReporter (ReportStats) and Stager (Fetch,
// Promote), so a loader in any process drives the daemon's clairvoyant
// cache, and its stall times show in the daemon's metrics.
//
//	s := mmapstore.New(c, mmapstore.Config{})
//
// # Routes
//
//	GET    /v1/ping                           Info
//	GET    /v1/status                         Status
//	POST   /v1/prefetch                       PrefetchRequest → 202 Job
//	GET    /v1/jobs                           []Job, oldest first
//	GET    /v1/jobs/{id}[?watch=1]            Job; with watch, NDJSON Jobs until a final state
//	DELETE /v1/jobs/{id}                      cancel → 204 (no new downloads; those in flight finish)
//	POST   /v1/pin                            PrefixRequest → CountResult (caches first)
//	POST   /v1/unpin                          PrefixRequest → CountResult
//	POST   /v1/evict                          PrefixRequest → EvictResult
//	POST   /v1/verify                         VerifyRequest → NDJSON VerifyReports, the last with done (synchronous: closing the request stops it)
//	GET    /v1/objects?bucket=&prefix=        ListResult
//	GET    /v1/object?bucket=&name=[&generation=][&revalidate=]   the bytes (Range supported)
//	POST   /v1/plans                          PlanRequest → Plan (announce, replacing by id)
//	POST   /v1/plans/{id}/advance             AdvanceRequest → 204
//	POST   /v1/plans/{id}/stats               stats.Loader (the plan's loader's totals) → 204
//	GET    /v1/plans                          []Plan
//	GET    /v1/plans/{id}                     Plan (with its loader's last stats report)
//	DELETE /v1/plans/{id}                     → 204
//	POST   /v1/fetch                          ObjectsRequest → 204 once all are cached (demand priority)
//	POST   /v1/promote                        ObjectsRequest → PromoteResult
//	POST   /v1/sessions                       NDJSON SessionEvents while the session lasts
//	POST   /v1/sessions/{sid}/leases          ObjectRef → LeaseInfo
//	DELETE /v1/sessions/{sid}/leases/{id}     → 204
//	POST   /v1/loaders                        spec.Spec → NDJSON: LoaderSession, then LoaderEvent at the end
//	GET    /v1/fleet                          FleetStatus (ErrNoFleet without fleet mode)
//	POST   /v1/checkpoints/staging            CheckpointDir: a fresh directory given to the caller
//	DELETE /v1/checkpoints/staging?dir=       → 204: remove one (an abandoned save, a restore read)
//	POST   /v1/checkpoints                    CheckpointSave → stats.Checkpoint once durable at its wait
//	POST   /v1/checkpoints/wait               CheckpointWait → stats.Checkpoint
//	GET    /v1/checkpoints[?uri=]             Checkpoints: this agent's saves, newest first
//	GET    /v1/checkpoints/list?uri=          Checkpoints: the committed checkpoints of a run, newest first
//	POST   /v1/checkpoints/restore            CheckpointRestore → stats.Restore
//
// Errors are ErrorBody with a code (Code* constants); the client returns
// them as *Error, which matches the sentinel of its code with errors.Is.
//
// # Leases
//
// A lease session is one streaming request that the client keeps open on
// its own connection. Its first line names the session; later lines list
// leases whose copies went stale (replaced, evicted or moved). The daemon
// holds each lease's copy open until the client releases it or the
// session's connection closes, which happens when the client process exits
// for any reason, SIGKILL included: a crashed trainer leaves nothing held.
// If the daemon restarts, the session ends, and the client marks every
// lease of it stale and opens a new session on the next Acquire.
//
// Lease paths are files the daemon owns: clients need read permission on
// the cache directory.
//
// # Loader sessions
//
// POST /v1/loaders runs a Go loader in the daemon for the client: the
// daemon gathers its batches into a shared-memory ring (a sealed memfd)
// and passes the ring's descriptor, once, over the data socket
// (LoaderSession.DataSocket: the control socket's path + ".data",
// SOCK_SEQPACKET, mode 0660) to the client that says Hello with the
// session's token. Batches are then announced (Ready) and given back
// (Release) on the data socket; package loader/ring documents the slot
// layout and the messages with their Python struct formats. The stream's
// first line is LoaderSession; a last LoaderEvent says why the session
// ended. Closing either the stream or the data connection (a crash
// included) ends the session: the loader stops, its plan is dropped, its
// leases released and the ring freed. Client.OpenLoader opens a session
// from Go (a LoaderConn).
//
// # Concurrency
//
// A Client and its Leases are safe for concurrent use. Client.mu guards
// the current session; openMu serialises opening one (held during that
// request, taken before mu); session.mu guards a session's leases. One
// goroutine per session reads its stream; Close waits for it.
package control
