#!/usr/bin/env python3
"""Writes token datasets with numpy, as nanoGPT, llm.c and Megatron-LM's
builder write them, and the windows numpy reads back from them.

usage: token_datasets.py OUTDIR SEQ_LEN

OUTDIR/raw/shard-{0..3}.bin        headerless uint16 (nanoGPT train.bin)
OUTDIR/llmc/shard-{0,1}.bin        llm.c shards (uint16, magic 20240520)
OUTDIR/megatron/shard-{0,1}.{bin,idx}  Megatron indexed datasets (uint16);
                                   shard 1's .bin holds its sequences in
                                   reverse order with junk between them
OUTDIR/expect.json                 {name: [window k for every k]}: window k is
                                   stream[k*L : k*L+L+1] of the shards'
                                   token streams concatenated in order
"""
import json
import os
import struct
import sys

import numpy as np

out, L = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(7)


def tokens(n):
    return rng.integers(0, 50257, size=n, dtype=np.uint16)


def windows(stream):
    return [stream[k * L:k * L + L + 1].tolist() for k in range((len(stream) - 1) // L)]


expect = {}

os.makedirs(f"{out}/raw")
parts = []
for i, n in enumerate([500, 7, 40, 333]):
    t = tokens(n)
    t.tofile(f"{out}/raw/shard-{i}.bin")
    parts.append(np.fromfile(f"{out}/raw/shard-{i}.bin", dtype=np.uint16))
expect["raw"] = windows(np.concatenate(parts))

os.makedirs(f"{out}/llmc")
parts = []
for i, n in enumerate([300, 211]):
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, n
    with open(f"{out}/llmc/shard-{i}.bin", "wb") as f:
        f.write(header.tobytes())
        f.write(tokens(n).tobytes())
    parts.append(np.memmap(f"{out}/llmc/shard-{i}.bin", dtype=np.uint16, mode="r", offset=1024))
expect["llmc"] = windows(np.concatenate(parts))

os.makedirs(f"{out}/megatron")
parts = []
for i, docs in enumerate([[[12, 30], [5], [61, 2, 9]], [[40], [3, 17], [25]]]):
    lengths = [n for d in docs for n in d]
    seqs = [tokens(n) for n in lengths]
    order = list(range(len(seqs))) if i == 0 else list(reversed(range(len(seqs))))
    pointers = [0] * len(seqs)
    with open(f"{out}/megatron/shard-{i}.bin", "wb") as f:
        for j in order:
            if i == 1:
                f.write(b"\xff\xff" * 3)  # junk no sequence points at
            pointers[j] = f.tell()
            f.write(seqs[j].tobytes())
    doc_idx = [0]
    for d in docs:
        doc_idx.append(doc_idx[-1] + len(d))
    with open(f"{out}/megatron/shard-{i}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", 8))  # uint16
        f.write(struct.pack("<Q", len(seqs)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(np.array(lengths, dtype=np.int32).tobytes(order="C"))
        f.write(np.array(pointers, dtype=np.int64).tobytes(order="C"))
        f.write(np.array(doc_idx, dtype=np.int64).tobytes(order="C"))
    # Read back as Megatron's _MMapBinReader does.
    idx = open(f"{out}/megatron/shard-{i}.idx", "rb").read()
    s = struct.unpack("<Q", idx[18:26])[0]
    lens = np.frombuffer(idx, dtype=np.int32, count=s, offset=34)
    ptrs = np.frombuffer(idx, dtype=np.int64, count=s, offset=34 + 4 * s)
    bin_ = np.memmap(f"{out}/megatron/shard-{i}.bin", dtype=np.uint8, mode="r")
    for n, p in zip(lens, ptrs):
        parts.append(np.frombuffer(bin_, dtype=np.uint16, count=int(n), offset=int(p)))
expect["megatron"] = windows(np.concatenate(parts))

with open(f"{out}/expect.json", "w") as f:
    json.dump(expect, f)
