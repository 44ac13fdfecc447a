#!/usr/bin/python3
"""Writes the .safetensors test files of package safetensors, and
expect.json beside them.

The safetensors library has no Debian package, so this script follows the
format itself: an 8-byte little-endian header length, the JSON header
(padded with spaces to a multiple of 8 bytes unless asked not to, as the
reference writer does), then the tensors back to back, largest element
type first. Array bytes come from Debian's numpy:

    /usr/bin/python3 mmapstore/safetensors/testdata/gen.py

Every tensor holds values the Go test recomputes from the flat index k:
(k + add) * mul for integers and floats, k % 3 == 0 for BOOL.
"""

import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# safetensors dtype -> (numpy dtype, add, mul). BF16 is stored as the upper
# half of a float32; its values are exact in 8 bits of mantissa.
DTYPES = {
    "F64": ("<f8", -10, 0.125),
    "I64": ("<i8", -10, 10**12),
    "U64": ("<u8", 0, 7 * 10**17),
    "F32": ("<f4", -10, 0.25),
    "I32": ("<i4", -10, 100000),
    "U32": ("<u4", 0, 100000000),
    "F16": ("<f2", -10, 0.5),
    "BF16": ("<f4", -10, 0.5),
    "I16": ("<i2", -10, 1000),
    "U16": ("<u2", 0, 2000),
    "I8": ("|i1", -10, 5),
    "U8": ("|u1", 0, 10),
    "BOOL": ("|b1", 0, 1),
}


def tensor_bytes(dtype, shape):
    npdtype, add, mul = DTYPES[dtype]
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == "BOOL":
        vals = [k % 3 == 0 for k in range(n)]
    else:
        vals = [(k + add) * mul for k in range(n)]
    arr = np.array(vals, dtype=npdtype)
    if dtype == "BF16":
        return (arr.view("<u4") >> 16).astype("<u2").tobytes()
    return arr.tobytes()


def write(name, tensors, metadata=None, pad=True):
    """Writes tensors, a list of (name, dtype, shape), and returns the
    expectation for the file."""
    order = sorted(tensors, key=lambda t: (-np.dtype(DTYPES[t[1]][0]).itemsize, t[0]))
    header, blobs, expect, offset = {}, [], [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for tname, dtype, shape in order:
        blob = tensor_bytes(dtype, shape)
        header[tname] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        _, add, mul = DTYPES[dtype]
        expect.append({"name": tname, "dtype": dtype, "shape": list(shape),
                       "begin": offset, "end": offset + len(blob), "add": add, "mul": mul})
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return {"file": name, "metadata": metadata, "data_offset": 8 + len(text), "tensors": expect}


def main():
    for old in os.listdir(HERE):
        if old.endswith(".safetensors"):
            os.remove(os.path.join(HERE, old))
    shapes = [(2, 3), (3, 4), (5,), (2, 2), (2, 3, 4), (4,), (1, 3), (3, 1)]
    every = [(f"t.{d.lower()}", d, shapes[i % len(shapes)]) for i, d in enumerate(DTYPES)]
    every += [("scalar", "F32", ()), ("empty", "I32", (0, 3)), ("empty.rows", "U8", (2, 0))]
    cases = [
        write("all_dtypes.safetensors", every, {"format": "pt", "note": "caf\u00e9 \u03bb"}),
        write("no_metadata.safetensors", [("weight", "F32", (3, 4)), ("bias", "F32", (4,))]),
        write("empty.safetensors", []),
        write("only_metadata.safetensors", [], {"format": "np"}),
        write("unaligned.safetensors", [("w", "F32", (2, 3))], pad=False),
    ]
    with open(os.path.join(HERE, "expect.json"), "w") as f:
        lines = (json.dumps(c, ensure_ascii=False) for c in cases)
        f.write("[\n" + ",\n".join(lines) + "\n]\n")


if __name__ == "__main__":
    main()
