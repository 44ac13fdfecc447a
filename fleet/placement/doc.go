// Package placement decides which agent of a fleet owns each chunk of a
// cached object, and models what that placement costs (GCS egress, load
// balance, movement on churn, hot spots) before any network code exists.
//
// It is pure: no I/O, no clocks, no goroutines, and every result depends only
// on its inputs, so every agent of a cluster computes the same owners from the
// same member set.
//
// # Keys and chunks
//
// The unit of placement is a chunk: a fixed-size byte range of one object at
// one generation, named by a [Key] (bucket, object, generation, chunk index).
// Whole objects would put a hot shard on one owner: when every node reads the
// same 1 GiB shard at once (the loader's shared window does exactly that), one
// NIC would upload N-1 copies while the others idle. Chunks stripe the shard
// over many owners, so its readers pull from many NICs at once. The goal this
// serves: one 1 GiB object read by all N nodes at once completes within 1.5x
// its size over the per-node peer rate, and the busiest owner serves at most
// 1.5x the mean bytes. [DefaultChunkSize] is 8 MiB: large enough that a range
// request amortises its first-byte latency and per-chunk bookkeeping stays
// small (a 1 TiB dataset is 131,072 keys), small enough that a 1 GiB object
// spreads over 128 owners. Random striping meets the hot-spot goal only while
// each node owns many of the object's chunks: [SimulateHotSpot] puts 8 MiB
// chunks within it up to about N = 8, and none of 1, 4 or 8 MiB within it at
// N = 64 and beyond (docs/fleet-simulation.md), where owners alone cannot serve one
// object to every node fast enough.
//
// # Ownership
//
// A [Table] ranks members for a key by weighted rendezvous (highest random
// weight, HRW) hashing. Each member i draws u_i in (0, 1) from a hash of the
// key and its name and scores -w_i / ln(u_i); the highest score owns the key.
// Member i then owns a key with probability w_i / sum(w), where the weight is
// the member's disk budget, and a join or leave moves only the keys the
// newcomer wins or the leaver held. The full ranking ([Table.Owners]) gives
// the fallbacks: when the owner refuses or leaves, the next member in the
// ranking is the owner of the table without it.
//
// # Determinism
//
// Owners must agree across processes, architectures and Go versions. Keys are
// hashed with xxhash64 over a length-prefixed encoding, members by xxhash64 of
// their name (once, when the table is built), and the two are combined with a
// fixed 64-bit mixer. The logarithm is this package's own, built from basic
// IEEE operations with explicit float64 conversions: math.Log is assembly on
// amd64 and Go elsewhere, and the compiler may fuse multiply-adds on some
// architectures, so math.Log may differ in the last bit between nodes.
//
// # Concurrency
//
// A [Table] is immutable after [New]; all of its methods are safe for
// concurrent use. Membership changes build a new table.
package placement
