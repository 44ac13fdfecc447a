"""Exceptions raised by the cacheagent client.

Every error the daemon answers with is an :class:`CacheagentError` whose
subclass stands for the daemon's error code (``control/errors.go``'s
``Code*`` constants; a loader session's data socket has its own codes,
``loader/ring``'s, which map to :class:`ProtocolError`, :class:`LoaderError`,
:class:`InvalidRequest` and :class:`InternalError`) and whose message is the
daemon's own. Problems reaching the daemon are
:class:`DaemonUnavailable` (and :class:`DaemonNotRunning` when nothing
listens on the socket); a call that takes longer than its timeout raises
:class:`DaemonTimeout`.
"""

from __future__ import annotations

import json
from typing import Dict, Optional, Type

__all__ = [
    "CacheagentError",
    "NotFound",
    "InvalidName",
    "ChecksumError",
    "NoSpace",
    "NoShm",
    "ResourceNotFound",
    "InvalidRequest",
    "DaemonUnavailable",
    "DaemonNotRunning",
    "DaemonTimeout",
    "SessionEnded",
    "NoFleet",
    "Conflict",
    "PermissionDenied",
    "CheckpointFailed",
    "LoaderError",
    "ProtocolError",
    "InternalError",
    "ClientClosed",
    "error_for",
    "from_answer",
]


class CacheagentError(Exception):
    """Base class of every cacheagent client error.

    Attributes:
        message: the daemon's description (or the client's, for errors
            raised before an answer came).
        code: the daemon's error code (``"object_not_found"``, ...), or
            ``None`` for errors the client raises itself.
        status: the HTTP status of the daemon's answer, or ``None``.
    """

    code: Optional[str] = None

    def __init__(self, message: str, *, code: Optional[str] = None, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = status

    def __str__(self) -> str:
        return self.message


class NotFound(CacheagentError):
    """The object does not exist at the source (code ``object_not_found``)."""

    code = "object_not_found"


class InvalidName(CacheagentError):
    """The bucket or object name is not valid (code ``invalid_name``)."""

    code = "invalid_name"


class ChecksumError(CacheagentError):
    """The downloaded bytes did not match the object's CRC32C (code ``checksum``)."""

    code = "checksum"


class NoSpace(CacheagentError):
    """The cache has no room: what is pinned or in use fills it (code ``no_space``)."""

    code = "no_space"


class NoShm(CacheagentError):
    """The daemon has no shm tier (code ``no_shm``)."""

    code = "no_shm"


class ResourceNotFound(CacheagentError):
    """A job, plan, session or lease does not exist (code ``not_found``).

    Objects that do not exist raise :class:`NotFound` instead.
    """

    code = "not_found"


class InvalidRequest(CacheagentError):
    """The daemon refused a malformed request (code ``invalid``)."""

    code = "invalid"


class DaemonUnavailable(CacheagentError):
    """The daemon cannot serve: it is shutting down or the connection
    failed (code ``unavailable``)."""

    code = "unavailable"


class DaemonNotRunning(DaemonUnavailable):
    """Nothing listens on the control socket (it is missing, or the
    connection is refused).

    Attributes:
        socket: the socket path tried.
    """

    def __init__(self, socket: str, reason: str) -> None:
        super().__init__(f"no cacheagent daemon answers on {socket}: {reason} (is `cacheagent serve` running?)")
        self.socket = socket


class DaemonTimeout(CacheagentError):
    """The daemon did not answer within the call's timeout, or gave up
    waiting within the timeout the request set (code ``timeout``)."""

    code = "timeout"


class SessionEnded(CacheagentError):
    """The lease session is over, its leases are void (code ``session_ended``)."""

    code = "session_ended"


class NoFleet(CacheagentError):
    """The daemon runs without a ``fleet:`` section (one node), so it has no
    fleet to show (code ``no_fleet``)."""

    code = "no_fleet"


class Conflict(CacheagentError):
    """A checkpoint's prefix is taken: a checkpoint is committed there,
    another save owns it, or its objects no longer match its manifest (code
    ``conflict``)."""

    code = "conflict"


class PermissionDenied(CacheagentError):
    """The daemon refused to use a directory or file for this caller: it
    belongs to another user (code ``permission``)."""

    code = "permission"


class CheckpointFailed(CacheagentError):
    """A checkpoint save failed for good (a file changed after it was
    saved, another save won the prefix): nothing of it is committed (code
    ``checkpoint_failed``)."""

    code = "checkpoint_failed"


class LoaderError(CacheagentError):
    """A loader session's loader failed (a shard could not be read or did
    not decode, a batch outgrew its buffer): no more batches come and the
    session is over (the data socket's code 2, ``loader``)."""

    code = "loader"


class ProtocolError(CacheagentError):
    """The daemon and this client disagree on a loader session's data
    socket protocol (a malformed or unexpected message, a slot that does not
    hold the batch announced): the session is over (the data socket's code
    1, ``protocol``)."""

    code = "protocol"


class InternalError(CacheagentError):
    """Any other daemon error (code ``internal`` or a code this client
    does not know)."""

    code = "internal"


class ClientClosed(CacheagentError):
    """The client (or the plan or lease) was used after ``close()``."""


def _by_code(*classes: Type[CacheagentError]) -> Dict[str, Type[CacheagentError]]:
    out: Dict[str, Type[CacheagentError]] = {}
    for cls in classes:
        if cls.code is None or cls.code in out:  # pragma: no cover - a bug in the table below
            raise TypeError(f"{cls.__name__}: no code of its own")
        out[cls.code] = cls
    return out


# The classes of the control API's error codes (control/errors.go).
_BY_CODE = _by_code(NotFound, InvalidName, ChecksumError, NoSpace, NoShm, ResourceNotFound, InvalidRequest,
                    DaemonUnavailable, SessionEnded, NoFleet, Conflict, PermissionDenied, CheckpointFailed,
                    DaemonTimeout, InternalError)


def error_for(code: Optional[str], message: str, status: Optional[int] = None) -> CacheagentError:
    """Return the exception for a daemon error answer: the class of its
    code (:class:`InternalError` for unknown codes), carrying the daemon's
    message and code."""
    cls = _BY_CODE.get(code or "", InternalError)
    return cls(message, code=code or "internal", status=status)


def from_answer(status: int, reason: str, body: bytes) -> CacheagentError:
    """Return the exception for a daemon's error answer: its ErrorBody
    ``{error, code}`` through :func:`error_for`, or an InternalError
    quoting a body that is not one."""
    try:
        d = json.loads(body)
        msg, code = d["error"], d.get("code")
        if not isinstance(msg, str) or not msg or not (code is None or isinstance(code, str)):
            raise ValueError(msg)
    except (ValueError, KeyError, TypeError):
        return InternalError(f"cacheagent daemon: {status} {reason}: {body[:200]!r}", status=status)
    return error_for(code, msg, status)
