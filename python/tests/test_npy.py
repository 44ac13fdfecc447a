"""The .npy reader agrees with numpy's and refuses malformed files with ValueError."""

import io
import struct

import pytest

from cacheagent import npy
from conftest import need


def _npy(a, version=None):
    from numpy.lib import format as fmt

    b = io.BytesIO()
    fmt.write_array(b, a, version=version)
    return b.getvalue()


def test_arrays_match_numpy():
    np = need("numpy")
    cases = [
        (np.arange(24, dtype=np.float32).reshape(2, 3, 4), None),
        (np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4)), None),
        (np.arange(5, dtype=">f8"), (2, 0)),
        (np.array(["ab", "cde"]), (3, 0)),
        (np.array(7, dtype=np.uint8), None),
        (np.zeros((0,), dtype=np.complex64), None),
        (np.array([(1, 2.5)], dtype=[("x", "<u2"), ("y", "<f4")]), None),
    ]
    for a, version in cases:
        data = _npy(a, version)
        want = np.load(io.BytesIO(data))
        got = npy.array_view(data)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.flags.f_contiguous == want.flags.f_contiguous or a.ndim < 2
        np.testing.assert_array_equal(got, want)
        assert not got.flags.writeable  # a view of bytes: read-only


def test_view_shares_memory():
    np = need("numpy")
    buf = bytearray(_npy(np.arange(10, dtype=np.int32)))
    v = npy.array_view(buf)
    buf[-4:] = struct.pack("<i", 99)
    assert v[-1] == 99


def _header(d: str, version=1, pad=True):
    h = d.encode("latin1")
    if version == 1:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h
    return b"\x93NUMPY" + bytes([version, 0]) + struct.pack("<I", len(h)) + h


@pytest.mark.parametrize("data", [
    b"",
    b"\x93NUMP",
    b"NOTNUMPY\x01\x00",
    b"\x93NUMPY\x04\x00\x00\x00\x00\x00",
    b"\x93NUMPY\x01\x00\xff\xff{}",  # header longer than the file
    b"\x93NUMPY\x02\x00\x00\x00",  # v2 length truncated
    _header("{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}"),  # no data
    _header("{'descr': '<f4', 'fortran_order': False}"),
    _header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}"),
    _header("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}") + b"\0" * 4,
    _header("{'descr': 'O', 'fortran_order': False, 'shape': (1,)}") + b"\0" * 8,
    _header("{'descr': 'nonsense', 'fortran_order': False, 'shape': (1,)}") + b"\0" * 8,
    _header("__import__('os').system('true')"),
    _header("[1, 2]"),
    _header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", version=2),
])
def test_malformed(data):
    need("numpy")
    with pytest.raises(ValueError):
        npy.parse_header(data)
