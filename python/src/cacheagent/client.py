"""The client of the cacheagent daemon's control socket.

:class:`Client` speaks HTTP/1.1 with JSON bodies over the daemon's Unix
socket (routes in the Go package ``control``). Every call has a timeout:
nothing blocks forever on a daemon that does not answer. A Client is safe
for concurrent use by threads; after ``fork`` the child's copy drops the
parent's connections (without touching them) and opens its own.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket as _socket
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple
from urllib.parse import quote, urlencode

from . import errors
from .errors import ClientClosed, DaemonNotRunning, DaemonTimeout, DaemonUnavailable, SessionEnded
from .lease import Lease, _Session
from .plan import Plan, PlanInfo
from .uri import ObjectLike, object_of, parse_prefix

__all__ = ["Client", "DaemonInfo", "DEFAULT_SOCKET", "plan"]

log = logging.getLogger("cacheagent")

DEFAULT_SOCKET = "/run/cacheagent/control.sock"
"""The daemon's control socket unless configured otherwise (control.DefaultSocket)."""

_MAX_ERROR_BODY = 64 << 10
_IDLE_REUSE = 30.0  # seconds a pooled connection is reused (the daemon closes idle ones after a minute)
_MAX_IDLE = 8


@dataclass(frozen=True)
class DaemonInfo:
    """What the daemon answered to ``GET /v1/ping``."""

    version: str
    pid: int
    cache_dir: str
    started: str


class _UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection to a Unix socket."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("cacheagent", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self.unix_path)
        except BaseException:
            s.close()
            raise
        self.sock = s


