// Package fleet is the membership of a fleet of cacheagent agents: the
// agents of one training cluster, which share one cache. It runs
// hashicorp/memberlist (gossip with SWIM failure detection) and keeps the
// placement table (package fleet/placement) over the live members, so
// every agent computes the same owner for each chunk of each object.
//
// # Usage
//
//	f, err := fleet.Start(ctx, cfg, fleet.Options{Weight: diskBudget, Version: v, Logger: log})
//	…
//	defer f.Close(ctx)                  // leaves gracefully
//	owners := f.Owners(key, 2)         // owner, then fallback, with PeerAddr
//	changes, cancel := f.Subscribe()   // react to joins, leaves, failures
//
// # Joining
//
// Config.Join lists members as host:port; a DNS name joins every address
// it resolves to (a Kubernetes headless Service), and the list may name
// this agent itself (a DaemonSet shares one config). Start does not wait:
// a loop joins in the background, retrying with backoff until another
// member answers, and again whenever every other member has gone. Joined
// tells when another member has been seen.
//
// # Security
//
// Config.KeyFile holds a shared secret (ParseKey). Two keys are derived
// from it with HKDF-SHA256 under distinct labels: memberlist's (AES-GCM
// encryption and authentication of every gossip packet and stream: an
// agent with another key is never admitted) and the peer data plane's
// (Fleet.Key). Without a key file Start fails with ErrNoKey unless
// Config.Insecure is set. A key file writable by group or others is
// refused (ErrKeyPermissions); one readable by others is accepted with a
// warning, since a Kubernetes Secret volume's default mode is 0644.
//
// # Members and states
//
// Each member advertises, in its memberlist metadata (JSON, at most 512
// bytes), its peer data plane address, its weight (its disk budget in
// bytes) and its agent version. A member is alive, suspect (this agent's
// probes of it failed; it keeps its place in the table until memberlist
// declares it dead, so a slow probe moves no ownership) or dead (out of
// the table; listed for DeadRetention). memberlist reports joins, metadata
// changes and departures as events, but tells neither a graceful leave
// from a failure nor suspicion: its node states are private. So a member
// that closes first announces in its metadata that it is leaving (the
// others take it out of their tables at once), then leaves, and the
// others drop it; a departure without that announcement is a failure. The
// fleet learns of a suspicion from memberlist's log line for it, and of
// its end from the next probe the member answers.
//
// # Concurrency
//
// A Fleet is safe for concurrent use. Table and Owners read an immutable
// view through an atomic pointer. memberlist calls the fleet's event
// handlers holding its node lock, so the lock order is memberlist's, then
// Fleet.mu, and nothing holding Fleet.mu calls into memberlist. The fleet
// owns one goroutine, the join loop, which Close stops and waits for;
// memberlist's own goroutines end with its Shutdown, in Close.
package fleet
