"""The loader session's wire protocol and slot layout.

The Go package ``loader/ring`` (``doc.go``) defines them: fixed little-endian
messages on the data socket, and slots of a 64-byte header and 96-byte array
descriptors in the ring. These are their Python ``struct`` forms.
"""

from __future__ import annotations

import struct
from typing import Dict, Type

from . import errors
from .errors import InternalError, InvalidRequest, LoaderError, ProtocolError

PROTOCOL = 1
MAGIC = 0x31475243  # "CRG1"
_MAX_MESSAGE = 4096

# Messages (loader/ring/doc.go).
T_HELLO, T_RELEASE, T_STATE, T_SEEK = 1, 2, 3, 4
T_WELCOME, T_READY, T_EPOCH_END, T_END, T_STATE_IS, T_ERROR = 101, 102, 103, 104, 105, 106
_HELLO = struct.Struct("<II32s32s")
_RELEASE = struct.Struct("<IIQ")
_STATE = struct.Struct("<I4x")
_SEEK = struct.Struct("<I4xqq")
_WELCOME = struct.Struct("<IIQQII")
_READY = struct.Struct("<IIQqqII")
_EPOCH_END = struct.Struct("<I4xqq")
_END = struct.Struct("<I4xqq")
_STATE_IS = struct.Struct("<I4xqqQ")
_ERROR = struct.Struct("<II")
_TYPE = struct.Struct("<I")
# Slot layout.
_HEADER = struct.Struct("<IHHQqqIIQ16x")
_DESC = struct.Struct("<HBx12s8qQQ")
_DESC_OFF = 64
STATE_READY = 2

# Data-socket error codes (loader/ring's Code* constants) and the class each
# one raises here; tests/test_errors.py checks them against the Go source.
CODE_PROTOCOL, CODE_LOADER, CODE_REFUSED, CODE_INTERNAL = 1, 2, 3, 4
RING_ERRORS: Dict[int, Type[errors.CacheagentError]] = {
    CODE_PROTOCOL: ProtocolError,  # the daemon ends the session
    CODE_LOADER: LoaderError,  # no more batches come
    CODE_REFUSED: InvalidRequest,  # a Seek or Hello refused; the session goes on
    CODE_INTERNAL: InternalError,  # the session ends
}


def _ring_error(code: int, text: str) -> errors.CacheagentError:
    """The exception for a data-socket Error message (InternalError, code
    ``internal``, for a code this client does not know)."""
    cls = RING_ERRORS.get(code, InternalError)
    if cls is ProtocolError:
        text = f"protocol error: {text}"
    return cls(f"cacheagent loader: {text}", code=cls.code)
