"""Checkpoints through the cacheagent daemon.

A save costs a local write: the framework writes its files into a real
directory on the cache's filesystem (``torch.save``, DCP's
``FileSystemWriter``, safetensors: plain file I/O, so fsync and rename
work), and leaving the ``with`` block hands them to the daemon, which moves
them into its cache (no byte copied) and uploads them behind training, with
every object written only if absent and the manifest
``PREFIX/cacheagent-checkpoint.json`` written last::

    import cacheagent.checkpoint as ckpt

    with ckpt.save("gs://bkt/run1/step-1000/") as ck:      # ck.dir: a fresh directory
        torch.save(model.state_dict(), ck.dir / "model.pt")
    # committed at exit (durability "local"); the upload goes on in the daemon
    ckpt.wait("gs://bkt/run1/step-1000/", durability="gcs")
    latest = ckpt.latest("gs://bkt/run1/")                  # newest committed, or None
    with ckpt.restore(latest) as ck:
        state = torch.load(ck.dir / "model.pt")

A block left by an exception commits nothing (its directory is removed). A
commit the daemon refuses (a prefix already committed: ``Conflict``) raises
and leaves the files in ``ck.dir`` (the daemon empties its staging
directories when it restarts).
Restored files are hard links to the daemon's cached copies where it can
(the cache's copy itself: copy one before changing it) and verified copies
elsewhere.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path
from types import TracebackType
from typing import Any, Dict, List, Optional, Type

from .client import DEFAULT_SOCKET, Client
from .errors import CacheagentError

__all__ = ["Save", "Restore", "save", "wait", "status", "list", "latest", "restore", "DURABILITIES"]

# DURABILITIES are the levels a save can be waited for, lowest first:
# fsynced on this node, also held by other fleet members, committed to GCS.
DURABILITIES = ("local", "peers", "gcs")

_builtin_list = list


def _check_durability(d: str) -> str:
    if d not in DURABILITIES:
        raise ValueError(f"cacheagent: durability {d!r} is not one of {', '.join(DURABILITIES)}")
    return d


def _open_to_daemon(top: Path) -> None:
    """Give the group (the ACL's mask in a directory the daemon gave by ACL)
    read on the files and rwx on the directories under ``top``: a daemon
    without capabilities could otherwise not read a file made 0600 (as
    ``mkstemp`` makes them) or move a file out of a 0700 directory."""
    for root, dirs, files in os.walk(top):
        for d in dirs:
            p = os.path.join(root, d)
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IRWXG != stat.S_IRWXG:
                os.chmod(p, stat.S_IMODE(st.st_mode) | stat.S_IRWXG)
        for f in files:
            p = os.path.join(root, f)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and not st.st_mode & stat.S_IRGRP:
                os.chmod(p, stat.S_IMODE(st.st_mode) | stat.S_IRGRP)


class Save:
    """A save in progress (:func:`save`): write the checkpoint's files under
    :attr:`dir`, then leave the ``with`` block (or call :meth:`commit`).

    Attributes:
        uri: the checkpoint's prefix, ``gs://BUCKET/PREFIX/``.
        dir: the directory to write into (a :class:`pathlib.Path`).
        info: the daemon's answer once committed: ``uri``, ``files``,
            ``bytes``, ``state``, ``uploaded_bytes``, ``replicas``.
    """

    def __init__(self, uri: str, wait: str, client: Client, owns_client: bool) -> None:
        self.uri = uri
        self.wait = _check_durability(wait)
        self._client = client
        self._owns = owns_client
        self.dir = Path(client._request("POST", "/v1/checkpoints/staging", {})["dir"])
        self.info: Optional[Dict[str, Any]] = None

    def commit(self) -> Dict[str, Any]:
        """Hand the files to the daemon; return once the checkpoint is durable
        at the save's ``wait`` (``"local"`` by default)."""
        try:
            if self.info is None:
                _open_to_daemon(self.dir)
                info: Dict[str, Any] = self._client._request(
                    "POST", "/v1/checkpoints", {"dir": str(self.dir), "uri": self.uri, "wait": self.wait},
                    timeout=self._client.fetch_timeout)
                self.info = info
                return info
            return self.info
        finally:
            self._close()

    def abandon(self) -> None:
        """Commit nothing: remove the directory and what was written in it."""
        shutil.rmtree(self.dir, ignore_errors=True)
        _unstage(self._client, DEFAULT_SOCKET, self.dir)
        self._close()

    def _close(self) -> None:
        if self._owns:
            self._client.close()

    def __enter__(self) -> "Save":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abandon()

    def __repr__(self) -> str:
        return f"<cacheagent.checkpoint.Save {self.uri} in {self.dir}>"


def save(uri: str, *, wait: str = "local", client: Optional[Client] = None,
         socket: str = DEFAULT_SOCKET) -> Save:
    """Start a save of the checkpoint at ``uri`` (``gs://BUCKET/PREFIX/``):
    the daemon hands out a fresh directory on its cache's filesystem
    (``.dir``) to write the files into; leaving the ``with`` block commits
    them (returning once durable at ``wait``: ``"local"``, ``"peers"`` or
    ``"gcs"``), an exception abandons them. A prefix that holds a committed
    checkpoint, or that another save owns, is refused at commit
    (:class:`~cacheagent.errors.Conflict`)."""
    owns = client is None
    c = client or Client(socket)
    try:
        return Save(uri, wait, c, owns)
    except BaseException:
        if owns:
            c.close()
        raise


def _unstage(client: Optional[Client], socket: str, d: Path) -> None:
    """Have the daemon remove ``d``, a directory it gave (its parent is the
    daemon's, so this process cannot), if it is still there."""
    if not os.path.lexists(d):
        return
    try:
        _call(client, socket, lambda c: c._request("DELETE", "/v1/checkpoints/staging", query={"dir": str(d)}))
    except (OSError, CacheagentError):
        pass  # a daemon gone, or the directory: it empties its staging directory when it starts


def _call(client: Optional[Client], socket: str, f: Any) -> Any:
    c = client or Client(socket)
    try:
        return f(c)
    finally:
        if client is None:
            c.close()


def wait(uri: str, *, durability: str = "gcs", timeout: Optional[float] = None, client: Optional[Client] = None,
         socket: str = DEFAULT_SOCKET) -> Dict[str, Any]:
    """Wait until the save of ``uri`` on this node is durable at
    ``durability`` (default ``"gcs"``: committed) and return its state; a
    save that failed raises :class:`~cacheagent.errors.CheckpointFailed`,
    one this node does not know :class:`~cacheagent.errors.ResourceNotFound`,
    and ``timeout`` seconds passing :class:`~cacheagent.errors.DaemonTimeout`
    (``None``: wait as long as it takes)."""
    body: Dict[str, Any] = {"uri": uri, "durability": _check_durability(durability)}
    if timeout is not None:
        body["timeout_ms"] = max(int(timeout * 1000), 1)

    def f(c: Client) -> Dict[str, Any]:
        limit = (timeout + 30.0) if timeout is not None else 1e9
        return c._request("POST", "/v1/checkpoints/wait", body, timeout=limit)

    return _call(client, socket, f)


def status(uri: Optional[str] = None, *, client: Optional[Client] = None,
           socket: str = DEFAULT_SOCKET) -> List[Dict[str, Any]]:
    """The saves this node holds or held (all, or those under ``uri``),
    newest first: ``uri``, ``files``, ``bytes``, ``state``,
    ``uploaded_bytes``, ``replicas`` and, for a failed save, ``error``."""
    query = {"uri": uri} if uri else None
    return _call(client, socket, lambda c: c._request("GET", "/v1/checkpoints", query=query))["checkpoints"] or []


def list(run: str, *, client: Optional[Client] = None, socket: str = DEFAULT_SOCKET) -> List[Dict[str, Any]]:
    """The committed checkpoints under ``run`` (``gs://BUCKET/RUN/``), newest
    first: those whose manifest's objects match it."""
    answer = _call(client, socket, lambda c: c._request("GET", "/v1/checkpoints/list", query={"uri": run},
                                                         timeout=c.fetch_timeout))
    return _builtin_list(answer.get("checkpoints") or [])


def latest(run: str, *, client: Optional[Client] = None, socket: str = DEFAULT_SOCKET) -> Optional[str]:
    """The URI of the newest committed checkpoint under ``run``, or None."""
    cs = list(run, client=client, socket=socket)
    return cs[0]["uri"] if cs else None


class Restore:
    """A restored checkpoint (:func:`restore`): its files are under
    :attr:`dir`. A fresh directory the daemon made is removed when the
    ``with`` block ends.

    Attributes:
        uri: the checkpoint's prefix.
        dir: the directory holding its files (a :class:`pathlib.Path`).
        info: ``dir``, ``files``, ``bytes``, ``linked`` (hard links).
    """

    def __init__(self, uri: str, info: Dict[str, Any], fresh: bool, client: Optional[Client] = None,
                 socket: str = DEFAULT_SOCKET) -> None:
        self.uri = uri
        self.info = info
        self.dir = Path(info["dir"])
        self._fresh = fresh
        self._client = client
        self._socket = socket

    def close(self) -> None:
        """Remove the directory if the daemon made it."""
        if self._fresh:
            shutil.rmtree(self.dir, ignore_errors=True)
            _unstage(self._client, self._socket, self.dir)
            self._fresh = False

    def __enter__(self) -> "Restore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<cacheagent.checkpoint.Restore {self.uri} in {self.dir}>"


def restore(uri: str, dir: Optional["os.PathLike[str] | str"] = None, *, client: Optional[Client] = None,
            socket: str = DEFAULT_SOCKET) -> Restore:
    """Place the committed checkpoint at ``uri`` in ``dir`` (created if
    missing, nothing in it overwritten), or in a fresh directory removed when
    the ``with`` block ends. Each file is read through the cache (in fleet
    mode from the members that hold it) and checked against the manifest's
    CRC32C. The daemon restores into a fresh directory it gives this user;
    with ``dir``, this process then moves the files there (renamed, hard
    links into the cache staying so, or copied to another filesystem), so
    ``dir`` need not be visible to the daemon."""
    info = _call(client, socket, lambda c: c._request("POST", "/v1/checkpoints/restore", {"uri": uri},
                                                       timeout=c.fetch_timeout))
    if dir is None:
        return Restore(uri, info, fresh=True, client=client, socket=socket)
    target = os.path.abspath(os.fspath(dir))
    try:
        info["linked"] = max(info.get("linked", 0) - _place(info["dir"], target), 0)
    finally:
        _unstage(client, socket, Path(info["dir"]))  # emptied by _place
    info["dir"] = target
    return Restore(uri, info, fresh=False)


def _place(src: str, dst: str) -> int:
    """Move the files under ``src`` to the same paths under ``dst``; return
    how many were copied (another filesystem). An existing path in ``dst``
    is an error before anything moves. What is left of ``src`` is removed,
    also on error."""
    try:
        return _place_files(src, dst)
    finally:
        shutil.rmtree(src, ignore_errors=True)


def _place_files(src: str, dst: str) -> int:
    files = []
    for top, _, names in os.walk(src):
        for n in names:
            rel = os.path.relpath(os.path.join(top, n), src)
            if os.path.lexists(os.path.join(dst, rel)):
                raise FileExistsError(f"cacheagent: {os.path.join(dst, rel)} exists: nothing is overwritten")
            files.append(rel)
    copied = 0
    for rel in files:
        a, b = os.path.join(src, rel), os.path.join(dst, rel)
        os.makedirs(os.path.dirname(b), exist_ok=True)
        try:
            os.rename(a, b)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.EACCES, errno.EPERM):
                raise
            shutil.copyfile(a, b)
            fd = os.open(b, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            copied += 1
    return copied
