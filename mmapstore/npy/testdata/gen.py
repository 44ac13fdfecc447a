#!/usr/bin/python3
"""Writes the .npy test files of package npy, and expect.json beside them.

Run from anywhere with Debian's numpy (apt-get install python3-numpy):

    /usr/bin/python3 mmapstore/npy/testdata/gen.py

Every supported array holds values the Go test recomputes from the flat
C-order index k: (k + add) * mul for integers and floats, real (k + add) * mul
and imaginary k * mul for complex numbers, and k % 3 == 0 for bools.
"""

import io
import json
import os
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# typestr without byte order -> (add, mul). The values exercise signs, the
# high bit of unsigned types and every byte of 8-byte integers, and stay
# exact in every type.
PARAMS = {
    "b1": (0, 1),
    "i1": (-10, 5),
    "i2": (-10, 1000),
    "i4": (-10, 100000),
    "i8": (-10, 10**12),
    "u1": (0, 10),
    "u2": (0, 2000),
    "u4": (0, 100000000),
    "u8": (0, 7 * 10**17),
    "f2": (-10, 0.5),
    "f4": (-10, 0.25),
    "f8": (-10, 0.125),
    "c8": (-10, 0.5),
    "c16": (-10, 0.25),
}


def values(typestr, n):
    add, mul = PARAMS[typestr]
    kind = typestr[0]
    if kind == "b":
        return [k % 3 == 0 for k in range(n)]
    if kind == "c":
        return [complex((k + add) * mul, k * mul) for k in range(n)]
    return [(k + add) * mul for k in range(n)]


def data_offset(raw):
    """Returns the offset of the data section, from the header length."""
    major = raw[6]
    if major == 1:
        return 10 + int.from_bytes(raw[8:10], "little")
    return 12 + int.from_bytes(raw[8:12], "little")


def write(name, arr, version=None, allow_pickle=False):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=version, allow_pickle=allow_pickle)
    raw = buf.getvalue()
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(raw)
    return raw


def supported(typestr, order, shape, fortran=False, version=(1, 0)):
    """Writes one supported array and returns its expectation."""
    n = int(np.prod(shape))
    dt = np.dtype(order + typestr)
    arr = np.array(values(typestr, n), dtype=dt).reshape(shape)
    if fortran:
        arr = np.asfortranarray(arr)
    layout = "F" if fortran else "C"
    dims = "x".join(map(str, shape)) or "scalar"
    bo = {"<": "lt", ">": "be", "|": "na"}[order]
    name = f"{typestr}_{bo}_{dims}_{layout}_v{version[0]}.npy"
    raw = write(name, arr, version)
    add, mul = PARAMS[typestr]
    return {
        "file": name,
        "version": list(version),
        "descr": dt.str,
        "dtype": dt.name,
        "kind": typestr[0],
        "byte_order": {"<": "little", ">": "big", "|": "not applicable"}[dt.str[0]],
        "shape": list(arr.shape),
        "fortran": bool(arr.flags.f_contiguous and not arr.flags.c_contiguous),
        "strides": list(arr.strides),
        "data_offset": data_offset(raw),
        "add": add,
        "mul": mul,
    }


def unsupported(name, arr, allow_pickle=False, version=None):
    """Writes one array of an unsupported dtype and returns its expectation."""
    raw = write(name, arr, version, allow_pickle)
    descr = np.lib.format.dtype_to_descr(arr.dtype)
    return {
        "file": name,
        "version": [raw[6], raw[7]],
        "descr": descr if isinstance(descr, str) else repr(descr),
        "dtype": None,
        "shape": list(arr.shape),
        "fortran": False,
        "data_offset": data_offset(raw),
    }


def main():
    warnings.filterwarnings("ignore", "Stored array in format 3.0")
    for old in os.listdir(HERE):
        if old.endswith(".npy"):
            os.remove(os.path.join(HERE, old))
    cases = []
    # Every dtype in every byte order it has.
    for typestr in PARAMS:
        orders = "|" if typestr in ("b1", "i1", "u1") else "<>"
        for order in orders:
            cases.append(supported(typestr, order, (3, 4)))
    # Shapes, in C and Fortran order.
    for shape in [(), (0,), (5,), (2, 3, 4), (0, 3), (3, 0), (4, 1)]:
        cases.append(supported("f4", "<", shape))
    for shape in [(3, 4), (2, 3, 4)]:
        cases.append(supported("f4", "<", shape, fortran=True))
    cases.append(supported("i2", ">", (2, 3, 4), fortran=True))
    cases.append(supported("c16", "<", (3, 4), fortran=True))
    cases.append(supported("u1", "|", (2, 3, 4), fortran=True))
    # Format versions.
    for version in [(1, 0), (2, 0), (3, 0)]:
        cases.append(supported("f8", "<", (5,), version=version))
    cases.append(supported("i4", "<", (2, 3, 4), fortran=True, version=(2, 0)))
    cases.append(supported("b1", "|", (3, 4), version=(3, 0)))
    cases.append(supported("f2", ">", (), version=(3, 0)))
    # Unsupported dtypes.
    cases.append(unsupported("struct.npy", np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")])))
    cases.append(unsupported("struct_subarray.npy", np.zeros(2, dtype=[("a", "<i4", (2,))])))
    cases.append(unsupported("struct_latin1_v1.npy", np.zeros(2, dtype=[("\u00e9", "<i2")])))
    cases.append(unsupported("struct_utf8_v3.npy", np.zeros(2, dtype=[("\u03bb", "<i2")])))
    cases.append(unsupported("object.npy", np.array([1, "a", None], dtype=object), allow_pickle=True))
    cases.append(unsupported("unicode.npy", np.array(["ab", "c"])))
    cases.append(unsupported("bytes.npy", np.array([b"abc", b"d"])))
    cases.append(unsupported("datetime.npy", np.array(["2024-01-01"], dtype="<M8[ns]")))
    cases.append(unsupported("void.npy", np.zeros(2, dtype="V4")))
    cases.append(unsupported("longdouble.npy", np.zeros((2, 2), dtype=np.longdouble)))
    with open(os.path.join(HERE, "expect.json"), "w") as f:
        lines = (json.dumps(c, ensure_ascii=False) for c in cases)
        f.write("[\n" + ",\n".join(lines) + "\n]\n")


if __name__ == "__main__":
    main()
