"""Loader: the daemon's Go loader, its batches read from a shared ring.

A :class:`Loader` opens a *loader session* on the daemon
(``POST /v1/loaders``): the daemon runs the Go loader for this process and
gathers each batch straight into a ring of batch slots, an anonymous memory
file (memfd) that the client maps once. A batch crosses the process
boundary with no copy: its arrays are numpy views of the ring. The protocol
is described in the Go package ``loader/ring`` (``doc.go``).

Views are valid only while the batch's slot is held. The loader releases a
batch's slot once the iterator has moved ``keep`` batches further (with the
default ``keep=1``: at the next ``next()``), at the end of each epoch, on
:meth:`Batch.release`, on a seek (:meth:`Loader.set_epoch` to an epoch the
stream is not at) and on :meth:`Loader.close`. After that the daemon
regathers the slot and the arrays' contents change under the view. Call
:meth:`Batch.copy` for arrays that the batch owns, or copy what you keep
(``torch.from_numpy(batch["x"])`` shares the ring too; a ``.to("cuda")``
copies it).

The ring is a memfd: it needs no room in ``/dev/shm`` (a container's 64 MiB
one is enough) and it is freed when the session ends and the last view is
gone. The session ends when the loader is closed or the process dies (even
by SIGKILL; forked children, such as DataLoader workers, do not hold it):
the daemon stops the loader and frees everything.
"""

from __future__ import annotations

import collections
import http.client
import json
import mmap
import os
import socket as _socket
import struct
import time
import weakref
from typing import Any, Deque, Dict, Iterator, List, Optional, Tuple

from . import errors
from .client import DEFAULT_SOCKET, Client
from .errors import (ClientClosed, DaemonTimeout, DaemonUnavailable, InternalError, InvalidRequest, ProtocolError,
                     SessionEnded)

# The protocol's names (also used by bench/pyloader.py).
from ._ring import (  # noqa: F401
    PROTOCOL, MAGIC, _MAX_MESSAGE, T_HELLO, T_RELEASE, T_STATE, T_SEEK, T_WELCOME, T_READY, T_EPOCH_END, T_END,
    T_STATE_IS, T_ERROR, _HELLO, _RELEASE, _STATE, _SEEK, _WELCOME, _READY, _EPOCH_END, _END, _STATE_IS, _ERROR,
    _TYPE, _HEADER, _DESC, _DESC_OFF, STATE_READY, CODE_PROTOCOL, CODE_LOADER, CODE_REFUSED, CODE_INTERNAL,
    _ring_error,
)
from ._request import _default_rank_world, session_request
from .batch import Batch

__all__ = ["Loader", "Batch"]

_loaders: "weakref.WeakSet[Loader]" = weakref.WeakSet()

# The control streams of sessions inherited through fork, kept so that no
# finaliser touches them in the child (see Loader._after_fork).
_forked_away: List[Any] = []


