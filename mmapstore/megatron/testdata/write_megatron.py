#!/usr/bin/python3
"""Write Megatron-LM indexed datasets (.idx/.bin) and expect.json.

Usage: write_megatron.py OUTDIR

The Builder below lays files out as Megatron-LM's IndexedDatasetBuilder
does (megatron/core/datasets/indexed_dataset.py): add_item appends one
sequence, end_document closes a document, and finalize writes the index:
magic, version 1, dtype code, sequence count, document index length,
int32 lengths, int64 byte pointers, int64 document index (starting with 0,
one entry per end_document), and, for multimodal datasets, int8 modes.
expect.json records what numpy reads back from the files.
"""
import json
import os
import struct
import sys

import numpy as np

CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5,
         np.float64: 6, np.float32: 7, np.uint16: 8}


class Builder:
    def __init__(self, prefix, dtype, multimodal=False):
        self.prefix = prefix
        self.dtype = dtype
        self.bin = open(prefix + ".bin", "wb")
        self.lengths = []
        self.documents = [0]
        self.modes = [] if multimodal else None

    def add_item(self, tokens, mode=0):
        arr = np.array(tokens, dtype=self.dtype)
        self.bin.write(arr.tobytes(order="C"))
        self.lengths.append(arr.size)
        if self.modes is not None:
            self.modes.append(mode)

    def end_document(self):
        self.documents.append(len(self.lengths))

    def finalize(self):
        self.bin.close()
        itemsize = np.dtype(self.dtype).itemsize
        pointers, cur = [], 0
        for n in self.lengths:
            pointers.append(cur)
            cur += n * itemsize
        with open(self.prefix + ".idx", "wb") as f:
            f.write(b"MMIDIDX\x00\x00")
            f.write(struct.pack("<Q", 1))
            f.write(struct.pack("<B", CODES[self.dtype]))
            f.write(struct.pack("<Q", len(self.lengths)))
            f.write(struct.pack("<Q", len(self.documents)))
            f.write(np.array(self.lengths, dtype=np.int32).tobytes(order="C"))
            f.write(np.array(pointers, dtype=np.int64).tobytes(order="C"))
            f.write(np.array(self.documents, dtype=np.int64).tobytes(order="C"))
            if self.modes is not None:
                f.write(np.array(self.modes, dtype=np.int8).tobytes(order="C"))


def read_back(prefix):
    """What numpy reads from the files, as Megatron's reader would."""
    idx = np.memmap(prefix + ".idx", mode="r", dtype=np.uint8)
    raw = bytes(idx)
    assert raw[:9] == b"MMIDIDX\x00\x00"
    code = raw[17]
    dtype = {v: k for k, v in CODES.items()}[code]
    s, d = struct.unpack("<QQ", raw[18:34])
    lengths = np.frombuffer(raw, dtype=np.int32, count=s, offset=34)
    pointers = np.frombuffer(raw, dtype=np.int64, count=s, offset=34 + 4 * s)
    docs = np.frombuffer(raw, dtype=np.int64, count=d, offset=34 + 12 * s)
    rest = len(raw) - (34 + 12 * s + 8 * d)
    modes = None
    if rest:
        modes = np.frombuffer(raw, dtype=np.int8, count=s, offset=34 + 12 * s + 8 * d)
    bin_ = np.memmap(prefix + ".bin", mode="r", dtype=dtype)
    itemsize = np.dtype(dtype).itemsize
    seqs = []
    for n, p in zip(lengths, pointers):
        toks = np.frombuffer(bin_, dtype=dtype, count=int(n), offset=int(p))
        seqs.append({"pointer": int(p), "tokens": toks.tolist()})
    documents = []
    for j in range(d - 1):
        first, end = int(docs[j]), int(docs[j + 1])
        toks = [t for q in seqs[first:end] for t in q["tokens"]]
        documents.append({"first": first, "end": end, "tokens": toks})
    return {
        "name": os.path.basename(prefix),
        "dtype": np.dtype(dtype).name,
        "itemsize": itemsize,
        "bin_size": os.path.getsize(prefix + ".bin"),
        "sequences": seqs,
        "documents": documents,
        "modes": None if modes is None else modes.tolist(),
        "total_tokens": int(lengths.sum()),
    }


def main(out):
    rng = np.random.default_rng(1234)
    specs = [("gpt_uint16", np.uint16, False, 50000),
             ("gpt_int32", np.int32, False, 2**31 - 1),
             ("multimodal_uint8", np.uint8, True, 255),
             ("float32_one_doc", np.float32, False, 1000)]
    expect = []
    for name, dtype, mm, hi in specs:
        b = Builder(os.path.join(out, name), dtype, multimodal=mm)
        ndocs = 1 if name.endswith("one_doc") else 5
        for doc in range(ndocs):
            for k in range(1 + doc % 3):  # documents of 1 to 3 sequences
                n = int(rng.integers(0, 9)) if (doc, k) != (1, 0) else 0
                toks = rng.integers(0, hi, size=n)
                if dtype == np.int32:
                    toks = toks * np.where(rng.random(n) < 0.5, -1, 1)
                b.add_item(toks, mode=(doc + k) % 3)
            b.end_document()
        if name == "gpt_uint16":
            b.end_document()  # an empty document
        b.finalize()
        expect.append(read_back(os.path.join(out, name)))
    with open(os.path.join(out, "expect.json"), "w") as f:
        json.dump(expect, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
