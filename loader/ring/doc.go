// Package ring is the shared-memory transport of loader sessions: the
// daemon runs a Go loader for a client process and gathers its batches
// straight into a ring of batch slots that the client maps, so that a
// batch crosses the process boundary with no copy and only a 40-byte
// message per batch.
//
// The package holds the slot layout (encoder and decoder), the ring (one
// memfd), the data-socket messages and a Go client. The daemon's side
// (package daemon) serves POST /v1/loaders and the data socket.
//
// # The ring
//
// The ring is one anonymous memory file (memfd_create with
// MFD_CLOEXEC|MFD_ALLOW_SEALING) of Slots × SlotBytes bytes, sized once
// and sealed with F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL, so a mapping of
// it can never fault past a truncation. It has no name in any file system:
// not bound by a container's /dev/shm size, nothing to leak, freed when
// the last descriptor and mapping go. The daemon maps it read-write and
// shared; the client receives the descriptor once (SCM_RIGHTS) and maps it
// read-write too (torch.from_numpy refuses read-only arrays), but writes
// nothing: a slot's contents are the daemon's until it hands the slot out.
//
// # Slot layout
//
// Slot i starts at i × SlotBytes (a multiple of 4096). All fields are
// little-endian.
//
//	header, 64 bytes, Python struct "<IHHQqqIIQ16x" (HeaderStruct)
//	off size field
//	  0   4  magic 0x31475243 ("CRG1")
//	  4   2  layout version (1)
//	  6   2  number of arrays
//	  8   8  sequence number of the batch in the session (0, 1, …)
//	 16   8  epoch
//	 24   8  batch index in the epoch
//	 32   4  number of samples (≤ batch size)
//	 36   4  state: 0 empty, 1 filling (the daemon's), 2 ready (the client's)
//	 40   8  slot bytes
//	 48  16  reserved (0)
//
//	array descriptor i at 64 + 96·i, 96 bytes, "<HBx12s8qQQ" (DescStruct)
//	  0   2  name index (into the first line's arrays)
//	  2   1  ndim (1..8)
//	  3   1  reserved
//	  4  12  dtype: numpy type string, NUL-padded ("<f4", "|u1", "<i8")
//	 16  64  shape: 8 × int64, the first ndim used: [samples, row shape...]
//	 80   8  payload offset from the slot's start (a multiple of 4096)
//	 88   8  payload bytes (= prod(shape) × item size)
//
// Payloads follow the descriptors, each 4096-aligned with room for a full
// batch; the offsets are fixed for the session. A variable-length array
// (ArraySpec.Bytes > 0: a WebDataset field's offsets or data) has room for
// Bytes bytes and its descriptor's shape is the batch's own ([n+1] offsets,
// [total bytes] data) rather than [samples, row shape...]. The samples' ids
// are the last array, "ids", int64. In Python a batch is
//
//	np.ndarray(shape, dtype, buffer=ring, offset=slot*slot_bytes+offset)
//
// with no copy.
//
// # Protocol
//
// The client opens a session with POST /v1/loaders on the control socket
// (loader/spec.Spec). The answer is a stream (NDJSON) that stays open
// for the session's life; its first line (control.LoaderSession) is
//
//	{"protocol":1, "session":"…", "token":"…", "data_socket":"…/cacheagent.sock.data",
//	 "ring_bytes":N, "slot_bytes":M, "slots":K, "batch_size":B,
//	 "arrays":[{"name":"x","dtype":"|u1","row_shape":[1024]}, …, {"name":"ids","dtype":"<i8","row_shape":[]}],
//	 "format":"npy", "batches_per_epoch":E, "start":{"epoch":0,"batch":0,"fingerprint":F}}
//
// and a last line {"ended":"why"} may follow when the session ends while
// the stream is still open. The client then connects to data_socket
// (AF_UNIX, SOCK_SEQPACKET: one message per packet), sends Hello with the
// session and token, and receives Welcome with the ring's memfd in its
// ancillary data (Python: socket.recv_fds(sock, 4096, 1)). Messages are
// fixed little-endian structs whose first uint32 is the type:
//
//	client → daemon
//	Hello      1  "<II32s32s"  type, protocol (1), session, token (ASCII, NUL-padded)
//	Release    2  "<IIQ"       type, slot, seq (from its Ready)
//	State      3  "<I4x"       type: asks for StateIs
//	Seek       4  "<I4xqq"     type, epoch, batch: restart there (set_epoch: batch 0)
//	daemon → client
//	Welcome  101  "<IIQQII"    type, protocol, ring_bytes, slot_bytes, slots, arrays; + SCM_RIGHTS memfd
//	Ready    102  "<IIQqqII"   type, slot, seq, epoch, index, samples, 0
//	EpochEnd 103  "<I4xqq"     type, epoch, batches (after the epoch's last Ready)
//	End      104  "<I4xqq"     type, epoch, batch: the last epoch is done (the state after it)
//	StateIs  105  "<I4xqqQ"    type, epoch, batch, fingerprint (answers State and Seek)
//	Error    106  "<II"+text   type, code, UTF-8 text (to the end of the packet)
//
// The daemon sends a Ready for each batch, in order, as soon as it is
// gathered into a free slot; the slot is the client's until it sends
// Release{slot, seq}, and the loader regathers it only then. At most
// slots batches are out: the ring's slots are the loader's prefetch
// buffers. StateIs is the loader.State to resume from: the earliest
// batch the client still holds, or the one after the last handed out —
// with in-order releases, the batch after the last one released. Pass it
// as the next session's "resume" to continue with exactly the batches
// that would have followed. Seek stops the current sequence at once: the
// client releases every slot it holds and every Ready it still receives
// (sent before the Seek arrived); once all are back, the daemon restarts
// at the Seek's position with a new loader over the same ring and answers
// StateIs, and the Readys after it are the new sequence. An out-of-range
// Seek is refused (Error code 3) and changes nothing.
//
// Error codes: 1 protocol (a malformed or unexpected message, a release of
// a slot the client does not hold: the session ends), 2 loader (a shard
// could not be read: no more batches), 3 refused (the session goes on), 4
// internal (the session ends).
//
// The session ends when the client closes its data connection or its
// control stream (a crash or SIGKILL closes both): the daemon stops and
// closes the loader, drops its plan, releases its shard leases, unmaps
// and closes the ring. The memory lives on while the client maps it.
//
// # Concurrency
//
// Ring, Mapping and Layout are immutable but for Close and Unmap. A Conn
// (and a Client) may send in one goroutine while receiving in another;
// Recv must not be called concurrently with itself.
package ring
