"""Leases: the daemon holding one object's local copy for this process.

A lease lives in a lease *session*: one streaming request
(``POST /v1/sessions``) that the client keeps open on its own connection
and reads on a daemon thread. Its first line names the session; later
lines list leases whose copies went stale (replaced, evicted or moved).
When the connection closes (``Client.close()``, process exit, even
SIGKILL) the daemon releases every lease of the session. If the daemon
restarts, the session ends: its leases turn stale and the client opens a
new session on the next ``open``.

A :class:`Lease` maps the copy's file read-only with :mod:`mmap` (never
through ``multiprocessing.shared_memory``, whose resource tracker would
unlink files it does not own).
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import socket
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Optional

from . import npy
from .uri import ObjectRef

if TYPE_CHECKING:  # pragma: no cover
    import http.client

    import numpy as np

__all__ = ["Lease", "ObjectAttrs"]

log = logging.getLogger("cacheagent")

# A session line lists stale lease ids; this bounds one line.
_MAX_EVENT = 64 << 20


@dataclass(frozen=True)
class ObjectAttrs:
    """The attributes of the generation a lease's copy holds."""

    bucket: str
    name: str
    generation: int
    size: int
    crc32c: Optional[int] = None

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ObjectAttrs":
        """Build from the daemon's Attrs JSON."""
        crc = d.get("crc32c") if d.get("has_crc32c") else None
        return cls(d.get("bucket", ""), d.get("name", ""), int(d.get("generation", 0)),
                   int(d.get("size", 0)), crc)