_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for c in list(_clients):
        c._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Client:
    """A connection to the cacheagent daemon.

    Creating it pings the daemon (``GET /v1/ping``); a missing socket or a
    refused connection raises :class:`~cacheagent.errors.DaemonNotRunning`.

    Args:
        socket: the daemon's control socket.
        timeout: seconds any call may wait for the daemon (per socket
            operation).
        fetch_timeout: the same for calls that may download objects first
            (``open``, ``fetch``, ``promote``, ``read``).
        mount_root: where ``cacheagent mount`` shows the buckets, so that
            paths under it name objects (``<mount_root>/<bucket>/<name>``);
            ``None`` accepts only ``gs://`` URIs and ObjectRefs.

    Use it as a context manager, or call :meth:`close`: that ends the lease
    session, and the daemon releases every lease of it.
    """

    def __init__(self, socket: str = DEFAULT_SOCKET, *, timeout: float = 30.0, fetch_timeout: float = 600.0,
                 mount_root: Optional[str] = None) -> None:
        self.socket = os.fspath(socket)
        self.timeout = timeout
        self.fetch_timeout = fetch_timeout
        self.mount_root = mount_root
        self._init_state()
        _clients.add(self)
        d = self._request("GET", "/v1/ping")
        self.info = DaemonInfo(str(d.get("version", "")), int(d.get("pid", 0)), str(d.get("cache_dir", "")),
                               str(d.get("started", "")))

    def _init_state(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()  # guards _idle, _session, _closed
        self._session_lock = threading.Lock()  # serialises opening a session; taken before _lock
        self._idle: List[Tuple[_UnixHTTPConnection, float]] = []
        self._session: Optional[_Session] = None
        self._closed = False
        self._pending: List[Tuple[_Session, int]] = []  # leases collected unreleased

    @property
    def version(self) -> str:
        """The daemon's version, as it answered the ping."""
        return self.info.version

    # ----- plumbing

    def _after_fork(self) -> None:
        idle, sess = self._idle, self._session
        self._init_state()
        for conn, _ in idle:
            conn.close()  # the child's copy of the fd; the parent's connection lives on
        if sess is not None:
            sess.forget_after_fork()

    def _check(self) -> None:
        if self._pid != os.getpid():  # forked without register_at_fork
            self._after_fork()
        if self._closed:
            raise ClientClosed(f"cacheagent: client of {self.socket} is closed")

    def _connect(self, timeout: float) -> _UnixHTTPConnection:
        conn = _UnixHTTPConnection(self.socket, timeout)
        try:
            conn.connect()
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise DaemonNotRunning(self.socket, e.strerror or str(e)) from None
        except _socket.timeout:
            raise DaemonTimeout(f"cacheagent: connecting to {self.socket} timed out after {timeout}s") from None
        except OSError as e:
            raise DaemonUnavailable(f"cacheagent: cannot connect to {self.socket}: {e}") from None
        return conn

    def _take(self, timeout: float) -> Tuple[_UnixHTTPConnection, bool]:
        now = time.monotonic()
        with self._lock:
            while self._idle:
                conn, used = self._idle.pop()
                if now - used < _IDLE_REUSE and conn.sock is not None:
                    conn.sock.settimeout(timeout)
                    conn.timeout = timeout
                    return conn, True
                conn.close()
        return self._connect(timeout), False

    def _put(self, conn: _UnixHTTPConnection) -> None:
        with self._lock:
            if not self._closed and self._pid == os.getpid() and len(self._idle) < _MAX_IDLE:
                self._idle.append((conn, time.monotonic()))
                return
        conn.close()

    def _request(self, method: str, path: str, body: Any = None, *, query: Optional[Dict[str, str]] = None,
                 timeout: Optional[float] = None, raw: bool = False) -> Any:
        """Send one request; return the decoded JSON answer (None for an
        empty one), or the bytes with raw. Errors become CacheagentErrors."""
        self._check()
        timeout = self.timeout if timeout is None else timeout
        url = path + ("?" + urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        for attempt in (0, 1):
            conn, reused = self._take(timeout)
            try:
                conn.request(method, url, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read() if resp.status // 100 == 2 else resp.read(_MAX_ERROR_BODY)
            except _socket.timeout:
                conn.close()
                raise DaemonTimeout(f"cacheagent: {method} {path} on {self.socket}: "
                                    f"no answer within {timeout}s") from None
            except (http.client.HTTPException, OSError) as e:
                conn.close()
                if reused and attempt == 0:  # the daemon closed an idle connection: once more on a new one
                    continue
                if isinstance(e, (FileNotFoundError, ConnectionRefusedError)):
                    raise DaemonNotRunning(self.socket, str(e)) from None
                raise DaemonUnavailable(f"cacheagent: {method} {path} on {self.socket}: {e!r}") from None
            if resp.will_close or resp.status // 100 != 2:
                conn.close()
            else:
                self._put(conn)
            if resp.status // 100 != 2:
                raise errors.from_answer(resp.status, resp.reason, payload)
            if raw:
                return payload
            if not payload:
                return None
            try:
                return json.loads(payload)
            except ValueError as e:
                raise errors.InternalError(f"cacheagent: {method} {path}: bad answer: {e}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    # ----- daemon state

    def ping(self) -> DaemonInfo:
        """Check that the daemon answers and return what it says about itself."""
        d = self._request("GET", "/v1/ping")
        return DaemonInfo(str(d.get("version", "")), int(d.get("pid", 0)), str(d.get("cache_dir", "")),
                          str(d.get("started", "")))

    def status(self) -> Dict[str, Any]:
        """The daemon's status (``GET /v1/status``) as a dict: tiers, fetch
        counters, and the counts of ``sessions``, ``leases`` and ``plans``."""
        return dict(self._request("GET", "/v1/status"))

    # ----- plans

    def plan(self, objects: Sequence[ObjectLike], id: Optional[str] = None) -> Plan:
        """Announce that this process will open ``objects`` in this order
        (``POST /v1/plans``): the daemon prefetches ahead of the reader and
        evicts what is needed last. A plan with the same ``id`` is replaced;
        ``None`` lets the daemon choose one. Return a :class:`Plan` handle
        (it does not own the client)."""
        refs = [object_of(o, self.mount_root) for o in objects]
        body: Dict[str, Any] = {"objects": [r.to_json() for r in refs]}
        if id is not None:
            body["id"] = id
        return Plan(self, PlanInfo.from_json(self._request("POST", "/v1/plans", body)))

    def advance(self, plan_id: str, position: int) -> None:
        """Report that plan ``plan_id``'s reader is about to open its object
        at ``position`` (ResourceNotFound if no such plan)."""
        self._request("POST", f"/v1/plans/{quote(plan_id, safe='')}/advance", {"position": int(position)})

    def drop_plan(self, plan_id: str) -> None:
        """Forget plan ``plan_id`` (ResourceNotFound if no such plan)."""
        self._request("DELETE", f"/v1/plans/{quote(plan_id, safe='')}")

    def plans(self) -> List[PlanInfo]:
        """The announced plans, oldest first."""
        return [PlanInfo.from_json(p) for p in self._request("GET", "/v1/plans") or []]

    def get_plan(self, plan_id: str) -> PlanInfo:
        """The announced plan ``plan_id`` (ResourceNotFound if none)."""
        return PlanInfo.from_json(self._request("GET", f"/v1/plans/{quote(plan_id, safe='')}"))

    # ----- caching

    def fetch(self, objects: Sequence[ObjectLike]) -> None:
        """Return once every object is cached, downloading missing ones at
        demand priority (``POST /v1/fetch``)."""
        refs = [object_of(o, self.mount_root).to_json() for o in objects]
        self._request("POST", "/v1/fetch", {"objects": refs}, timeout=self.fetch_timeout)

    def promote(self, objects: Sequence[ObjectLike]) -> Dict[str, int]:
        """Copy cached objects into the shm tier (``POST /v1/promote``);
        return ``{"promoted": n, "queued": m}``. NoShm without a shm tier."""
        refs = [object_of(o, self.mount_root).to_json() for o in objects]
        return dict(self._request("POST", "/v1/promote", {"objects": refs}, timeout=self.fetch_timeout))

    def prefetch(self, uri: str, priority: str = "warm") -> Dict[str, Any]:
        """Start a job caching every object under ``gs://BUCKET/PREFIX``
        (``POST /v1/prefetch``; priority ``"warm"`` or ``"plan"``) and
        return the job (a dict: ``id``, ``state``, ``progress`` ...) at once."""
        u = parse_prefix(uri)
        return dict(self._request("POST", "/v1/prefetch", {"bucket": u.bucket, "prefix": u.path,
                                                           "priority": priority}))

    def job(self, job_id: str) -> Dict[str, Any]:
        """The prefetch job ``job_id`` (ResourceNotFound if the daemon does not know it)."""
        return dict(self._request("GET", f"/v1/jobs/{quote(job_id, safe='')}"))

    def read(self, obj: ObjectLike) -> bytes:
        """An object's bytes, read through the cache (``GET /v1/object``) into
        memory: a copy. Prefer :meth:`open` for large objects."""
        r = object_of(obj, self.mount_root)
        q = {"bucket": r.bucket, "name": r.name}
        if r.generation:
            q["generation"] = str(r.generation)
        return bytes(self._request("GET", "/v1/object", query=q, timeout=self.fetch_timeout, raw=True))

    # ----- leases

    def open(self, obj: ObjectLike) -> Lease:
        """Lease the object's best local copy (fetching it first if needed)
        and map it read-only. See :class:`~cacheagent.lease.Lease`."""
        ref = object_of(obj, self.mount_root)
        self._release_pending()
        for _ in (0, 1):  # a session that ended under us is replaced once
            s = self._current_session()
            try:
                info = self._request("POST", f"/v1/sessions/{quote(s.id, safe='')}/leases", ref.to_json(),
                                     timeout=self.fetch_timeout)
            except SessionEnded:
                self._forget(s)
                continue
            try:
                lease = Lease(self._release, s, info, ref)
            except BaseException:
                self._release(s, int(info["id"]), True)
                raise
            if s.add(lease):
                return lease
        raise SessionEnded(f"cacheagent: open {ref}: the lease session ended twice", code="session_ended")

    def _current_session(self) -> _Session:
        with self._session_lock:
            with self._lock:
                s = self._session
            if s is not None and not s.ended.is_set():
                return s
            s = self._open_session()
            with self._lock:
                if self._closed:
                    s.close()
                    raise ClientClosed(f"cacheagent: client of {self.socket} is closed")
                self._session = s
            s.start()
            return s

    def _open_session(self) -> _Session:
        self._check()
        conn, resp, ev = self._open_stream("/v1/sessions", b"", "a lease session", self.timeout)
        sid = ev.get("session")
        if not sid:
            conn.close()
            raise errors.InternalError("cacheagent: lease session: the first event names no session")
        return _Session(sid, conn, resp, conn.sock, self._forget)

    def _open_stream(self, path: str, body: bytes, what: str,
                     timeout: float) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse, Dict[str, Any]]:
        """POST body to a streaming route on a connection of its own and
        read the stream's first line: the connection, the response (the
        stream stays open for the caller) and that line as a dict."""
        conn = self._connect(timeout)
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status // 100 != 2:
                raise errors.from_answer(resp.status, resp.reason, resp.read(_MAX_ERROR_BODY))
            first = json.loads(resp.readline(1 << 20) or b"{}")
            if not isinstance(first, dict):
                raise ValueError(f"the first line of {what} is {first!r}")
        except _socket.timeout:
            conn.close()
            raise DaemonTimeout(f"cacheagent: opening {what} on {self.socket} timed out") from None
        except (http.client.HTTPException, OSError, ValueError) as e:
            conn.close()
            raise DaemonUnavailable(f"cacheagent: opening {what} on {self.socket}: {e!r}") from None
        except BaseException:
            conn.close()
            raise
        return conn, resp, first

    def _forget(self, s: _Session) -> None:
        with self._lock:
            if self._session is s:
                self._session = None

    def _release(self, s: _Session, lease_id: int, now: bool) -> None:
        if not now:  # from a finaliser: no I/O there
            self._pending.append((s, lease_id))
            return
        if s.ended.is_set() or self._closed or self._pid != os.getpid():
            return  # released with its session
        try:
            self._request("DELETE", f"/v1/sessions/{quote(s.id, safe='')}/leases/{lease_id}")
        except (SessionEnded, errors.ResourceNotFound, DaemonUnavailable):
            pass  # released with its session (the daemon restarted or is going)

    def _release_pending(self) -> None:
        while True:
            try:  # list.pop is atomic: of two threads that saw the last entry, one gets it
                s, lease_id = self._pending.pop()
            except IndexError:
                return
            try:
                self._release(s, lease_id, True)
            except errors.CacheagentError as e:
                log.warning("cacheagent: releasing a collected lease: %s", e)

    # ----- lifetime

    def close(self) -> None:
        """End the lease session (the daemon releases its leases, and they
        turn stale) and close the connections. Idempotent."""
        if self._pid != os.getpid():
            self._after_fork()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle, self._idle = self._idle, []
            s, self._session = self._session, None
        if s is not None:
            s.close()
        for conn, _ in idle:
            conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<cacheagent.Client {self.socket} daemon {self.info.version if hasattr(self, 'info') else '?'}>"



def plan(paths_in_order: Sequence[ObjectLike], socket: Optional[str] = None, *, mount_root: Optional[str] = None,
         id: Optional[str] = None, timeout: float = 30.0) -> Plan:
    """Announce the order in which this program will read objects, for
    code that will not change how it reads them.

    ``paths_in_order`` are ``gs://`` URIs, or paths under the FUSE mount
    when ``mount_root`` is given (``/mnt/gcs/<bucket>/<name>`` with
    ``mount_root="/mnt/gcs"``). Returns a :class:`Plan` with its own client:
    call ``advance(position)`` as reading goes on, and ``close()`` (or use
    ``with``) when done::

        with cacheagent.plan(files, mount_root="/mnt/gcs") as p:
            for i, f in enumerate(files):
                p.advance(i)
                data = open(f, "rb", buffering=0).read()

    (Unbuffered: with ``open()``'s default buffering CPython asks
    ``isatty()`` of every file, an ioctl the kernel forwards to the agent
    when the file is in the mount, one more round trip per file.)
    """
    c = Client(socket or DEFAULT_SOCKET, timeout=timeout, mount_root=mount_root)
    try:
        p = c.plan(paths_in_order, id=id)
    except BaseException:
        c.close()
        raise
    p._owns_client = True
    return p
