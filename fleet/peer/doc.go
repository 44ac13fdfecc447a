// Package peer is the data plane of a cacheagent fleet: the agents of one
// cluster read object bytes from each other's caches over authenticated
// HTTP range requests instead of each reading them from GCS.
//
// A [Server] (an http.Handler) serves exactly the requested bytes of
// exactly the requested generation from the local tier, filling a miss
// from GCS once however many peers ask (the tier's fills are single
// flight). A [Source] is an object.Source decorator: Stat and List always go
// to the wrapped origin (GCS), so the generation and the CRC32C an object
// is verified against are GCS's word, never a peer's; NewRangeReader asks
// the object's owners first and falls back to the origin. Every object
// assembled from peer bytes is verified against the origin's CRC32C by the
// fetch.Downloader before the tier publishes it, as every download is.
//
// # Ownership
//
// An object of at most one chunk (Config.ChunkSize, 8 MiB by default) is
// owned whole: its placement key is chunk 0 of the object at its
// generation ([ObjectKey]), and its owner serves it from its whole copy.
// A larger object is owned chunk by chunk (placement.Key with the chunk
// index), so one hot object spreads over every node's GCS link and uplink
// instead of one owner's. The tier stores whole objects, so a chunk's
// owner keeps the chunk as an object of its own: a chunk copy, cached
// under the object's name followed by NUL, "chunk " and the index (no GCS
// name holds a NUL, so these never meet a real object; listings leave
// them out, see [IsChunk]). The Source's Stat of a chunk copy returns the
// chunk's length from the origin's attributes of the object (remembered
// per generation) and no CRC32C: GCS has none for a range (the tier
// records the CRC32C of the chunk as filled, which its scrub checks), and
// the readers check the object they assemble whole against GCS's.
//
// A node filling a whole copy of a chunked object (a fetch.Downloader
// slice never spans chunks: the daemon sets SliceSize to the chunk size)
// reads each chunk from the chunk's owners, and the chunks it owns from
// its own chunk copies, filled from GCS on a miss; a node with no other
// member reads GCS directly (a chunk copy would serve no one). A whole
// copy of a chunked object is held for the node's own readers and is
// evicted before owned copies ([Source.Keeps]); what the fleet keeps are
// the owners' chunk copies. An owner's own chunks are thus on its disk
// twice while it also holds the whole copy: the price of a tier that
// stores whole objects.
//
// # Protocol
//
//	GET /v1/peer/object?b=BUCKET&o=NAME&gen=GENERATION&off=OFFSET&n=LENGTH
//
// A 200 answer carries exactly n bytes (Content-Length: n) of generation
// gen starting at off, with the generation echoed in the
// Cacheagent-Generation header. A miss is filled before the answer; while
// the fill runs, the server sends a 102 Processing informational response
// every [ServerConfig].Heartbeat, so the requester can tell a busy owner
// from a stalled one. Other answers: 400 for malformed parameters (names
// with NUL or other control characters, "." or ".." segments, names over
// 1024 bytes, a zero generation, ranges past 2^40), 401 for a missing or
// bad MAC, 403 for a bucket not in the server's allowed list (the daemon's
// sources), 404 for a generation the server cannot get (never another
// generation instead), 409 when the server is itself forwarding that
// object to a peer (see Loops), 416 for a range past the end of the
// object, 503 while the replay cache is full, when a fill would have to wait for
// space (the server's fills never do: that space may be held by readers
// waiting on the requester) or has taken [ServerConfig].MaxWait (30 s), 502 for any other failure
// to fill.
//
// A chunk request ("chunk=I", the range within chunk I of the object) is
// answered from a whole copy the server holds, else from its chunk copy,
// filled from GCS unless cached=1; it is never answered by filling the
// whole object, and a chunk's fill never waits on a peer, so chunk
// requests need no loop check (see Loops).
//
// There is no per-response CRC32C: computing it means reading the bytes
// before sending them, which gives up sendfile, and it would be the peer's
// word about its own bytes. The requester checks the whole object against
// GCS's CRC32C instead.
//
// # Batches
//
//	GET /v1/peer/batch?b=BUCKET&o=NAME&g=GENERATION&o=NAME&g=GENERATION…
//
// A small object costs a peer request its own round trip; a node reading
// a dataset of millions of them from its owners would pay one per object.
// So whole objects of at most [Config].BatchBelow bytes (1 MiB) read from
// the same owner travel in batches, adaptively: at most
// [Config].BatchInflight (4) batch requests are in flight to a peer; a read
// that finds a free slot sends at once with whatever reads wait (idle, a
// read waits for nothing), and reads arriving while every slot is busy wait
// together for the next, up to [Config].BatchMax ([MaxBatch], 64) to a
// request. The objects are in the query, which the MAC covers (at most
// 96 KiB). The server answers 200 at once and then one frame per object as
// its open ends (misses filled 16 at once): a status byte (0 the bytes
// follow, 1 not found, 2 busy, 3 loop, 4 failed, 5 a keepalive sent every
// Heartbeat while nothing is ready), the object's index in the request
// (big-endian uint16), its generation and its length (big-endian uint64
// each), then its bytes; objects still filling after MaxWait are answered
// busy. Each keepalive calls fetch.Alive for every read still waiting, as
// a 102 does. A batch lasts at most [Config].BatchTimeout (1 min), however
// many keepalives come. A frame that is not what was asked (an index out of range or
// twice, another generation or length) fails the rest of the batch, and
// the peer is cooled down; an object answered otherwise than 0 goes on as
// a single read would (the next candidate, or GCS). Each object is still checked whole against GCS's
// CRC32C by the reader's fetch.Downloader, so one corrupt member of a
// batch is read again from GCS and the others stand.
//
// # Authentication
//
// Every request carries three headers: Cacheagent-Time (Unix time in
// milliseconds), Cacheagent-Nonce (16 random bytes, hex) and Cacheagent-Mac,
// the hex HMAC-SHA256, keyed with the fleet's shared key (at least 16
// bytes), of
//
//	"cacheagent-peer-v1\n" + method + "\n" + request URI (path and query, as sent) + "\n" + time + "\n" + nonce
//
// The server recomputes the MAC and compares it in constant time, rejects
// a time more than [ServerConfig].MaxSkew away from its own clock, and
// remembers each accepted nonce for twice that window, rejecting a second
// use: a captured request cannot be replayed. Only requests with a valid
// MAC reach the nonce cache, so strangers cannot fill it. The key keeps
// nodes without it from reading cached objects (the peer port is not a way
// around GCS IAM), and the bucket list keeps any node from reading buckets
// outside the configured sources.
//
// # TLS
//
// The MAC authenticates requests, not answers: without more, an attacker
// able to rewrite TCP streams between agents could read what peers serve
// and send forged bytes whose CRC32C matches (CRC32C is not a MAC). [NewTLS]
// closes that with mutual TLS 1.3 keyed from the same key: every member
// derives one Ed25519 CA key from it (HKDF) and presents a fresh leaf
// certificate that CA signed, as server and as client; each side verifies
// the other's against the derived CA, for the name [TLSServerName]. Only a
// holder of the key can complete a handshake, and the bytes are encrypted
// and authenticated. The daemon turns it on whenever the fleet has a key
// (fleet.peer_tls, default true). TLS gives up sendfile on the server;
// requests stay signed under it. A failed handshake counts as CauseAuth.
//
// # Fallback
//
// For a range read the Source asks [Owners] for the object's candidates,
// best first, and tries up to [Config].MaxPeers of them, stopping at this
// node itself (its own fill is the one origin read). A candidate that
// refuses the connection, sends no response within the first-byte
// timeout, stalls mid-body for [Config].StallTimeout, or answers anything
// but the exact range of the exact generation is skipped for the next,
// then the origin. Only the first candidate (the owner) fills a miss; the
// ones after it are asked for a copy they hold already ("cached=1", a 404
// otherwise), so a requester whose owner failed reads the origin itself
// instead of waiting on another node's whole-object download (which cost
// the SIGKILL benchmark its 4-6 s stalls). A node about to fill a miss
// from the origin (an object it owns, or a peer's miss) first asks the
// best-ranked other member for a copy it holds, so a node that has just
// become an owner (a join, a departure) reads what it misses from the
// previous owner instead of GCS. The first-byte timeout is max(FirstByteFloor,
// FirstByteFactor x estimate) capped at FirstByteMax, where the estimate
// is the 99th percentile of the last 64 gaps between request, heartbeats
// and response seen from that peer. A peer that refused, timed out or
// misbehaved is skipped without a request for [Config].CoolDown, so a dead
// owner costs one timeout per requester, not one per range, until
// membership drops it. A 404 goes straight to the origin, which has the
// last word on a generation. A reader that fails mid-body returns an error
// wrapping io.ErrUnexpectedEOF, which the fetch.Downloader retries from
// the last byte it wrote, asking the Source again.
//
// Fallbacks to the origin (after a peer was tried or skipped) take a token
// from a bucket of FallbackRate per second; when it is empty, the read
// waits for a token (bounded by its context) rather than going to GCS
// anyway. The bucket exists for the moment many owners fail at once and
// every node turns to GCS together; a limit that yields exactly then would
// be no limit, and GCS's own answer to that herd is 429s and backoff,
// which cost every reader more than a short local wait. Reads that are the
// owner's own (this node owns the object, a peer's miss being filled, a
// checksum re-read) are never limited: they are the one origin read per
// object the fleet means to make.
//
// # Loops
//
// A fill the Server starts for a peer runs on a context marked with
// [WithNoForward]; the Source sends such reads to the origin, so two nodes
// that disagree about the owner during churn never forward a peer's miss
// back and forth. A peer's request may still join a fill this node started
// for its own readers, which may be waiting on a peer in turn; if that
// peer's fill waits on this node, the two would wait on each other. So a
// Server whose node is forwarding the same object (a Downloader's fill of
// it that reads from peers is running, or its Source has a peer request
// for it in flight) answers 409 at once: every node marks its forward
// before sending it, so in any cycle of fills the node that checks last
// sees its own mark, and the cycle breaks. Cached-only and chunk requests
// join no such fill and are answered as usual.
//
// # Connection budgets
//
// A node's tier fills through a [Downloader], which splits its fills over
// two fetch.Downloaders with connection budgets of their own: fills that
// read the origin (for peers, and of objects this node owns) and fills
// that read from peers. With one budget, a fleet under load deadlocks:
// every connection of A waits on a fill of B that waits for a connection
// of B, each held by a read waiting on a fill of A. Only a pair of
// disagreeing owners can still wait on each other through the budget for
// peer reads, and only until the fetch.Downloader's stall timeout.
//
// # Corrupt peers
//
// A mismatch of the assembled object's CRC32C makes the Downloader read
// it again, on a context marked fetch.Reread: the Source sends those
// reads to the origin, so a peer that keeps serving bad bytes costs one
// extra read of the object and never fails it.
//
// # Concurrency
//
// Server and Source are safe for concurrent use. A read handed one of its
// peer's batch slots starts the batch on a goroutine of the Source, which
// hands the slot on when the batch ends; every read it carries, the
// sender's too, waits for its frame or its own context. Source.Close ends
// the batches in flight, waits for their goroutines and closes idle
// connections. A Source's readers belong to their callers and must be
// closed. The Server starts one goroutine per request (the cache Open it
// waits on, sending heartbeats meanwhile) and waits for it before
// returning. Each write of an answer (a heartbeat, a frame, a piece of at
// most 1 MiB) must end within [ServerConfig].WriteStall (30 s): a
// requester that stops reading loses its connection, and the cached copy
// it held open is let go. A cached file that ends short cuts the answer.
//
// # Waiting on an owner's fill
//
// Each heartbeat (and each batch keepalive) also calls fetch.Alive, so
// the requester's fetch.Downloader does not take a long fill for a stall.
// The wait is still bounded: the owner's own Downloader aborts a fill
// that stalls, and the requester then gets a 502 and goes to the next
// candidate or GCS.
// While the owner fills an object (or a chunk) its requesters get no
// bytes; with chunks, that wait is one chunk's.
package peer
