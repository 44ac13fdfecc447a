#!/usr/bin/env python3
"""Checks what `cacheagent loader dump` wrote against what numpy and Python's
tarfile read from the same files.

usage: check_dump.py tokens OUT IDS EXPECT NAME SEQ_LEN
       check_dump.py webdataset OUT IDS TAR_DIR

OUT     the dump directory (batch-00000.ids.npy, …)
IDS     the output of `cacheagent loader ids` with the same flags: one batch
        of ids per line; every batch in OUT must be the next line
EXPECT  token_datasets.py's expect.json; NAME its dataset (window k of it is
        EXPECT[NAME][k])
TAR_DIR the WebDataset shards, shard-*.tar, read with tarfile; sample ids
        number the samples of the shards in order

Exits non-zero, saying what differs, at the first difference.
"""
import glob
import json
import os
import sys
import tarfile

import numpy as np


def batches(out, ids_path):
    """Yields (base path, ids) of every dumped batch, checking the ids."""
    lines = [[int(x) for x in line.split()] for line in open(ids_path).read().strip().split("\n")]
    n = len(glob.glob(f"{out}/batch-*.ids.npy"))
    assert 0 < n <= len(lines), f"{n} dumped batches, `loader ids` gives {len(lines)}"
    for i in range(n):
        base = f"{out}/batch-{i:05d}"
        ids = np.load(f"{base}.ids.npy")
        assert ids.dtype == np.int64 and ids.ndim == 1, (base, ids.dtype, ids.shape)
        assert ids.tolist() == lines[i], (base, ids.tolist(), lines[i])
        yield base, ids.tolist()


def tar_samples(tar_dir):
    """Returns every sample of the shards, in order, as {field: bytes}."""
    samples = []
    for path in sorted(glob.glob(f"{tar_dir}/shard-*.tar")):
        with tarfile.open(path) as tar:
            last = None
            for m in tar.getmembers():
                if not m.isfile():
                    continue
                key, field = os.path.basename(m.name).split(".", 1)
                key = os.path.join(os.path.dirname(m.name), key)
                if key != last:
                    samples.append({})
                    last = key
                samples[-1][field] = tar.extractfile(m).read()
    return samples


def check_tokens(out, ids_path, expect_path, name, L):
    want = json.load(open(expect_path))[name]
    for base, ids in batches(out, ids_path):
        tok = np.load(f"{base}.tokens.npy")
        assert tok.dtype == np.uint16 and tok.shape == (len(ids), L + 1), (base, tok.dtype, tok.shape)
        for k, w in enumerate(ids):
            assert tok[k].tolist() == want[w], (base, k, w, tok[k].tolist(), want[w])


def check_webdataset(out, ids_path, tar_dir):
    samples = tar_samples(tar_dir)
    fields = sorted({f for s in samples for f in s})
    for base, ids in batches(out, ids_path):
        dumped = sorted(os.path.basename(p)[len("batch-00000."):-len(".offsets.npy")]
                        for p in glob.glob(f"{base}.*.offsets.npy"))
        assert dumped == fields, (base, dumped, fields)
        for f in fields:
            offs = np.load(f"{base}.{f}.offsets.npy")
            data = np.load(f"{base}.{f}.data.npy")
            assert offs.dtype == np.int64 and offs.shape == (len(ids) + 1,), (base, f, offs.dtype, offs.shape)
            assert data.dtype == np.uint8 and data.ndim == 1 and offs[0] == 0 and offs[-1] == len(data), \
                (base, f, data.dtype, data.shape, offs.tolist())
            for k, w in enumerate(ids):
                got = data[offs[k]:offs[k + 1]].tobytes()
                assert got == samples[w].get(f, b""), (base, f, k, w, got, samples[w].get(f))


mode = sys.argv[1]
if mode == "tokens":
    check_tokens(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
elif mode == "webdataset":
    check_webdataset(sys.argv[2], sys.argv[3], sys.argv[4])
else:
    sys.exit(f"unknown mode {mode}")
print("ok")
