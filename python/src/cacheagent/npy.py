"""A reader of the ``.npy`` format that builds arrays over a buffer.

:func:`parse_header` reads the header itself (magic, version 1, 2 or 3,
the header dict through :func:`ast.literal_eval`) and checks it against the
buffer's size; :func:`array_view` returns a numpy array that views the
buffer's bytes (read-only when the buffer is, e.g. a ``PROT_READ`` mmap),
with no copy. numpy is imported when first needed.
"""

from __future__ import annotations

import ast
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Tuple, Union

if TYPE_CHECKING:  # pragma: no cover
    import mmap

    import numpy as np

__all__ = ["MAGIC", "NpyHeader", "parse_header", "array_view"]

MAGIC = b"\x93NUMPY"
# numpy itself refuses headers over 10,000 bytes by default (literal_eval
# of untrusted input); files it writes stay far below this.
_MAX_HEADER = 1 << 20

Buffer = Union[bytes, bytearray, memoryview, "mmap.mmap"]


@dataclass(frozen=True)
class NpyHeader:
    """A parsed ``.npy`` header.

    Attributes:
        dtype: the array's numpy dtype.
        fortran_order: whether the data is in column-major order.
        shape: the array's shape.
        data_offset: where the data starts in the file.
        version: the format version (major, minor).
    """

    dtype: "np.dtype[Any]"
    fortran_order: bool
    shape: Tuple[int, ...]
    data_offset: int
    version: Tuple[int, int]

    @property
    def nbytes(self) -> int:
        """The size of the data in bytes."""
        n = self.dtype.itemsize
        for d in self.shape:
            n *= d
        return n


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("cacheagent: reading .npy arrays needs numpy (apt-get install python3-numpy, "
                          "or pip install 'cacheagent[numpy]')") from e
    return numpy


def parse_header(buf: Buffer) -> NpyHeader:
    """Parse the header of the ``.npy`` file in ``buf``.

    Raises ValueError if ``buf`` is not a well-formed ``.npy`` file whose
    data fits in it, or holds Python objects (which cannot be mapped).
    """
    np = _numpy()
    mv = memoryview(buf).cast("B")
    if len(mv) < 10 or bytes(mv[:6]) != MAGIC:
        raise ValueError("not a .npy file (too short, or bad magic)")
    major, minor = mv[6], mv[7]
    if major == 1:
        (hlen,), start = struct.unpack_from("<H", mv, 8), 10
    elif major in (2, 3):
        if len(mv) < 12:
            raise ValueError(".npy header truncated")
        (hlen,), start = struct.unpack_from("<I", mv, 8), 12
    else:
        raise ValueError(f"unsupported .npy format version {major}.{minor}")
    if hlen > _MAX_HEADER or start + hlen > len(mv):
        raise ValueError(f".npy header of {hlen} bytes does not fit (file of {len(mv)} bytes)")
    encoding = "utf-8" if major == 3 else "latin1"
    try:
        d = ast.literal_eval(bytes(mv[start:start + hlen]).decode(encoding))
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError) as e:
        raise ValueError(f".npy header does not parse: {e}") from None
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        raise ValueError(f".npy header is not a dict of descr, fortran_order and shape: {d!r:.200}")
    shape, fortran = d["shape"], d["fortran_order"]
    if not isinstance(shape, tuple) or not all(type(x) is int and x >= 0 for x in shape):
        raise ValueError(f".npy shape {shape!r:.100} is not a tuple of non-negative ints")
    if not isinstance(fortran, bool):
        raise ValueError(f".npy fortran_order {fortran!r:.100} is not a bool")
    try:
        dtype = _dtype(np, d["descr"])
    except (TypeError, ValueError) as e:
        raise ValueError(f".npy descr {d['descr']!r:.100} is not a dtype: {e}") from None
    if dtype.hasobject:
        raise ValueError(".npy file holds Python objects, which cannot be mapped")
    h = NpyHeader(dtype, fortran, shape, start + hlen, (major, minor))
    if h.data_offset + h.nbytes > len(mv):
        raise ValueError(f".npy data of {h.nbytes} bytes at offset {h.data_offset} "
                         f"does not fit in {len(mv)} bytes")
    return h


def _dtype(np: Any, descr: Any) -> "np.dtype[Any]":
    # numpy's own conversion of a descr (structured ones included), when it
    # has one; a plain string or list descr otherwise.
    try:
        from numpy.lib.format import descr_to_dtype
    except ImportError:  # pragma: no cover - very old numpy
        return np.dtype(descr)
    return descr_to_dtype(descr)


def array_view(buf: Buffer, header: "NpyHeader | None" = None) -> "np.ndarray[Any, Any]":
    """Return the array of the ``.npy`` file in ``buf`` as a view of its
    bytes (no copy). It is read-only when ``buf`` is, and keeps ``buf``
    alive."""
    np = _numpy()
    h = header if header is not None else parse_header(buf)
    return np.ndarray(h.shape, dtype=h.dtype, buffer=buf, offset=h.data_offset,
                      order="F" if h.fortran_order else "C")