class _Session:
    """The client's side of a lease session (internal)."""

    def __init__(self, sid: str, conn: "http.client.HTTPConnection", resp: "http.client.HTTPResponse",
                 sock: socket.socket, on_end: Callable[["_Session"], None]) -> None:
        self.id = sid
        self._conn, self._resp, self._sock = conn, resp, sock
        self._on_end = on_end
        self._lock = threading.RLock()  # re-entered when a Lease.__del__ runs under it
        self._leases: "weakref.WeakValueDictionary[int, Lease]" = weakref.WeakValueDictionary()
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._read, name=f"cacheagent-session-{sid}", daemon=True)

    def start(self) -> None:
        """Start reading the stream."""
        sock = self._sock
        sock.settimeout(None)  # events come when they come; close() wakes the reader
        self._thread.start()

    def _read(self) -> None:
        try:
            while True:
                line = self._resp.readline(_MAX_EVENT)
                if not line:
                    break
                if not line.strip():
                    continue
                ev = json.loads(line)
                self._mark_stale(ev.get("stale") or ())
        except Exception as e:  # the connection closed or broke: the session is over
            log.debug("cacheagent: lease session %s stream ended: %s", self.id, e)
        self._end()

    def _mark_stale(self, ids: Iterable[int]) -> None:
        with self._lock:
            for i in ids:
                lease = self._leases.get(int(i))
                if lease is not None:
                    lease._stale.set()

    def _end(self) -> None:
        with self._lock:
            self.ended.set()
            for lease in list(self._leases.values()):
                lease._stale.set()
            self._leases.clear()
        self._close_fds()
        self._on_end(self)

    def add(self, lease: "Lease") -> bool:
        """Record lease; False if the session has ended (the daemon released it)."""
        with self._lock:
            if self.ended.is_set():
                return False
            self._leases[lease.id] = lease
            return True

    def remove(self, lease: "Lease") -> bool:
        """Forget lease; report whether the session is still on."""
        with self._lock:
            self._leases.pop(lease.id, None)
            return not self.ended.is_set()

    def _close_fds(self) -> None:
        for c in (self._resp, self._conn, self._sock):
            try:
                c.close()
            except Exception:  # pragma: no cover - best effort
                pass

    def close(self, wait: float = 5.0) -> None:
        """End the session: the daemon releases its leases."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the reader
        except OSError:
            pass
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(wait)
        self._close_fds()

    def forget_after_fork(self) -> None:
        """In a forked child: close the child's copy of the session's socket
        without touching the connection (no shutdown, which would end the
        parent's session). The response object is kept, never closed: its
        buffer's lock may be held by the parent's reader thread, which does
        not exist here, so closing it could block forever."""
        try:
            os.close(self._sock.detach())
        except OSError:
            pass
        _forked_away.append(self)


# Sessions inherited through fork, kept so that no finaliser touches them.
_forked_away: "list[_Session]" = []


class Lease:
    """The daemon holding one object's local copy open for this process.

    Until :meth:`close` (or the end of its session) the copy is neither
    evicted nor deleted and its file keeps its size. :meth:`bytes` and
    :meth:`array` are read-only, zero-copy views of the mapped file.
    Leases are context managers; ``close`` is idempotent. A lease that is
    garbage collected without ``close`` is released by its client later.

    Attributes:
        id: the lease's id within its session.
        path: the local file holding the bytes (do not modify it).
        tier: the tier holding the copy, ``"shm"`` or ``"disk"``.
        attrs: the attributes of the generation the copy holds.
        ref: the object asked for.
    """

    def __init__(self, release: Callable[[_Session, int, bool], None], session: _Session, info: Dict[str, Any],
                 ref: ObjectRef) -> None:
        self.id: int = int(info["id"])
        self.path: str = info["path"]
        # Where the object's bytes start in the file at path: 0 for a file of its own, a page-aligned offset
        # for a small object packed into a segment file with others.
        self.offset: int = int(info.get("offset", 0))
        self.tier: str = info.get("tier", "")
        self.attrs = ObjectAttrs.from_json(info.get("attrs") or {})
        self.ref = ref
        self._release = release
        self._session = session
        self._pid = os.getpid()
        self._stale = threading.Event()
        self._closed = False
        self._mm: Optional[mmap.mmap] = None
        self._npy: Optional[npy.NpyHeader] = None
        self._owner: Optional[Any] = None  # a client this lease closes with it (cacheagent.open)
        self._map()

    def _map(self) -> None:
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size, have = self.attrs.size, os.fstat(fd).st_size
            if have < self.offset + size:  # a packed object's segment holds others too: it may be longer
                raise OSError(f"cacheagent: lease file {self.path} has {have} bytes, the object {size} at {self.offset}")
            if size:
                self._mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ, offset=self.offset)
        finally:
            os.close(fd)

    @property
    def size(self) -> int:
        """The object's size in bytes."""
        return self.attrs.size

    @property
    def stale(self) -> bool:
        """True once the daemon no longer serves this copy (it was replaced,
        evicted or moved to another tier) or the session ended (a daemon
        restart): open the object again for the current copy. The mapped
        bytes stay readable until ``close``."""
        return self._stale.is_set()

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def wait_stale(self, timeout: Optional[float] = None) -> bool:
        """Wait until the lease turns stale; False on timeout."""
        return self._stale.wait(timeout)

    def bytes(self) -> memoryview:
        """The object's bytes: a read-only memoryview of the mapping, valid
        while the lease is held."""
        self._check_open()
        return memoryview(self._mm) if self._mm is not None else memoryview(b"")

    def array(self) -> "np.ndarray[Any, Any]":
        """The array of a ``.npy`` object: a read-only numpy view of the
        mapping (no copy), valid while the lease is held. ValueError if
        the object is not a well-formed ``.npy`` file."""
        self._check_open()
        buf = self._mm if self._mm is not None else b""
        if self._npy is None:
            self._npy = npy.parse_header(buf)
        return npy.array_view(buf, self._npy)

    def _check_open(self) -> None:
        if self._closed:
            from .errors import ClientClosed

            raise ClientClosed(f"cacheagent: lease on {self.ref} is closed")

    def close(self) -> None:
        """Release the lease. Views from :meth:`bytes` and :meth:`array`
        must not be used afterwards (the mapping goes with the last of
        them). Idempotent; in a forked child, only the local mapping goes."""
        if self._closed:
            return
        self._closed = True
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # views still exist: the mapping goes with them
                pass
        try:
            if self._pid == os.getpid() and self._session.remove(self):
                self._release(self._session, self.id, True)
        finally:
            if self._owner is not None:
                self._owner.close()

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # No I/O here: the client releases it on its next call.
        if not getattr(self, "_closed", True) and self._pid == os.getpid():
            self._closed = True
            if self._session.remove(self):
                self._release(self._session, self.id, False)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "stale" if self.stale else "held"
        return f"<cacheagent.Lease {self.ref} id={self.id} tier={self.tier} size={self.size} {state}>"
