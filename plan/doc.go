// Package plan is the clairvoyant cache policy: it knows the future because
// loaders announce it. A loader announces the order in which it will read
// objects (a plan); the cache asks this package which object is needed
// next, which resident object to give up, and how far ahead of the reader
// to fetch. The package is pure: no I/O, no clock, no goroutines, no
// dependence on the cache's types (keys are any comparable type), so every
// decision can be tested exactly and replayed in simulation.
//
// # Next use
//
// An Index holds the announced plans, each a sequence of keys with a cursor
// (the position of the next key its reader will use). The next use of a key
// is the smallest distance, over all plans, from a plan's cursor to the
// key's next occurrence at or after it; a key no plan will use again has no
// next use (Never). Distances are counted in plan positions: plans that
// advance at different speeds are not weighted by their rates.
//
// # Eviction
//
// Order ranks eviction candidates Belady's way: first the keys no plan will
// use again, least recently used first (the LRU fallback for unplanned
// entries, and how a shard's copy goes first after its last use in an
// epoch), then the planned keys, farthest next use first. Victims takes the
// shortest prefix of that order that frees the space asked for, optionally
// only among keys needed later than the object being brought in (so a
// prefetch never displaces something needed sooner). Select picks the same
// victims without sorting every candidate, for use under a cache's lock.
// The caller passes only candidates it may evict: leased, open and pinned
// entries are never candidates. With unit sizes and a single plan, evicting by Order is
// optimal (Belady's MIN): Simulate and its tests check that against brute
// force.
//
// # Lookahead
//
// Meter measures a rate (bytes per second) from timestamped samples the
// caller supplies, and Lookahead turns the fetch rate and the consumption
// rate into how many bytes ahead of the reader the cache should hold.
//
// # Concurrency
//
// Nothing in this package is safe for concurrent use; the cache guards its
// Index and Meters with its own lock.
package plan