def _after_fork_in_child() -> None:
    for ld in list(_loaders):
        ld._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Loader:
    """Batches of a dataset, gathered by the daemon's Go loader into a
    shared ring and read here with no copy.

    Args:
        data: the dataset's prefix, ``gs://BUCKET/PREFIX`` (with ``pattern``),
            or ``None`` with ``manifest``.
        pattern: shard file pattern under ``data`` (``"shard-*.{x,y}.npy"``:
            ``*`` names the shard, ``{x,y}`` the arrays).
        manifest: a manifest (a dict, its JSON text or a file's path) instead
            of ``data`` and ``pattern`` (see the Go ``loader.ParseManifest``).
        batch_size: samples per batch.
        shuffle: ``"shard-window"`` (the default), ``"global"``,
            ``"sequential"`` or ``"node"`` (rank-aware: the shards are
            partitioned across the nodes once, and each node's ranks read
            only their node's part, reshuffled every epoch, so each node's
            cache holds only its share); ``window`` the shard-window's
            window (0: the default).
        ranks_per_node, nodes, node: place the rank for ``shuffle="node"``.
            ``ranks_per_node`` defaults to the LOCAL_WORLD_SIZE environment
            variable (torchrun sets it), else every rank is on one node;
            ``nodes`` to ``world_size // ranks_per_node``; ``node`` to
            ``rank // (world_size // nodes)`` (torchrun's numbering).
        seed, epoch, epochs: the shuffle seed, the first epoch and how many
            the daemon runs without a restart (set_epoch past them restarts
            it).
        rank, world_size: default to torch.distributed's when it is
            initialised (torch is not imported for that), else to the RANK
            and WORLD_SIZE environment variables, else 0 and 1.
        drop_last: drop each epoch's last batch if it is not full.
        wrap: pad the epoch across ranks with repeats (the default, as
            ``cacheagent loader ids``); ``False`` drops the tail instead.
        prefetch: ring slots (batches held here, ready, or being gathered;
            0: the daemon's default of 4).
        workers: the daemon's gathering goroutines (0: its default).
        format: the shards' format: ``"npy"``, ``"safetensors"`` (a
            file per shard, its tensors the arrays), ``"tokens"`` (raw
            token files such as nanoGPT's train.bin, or llm.c shards),
            ``"megatron"`` (a ``{bin,idx}`` pattern) or ``"webdataset"``
            (tar shards); ``None`` guesses as ``cacheagent loader`` does
            (megatron for ``{bin,idx}``, webdataset for ``*.tar``,
            safetensors for ``*.safetensors``, tokens with ``seq_len`` or
            ``token_dtype``, else npy).
        seq_len: a token dataset's window length L: sample k is tokens
            [k·L, k·L+L+1) of the shards' concatenated stream, and a batch's
            ``"tokens"`` array has shape (batch, L+1).
        token_dtype: raw token files' type (``"uint16"``, ``"int32"``…;
            llm.c shards and Megatron indexes carry theirs).
        token_out_dtype: the ``"tokens"`` array's type: ``None`` for the
            tokens' own, ``"int64"`` (or ``"int32"``) to have the daemon widen
            them as it gathers, so that ``torch.from_numpy(batch["tokens"])``
            is an index tensor with no copy here (torch 1.13 has no uint16).
        field_bytes: bounds each WebDataset field's bytes per batch (the
            field's data array in the ring); 0: ``batch_size`` × the field's
            largest member. A batch that does not fit ends the session.
        keep: how many yielded batches stay valid (1..prefetch): a batch is
            released when the iterator has moved ``keep`` batches further.
        resume_held: the default of :meth:`state_dict`'s ``resume_held``:
            ``False`` (the default) counts every batch the iterator yielded
            as consumed, as torchdata's StatefulDataLoader does; ``True``
            resumes with the batches still held (the one in hand repeats).
        socket: the daemon's control socket.
        timeout: seconds any wait for the daemon may last (a batch included).

    Iterating yields the batches of one epoch (:class:`Batch`); the next
    iteration goes on with the next epoch, or ``set_epoch(e)`` picks one.
    An iteration broken off and started again restarts its epoch; the first
    one after :meth:`load_state_dict` starts at the saved batch. A new
    iteration ends the one before. :meth:`state_dict` is the position after
    the last batch yielded: a checkpoint taken in the loop body resumes with
    the batch after the one in hand. Use it as a context manager or call
    :meth:`close`. A Loader is for one thread and is not inherited by forked
    children (open one per process): a child's copy is closed at the fork,
    without touching the parent's session, so the session ends when the
    parent closes the loader or dies, whatever children it has.
    """

    def __init__(self, data: Optional[str] = None, *, pattern: Optional[str] = None, manifest: Any = None,
                 batch_size: int, shuffle: Optional[str] = None, window: int = 0, seed: int = 0, epoch: int = 0,
                 epochs: int = 1, rank: Optional[int] = None, world_size: Optional[int] = None,
                 ranks_per_node: Optional[int] = None, nodes: int = 0, node: Optional[int] = None,
                 drop_last: bool = False, wrap: bool = True, prefetch: int = 0, workers: int = 0,
                 format: Optional[str] = None, seq_len: int = 0, token_dtype: Optional[str] = None,
                 token_out_dtype: Optional[str] = None, field_bytes: int = 0, keep: int = 1,
                 resume_held: bool = False, socket: str = DEFAULT_SOCKET, timeout: float = 600.0) -> None:
        self._sock: Optional[_socket.socket] = None
        self._conn: Optional[http.client.HTTPConnection] = None
        self._resp: Optional[http.client.HTTPResponse] = None
        self._mm: Optional[mmap.mmap] = None
        self._closed = False
        self._pid = os.getpid()
        self._iter_gen = 0  # bumped by each iteration and session end: older iterators stop
        import numpy as np  # needed for the views

        self._np = np
        if rank is None or world_size is None:
            r, w = _default_rank_world()
            rank = r if rank is None else rank
            world_size = w if world_size is None else world_size
        req = session_request(data, pattern, manifest, batch_size,
                              {"shuffle": shuffle, "format": format, "token_dtype": token_dtype,
                               "token_out_dtype": token_out_dtype},
                              {"window": window, "seed": seed, "epoch": epoch, "epochs": epochs, "rank": rank,
                               "world": world_size, "prefetch": prefetch, "workers": workers, "seq_len": seq_len,
                               "field_bytes": field_bytes}, drop_last, wrap)
        if shuffle == "node":
            if ranks_per_node is None:
                ranks_per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0)
            if ranks_per_node:
                req["ranks_per_node"] = int(ranks_per_node)
            if nodes:
                req["nodes"] = int(nodes)
            if node is not None:
                req["node"] = int(node)
        self._req = req
        self.rank, self.world_size = int(rank), int(world_size)
        self.keep = int(keep)
        self.resume_held = bool(resume_held)
        self.timeout = float(timeout)
        self._client = Client(socket, timeout=min(self.timeout, 30.0))
        self._handoff_ns = 0  # time spent from a Ready received to its views built
        self._wait_ns = 0  # time blocked waiting for a Ready
        self._release_ns = 0  # time spent sending Releases
        self._batches = 0
        self._seeks = 0
        _loaders.add(self)
        try:
            self._open(None)
            if not 1 <= self.keep <= self.slots:
                raise InvalidRequest(f"cacheagent loader: keep {self.keep} is not in 1..{self.slots} "
                                     "(the ring's slots)", code="invalid")
        except BaseException:
            self.close()
            raise

    # ----- the session

    def _open(self, resume: Optional[Dict[str, Any]]) -> None:
        req = dict(self._req)
        if resume is not None:
            req["resume"] = {"epoch": int(resume["epoch"]), "batch": int(resume["batch"]),
                             "fingerprint": int(resume.get("fingerprint", 0))}
            req["epoch"] = int(resume["epoch"])  # the session runs from the resumed epoch
        c = self._client  # the daemon lists the dataset and reads its headers before the first line
        conn, resp, info = c._open_stream("/v1/loaders", json.dumps(req).encode(), "a loader session", self.timeout)
        if "session" not in info:
            conn.close()
            raise InternalError(f"cacheagent loader: the session's first line is {info!r}")
        self._conn, self._resp = conn, resp
        if info.get("protocol") != PROTOCOL:
            raise ProtocolError(f"cacheagent loader: the daemon speaks protocol {info.get('protocol')}, not {PROTOCOL}")
        self.info: Dict[str, Any] = info
        self.session: str = info["session"]
        self.slots: int = int(info["slots"])
        self.slot_bytes: int = int(info["slot_bytes"])
        self.ring_bytes: int = int(info["ring_bytes"])
        self.batch_size: int = int(info["batch_size"])
        self.batches_per_epoch: int = int(info["batches_per_epoch"])
        self.array_specs: List[Dict[str, Any]] = list(info["arrays"])
        self._names = [a["name"] for a in self.array_specs]
        self.format: str = str(info.get("format") or "npy")
        self.fields: List[str] = list(info.get("fields") or [])
        start = info.get("start") or {}
        self._fingerprint = int(start.get("fingerprint", 0))
        self._pos = (int(start.get("epoch", 0)), int(start.get("batch", 0)))  # the next Ready's place
        self._consumed = self._pos  # the position after the last batch yielded (state_dict's)
        self._epoch = self._pos[0]
        self._fresh = True  # the first iteration starts at the session's start, mid-epoch or not
        self._ended = False  # End received: no Ready comes before a Seek
        self._held: Dict[int, Batch] = {}  # slot -> batch handed to the user
        self._order: Deque[Batch] = collections.deque()  # the held batches, oldest first
        self._pending: Deque[Tuple[int, tuple]] = collections.deque()  # messages received, not yet used
        self._dtypes: Dict[bytes, Any] = {}
        # The data socket.
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        self._sock = s
        s.settimeout(min(self.timeout, 30.0))
        try:
            s.connect(info["data_socket"])
            s.send(_HELLO.pack(T_HELLO, PROTOCOL, self.session.encode(), str(info["token"]).encode()))
            msg, fds, _, _ = _socket.recv_fds(s, _MAX_MESSAGE, 1)
        except _socket.timeout:
            raise DaemonTimeout(f"cacheagent loader: joining session {self.session} timed out") from None
        except OSError as e:
            raise DaemonUnavailable(f"cacheagent loader: data socket {info['data_socket']}: {e!r}") from None
        try:
            if len(msg) >= 8 and _TYPE.unpack_from(msg)[0] == T_ERROR:
                code, = struct.unpack_from("<I", msg, 4)
                raise _ring_error(code, msg[8:].decode(errors="replace"))
            if len(msg) != _WELCOME.size or _TYPE.unpack_from(msg)[0] != T_WELCOME or len(fds) != 1:
                raise ProtocolError(f"cacheagent loader: want a Welcome with the ring, got {msg[:16]!r} "
                                    f"and {len(fds)} fds")
            _, proto, ring_bytes, slot_bytes, slots, narrays = _WELCOME.unpack(msg)
            if (ring_bytes, slot_bytes, slots, narrays) != (self.ring_bytes, self.slot_bytes, self.slots,
                                                              len(self.array_specs)):
                raise ProtocolError("cacheagent loader: the Welcome does not match the session's first line")
            self._mm = mmap.mmap(fds[0], ring_bytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            for fd in fds:
                os.close(fd)
        self.ring = self._np.frombuffer(self._mm, dtype=self._np.uint8)
        """The whole ring as a uint8 array: every batch's arrays are views of it."""
        s.settimeout(self.timeout)

    def _end_session(self) -> None:
        """Shut down and close the data socket and control stream (shut
        down: copies of them in other processes do not keep the session);
        drop the ring (the mapping lives on while views of it do)."""
        self._drop_batches()
        for s in (self._sock, self._conn.sock if self._conn is not None else None):
            if s is not None:
                try:
                    s.shutdown(_socket.SHUT_RDWR)
                except OSError:
                    pass  # not connected, or already shut down by the daemon
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._drop_ring()

    def _drop_batches(self) -> None:
        """Stop the iterators and forget the held batches (no release
        through a closed session) and the messages not yet used."""
        self._iter_gen += 1
        if hasattr(self, "_order"):
            for b in list(self._order):
                b._loader = None
            self._held.clear()
            self._order.clear()
            self._pending.clear()

    def _drop_ring(self) -> None:
        self.ring = None
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass  # views are alive: the mapping goes with the last one
            self._mm = None

    def _after_fork(self) -> None:
        """In a forked child: close the child's copies of the session's
        sockets without touching the connections (no shutdown, which would
        end the parent's session) and unmap its copy of the ring; the
        Loader is closed here. The control stream's response object is
        kept, never closed: its buffer's lock may be held by a thread that
        does not exist here."""
        self._pid = os.getpid()
        self._closed = True
        self._drop_batches()
        conn, self._conn = self._conn, None
        for s in (self._sock, conn.sock if conn is not None else None):
            if s is not None:
                try:
                    os.close(s.detach())
                except OSError:
                    pass
        self._sock = None
        if conn is not None:
            _forked_away.append((conn, self._resp))
            self._resp = None
        self._drop_ring()

    def _ended_reason(self) -> str:
        """The control stream's last line, if the daemon sent one."""
        conn, resp = self._conn, self._resp
        if conn is None or conn.sock is None or resp is None:
            return ""
        try:
            conn.sock.settimeout(0.5)
            line = resp.readline(1 << 16)
            return str(json.loads(line).get("ended", "")) if line else ""
        except Exception:
            return ""

    # ----- messages

    def _send(self, b: bytes) -> None:
        if self._sock is None:
            raise ClientClosed("cacheagent: the loader is closed")
        try:
            self._sock.send(b)
        except OSError as e:
            reason = self._ended_reason()
            raise SessionEnded(f"cacheagent loader: session {self.session} ended"
                               f"{': ' + reason if reason else ''} ({e})", code="session_ended") from None

    def _recv_raw(self) -> Tuple[int, tuple]:
        if self._sock is None:
            raise ClientClosed("cacheagent: the loader is closed")
        try:
            msg = self._sock.recv(_MAX_MESSAGE)
        except _socket.timeout:
            raise DaemonTimeout(f"cacheagent loader: no message from the daemon within {self.timeout}s") from None
        except OSError as e:
            msg, err = b"", e
        else:
            err = None
        if not msg:
            reason = self._ended_reason()
            raise SessionEnded(f"cacheagent loader: session {self.session} ended"
                               f"{': ' + reason if reason else ''}{f' ({err})' if err else ''}", code="session_ended")
        t = _TYPE.unpack_from(msg)[0]
        try:
            if t == T_READY:
                return t, _READY.unpack(msg)
            if t == T_EPOCH_END:
                return t, _EPOCH_END.unpack(msg)
            if t == T_END:
                return t, _END.unpack(msg)
            if t == T_STATE_IS:
                return t, _STATE_IS.unpack(msg)
            if t == T_ERROR:
                code, = struct.unpack_from("<I", msg, 4)
                return t, (t, code, msg[8:].decode(errors="replace"))
        except struct.error:
            pass
        raise ProtocolError(f"cacheagent loader: unexpected message {msg[:32]!r}")

    def _recv(self) -> Tuple[int, tuple]:
        if self._pending:
            return self._pending.popleft()
        return self._recv_raw()

    def _raise_error(self, m: tuple) -> None:
        _, code, text = m
        err = _ring_error(code, text)
        if code != CODE_REFUSED:
            self._end_session()
        raise err

    # ----- batches

    def _holds(self, b: Batch) -> bool:
        return self._held.get(b.slot) is b

    def _release_batch(self, b: Batch) -> None:
        if self._held.get(b.slot) is not b:
            return
        del self._held[b.slot]
        try:
            self._order.remove(b)
        except ValueError:  # pragma: no cover
            pass
        b._loader = None
        t0 = time.perf_counter_ns()
        self._send(_RELEASE.pack(T_RELEASE, b.slot, b.seq))
        self._release_ns += time.perf_counter_ns() - t0

    def _release_all(self) -> None:
        for b in list(self._order):
            self._release_batch(b)

    def _batch(self, m: tuple) -> Batch:
        """Views of the slot of Ready m, checked against its header."""
        _, slot, seq, epoch, index, n, _ = m
        base = slot * self.slot_bytes
        mm = self._mm
        if mm is None:
            raise ClientClosed("cacheagent: the loader is closed")
        magic, version, narrays, hseq, hepoch, hindex, hn, state, sbytes = _HEADER.unpack_from(mm, base)
        if magic != MAGIC or hseq != seq or hepoch != epoch or hindex != index or hn != n or state != STATE_READY:
            raise ProtocolError(f"cacheagent loader: slot {slot} holds magic {magic:#x} batch {hseq} "
                                f"({hepoch}/{hindex}, {hn} samples, state {state}); the Ready says batch {seq} "
                                f"({epoch}/{index}, {n} samples)")
        np, ring, names, dtypes = self._np, self.ring, self._names, self._dtypes
        arrays: Dict[str, Any] = {}
        off = base + _DESC_OFF
        for _ in range(narrays):
            d = _DESC.unpack_from(mm, off)
            off += 96
            dt = dtypes.get(d[2])
            if dt is None:
                dt = dtypes[d[2]] = np.dtype(d[2].rstrip(b"\0").decode())
            ndim = d[1]
            arrays[names[d[0]]] = np.ndarray(d[3:3 + ndim], dt, ring, base + d[11])
        return Batch(arrays, epoch, index, seq, slot, self, self.fields)

    def _seek(self, epoch: int, batch: int) -> None:
        """Restart the stream at (epoch, batch) (protocol's Seek)."""
        self._send(_SEEK.pack(T_SEEK, epoch, batch))
        self._release_all()
        # Until the answer, the stream is nowhere an iteration can use: a
        # refused Seek leaves the old sequence going, short of the batches
        # released here, and the next iteration seeks again.
        self._ended = True
        while True:
            t, m = self._recv()
            if t == T_READY:
                self._send(_RELEASE.pack(T_RELEASE, m[1], m[2]))
            elif t == T_STATE_IS:
                self._pos = (m[1], m[2])
                self._ended = False
                self._seeks += 1
                return
            elif t == T_ERROR:
                self._raise_error(m)
            # EpochEnd and End of the stopped sequence: nothing to do

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration read epoch ``epoch`` from its start (the
        daemon restarts its loader there unless its stream is already at
        that epoch's first batch).

        Before the first iteration after :meth:`load_state_dict` (or of the
        session) the loader keeps a position that is already in ``epoch``:
        the loop ``for epoch in range(start, n): loader.set_epoch(epoch)``
        resumed from a state taken mid-epoch continues with the saved batch
        (the one after the batch in hand) rather than replaying the epoch.
        """
        self._check()
        if int(epoch) < 0:
            raise InvalidRequest(f"cacheagent loader: set_epoch({epoch}): epochs are >= 0", code="invalid")
        self._epoch = int(epoch)
        if self._fresh and self._pos[0] == self._epoch and not self._ended:
            return  # the loaded position is in this epoch: the next iteration starts there
        self._fresh = False
        self._consumed = (self._epoch, 0)  # where the next iteration starts

    def __len__(self) -> int:
        """Batches per epoch."""
        return self.batches_per_epoch

    def __iter__(self) -> Iterator[Batch]:
        self._check()
        self._iter_gen += 1
        return self._iterate(self._iter_gen)

    def _iterate(self, gen: int) -> Iterator[Batch]:
        epoch = self._epoch
        if not (self._pos == (epoch, 0) and not self._ended) and not (self._fresh and self._pos[0] == epoch
                                                                       and not self._ended):
            self._seek(epoch, 0)
        self._fresh = False
        perf = time.perf_counter_ns
        order, keep = self._order, self.keep
        while True:
            if gen != self._iter_gen or self._closed:
                return  # a newer iteration took over
            while len(order) >= keep:
                self._release_batch(order[0])
            t0 = perf()
            t, m = self._recv()
            t1 = perf()
            if t == T_READY:
                if m[3] != epoch:  # cannot happen: an EpochEnd comes first
                    self._pending.appendleft((t, m))
                    break
                b = self._batch(m)
                self._held[b.slot] = b
                order.append(b)
                self._pos = (m[3], m[4] + 1)
                self._consumed = (m[3] + 1, 0) if m[4] + 1 >= self.batches_per_epoch else self._pos
                self._batches += 1
                self._wait_ns += t1 - t0
                self._handoff_ns += perf() - t1
                yield b
            elif t == T_EPOCH_END:
                self._pos = (m[1] + 1, 0)
                if m[1] == epoch:
                    break
            elif t == T_END:
                self._pos = (m[1], m[2])
                self._ended = True
                if m[1] == epoch:  # the session's epochs ended before this one: the daemon goes on
                    self._seek(m[1], m[2])
                    continue
                break
            elif t == T_ERROR:
                self._raise_error(m)
            elif t == T_STATE_IS:  # pragma: no cover - only asked for synchronously
                continue
        if gen == self._iter_gen and not self._closed:
            self._release_all()
            self._epoch = epoch + 1
            self._consumed = (epoch + 1, 0)

    # ----- state

    def state_dict(self, resume_held: Optional[bool] = None) -> Dict[str, int]:
        """Where to resume, as the Go loader's State: ``{"epoch", "batch",
        "fingerprint"}``. Pass it to :meth:`load_state_dict` (in this or
        another process, same settings but the rank) to continue from there.

        By default it is the position after the last batch the iterator
        yielded: every yielded batch counts as consumed, as with torchdata's
        StatefulDataLoader and Mosaic's StreamingDataLoader, so a state taken
        in the loop body after ``k`` batches resumes with batch ``k`` (0-based,
        the one after the batch in hand). After an epoch's last batch it is
        the next epoch's batch 0; after ``set_epoch(e)``, epoch ``e``'s batch
        0; before any batch, the session's start (or the loaded state).

        ``resume_held=True`` (default: the Loader's ``resume_held``) asks the
        daemon instead for the position after the batches released: the
        earliest batch still held (with ``keep=1``, the one in hand), else
        the one after the last handed out. Resuming from it yields the held
        batches again, for a loop that has not finished with them.
        """
        self._check()
        if not (self.resume_held if resume_held is None else resume_held):
            epoch, batch = self._consumed
            return {"epoch": epoch, "batch": batch, "fingerprint": self._fingerprint}
        self._send(_STATE.pack(T_STATE))
        stash: List[Tuple[int, tuple]] = []
        try:
            while True:
                t, m = self._recv_raw()
                if t == T_STATE_IS:
                    st = {"epoch": int(m[1]), "batch": int(m[2]), "fingerprint": int(m[3])}
                    return st
                if t == T_ERROR:
                    self._raise_error(m)
                stash.append((t, m))
        finally:
            self._pending.extend(stash)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from ``state`` (from :meth:`state_dict`): the session is
        replaced by a new one resuming there; the next iteration starts
        with the state's batch (with the default state_dict, the one after
        the last batch yielded when it was taken)."""
        self._check()
        self._end_session()
        self._open(dict(state))

    # ----- stats

    @property
    def stats(self) -> Dict[str, Any]:
        """Client-side figures: ``batches`` received, ``wait_s`` (time
        blocked waiting for the daemon's next batch: the loader's stall as
        seen here), ``handoff_us`` (mean time per batch from its message
        received to its views built, plus sending its release), ``seeks``;
        ``loader``, this session's Go loader's own figures as it last reported
        them (at most a second old): batches, samples, ``wait_seconds`` and
        its split by cause, ``fetch_seconds``, ``promote_seconds``,
        ``gather_seconds``, ``other_seconds``; and ``daemon``, the daemon's
        summed loader stats (``status()["loaders"]["totals"]``)."""
        n = max(self._batches, 1)
        out: Dict[str, Any] = {"batches": self._batches, "wait_s": self._wait_ns / 1e9,
                               "handoff_us": (self._handoff_ns + self._release_ns) / n / 1e3, "seeks": self._seeks}
        try:
            plan = self._client._request("GET", f"/v1/plans/loader-session-{self.session}")
            if isinstance(plan, dict) and plan.get("stats"):
                out["loader"] = plan["stats"]
        except errors.CacheagentError:
            pass
        try:
            loaders = self._client.status().get("loaders")
            if loaders:
                out["daemon"] = loaders.get("totals")
        except errors.CacheagentError:
            pass
        return out

    # ----- lifetime

    def _check(self) -> None:
        if self._pid != os.getpid():  # forked without register_at_fork
            self._after_fork()
        if self._closed or self._sock is None:
            raise ClientClosed("cacheagent: the loader is closed")

    def close(self) -> None:
        """End the session: the daemon stops the loader and frees the ring
        (views still alive keep their memory). Idempotent; in a forked
        child it ends nothing (the session is the parent's)."""
        if self._pid != os.getpid():
            self._after_fork()
        if self._closed:
            return
        self._closed = True
        self._end_session()
        if getattr(self, "_client", None) is not None:
            self._client.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # No I/O here: the sockets' own finalisers close them, which ends
        # the session on the daemon's side.
        pass

    def __repr__(self) -> str:
        return (f"<cacheagent.Loader session {getattr(self, 'session', '?')} "
                f"{getattr(self, 'batches_per_epoch', '?')} batches/epoch{' closed' if self._closed else ''}>")
