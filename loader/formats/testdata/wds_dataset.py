#!/usr/bin/env python3
"""Writes WebDataset tar shards with Python's tarfile and what tarfile reads
back from them.

usage: wds_dataset.py OUTDIR

OUTDIR/shard-{0,1,2}.tar   samples with fields txt, json and (some) bin
OUTDIR/expect.json         [{"key", "fields": {name: hex}}] for every sample
                           of every shard, in order
"""
import io
import json
import os
import sys
import tarfile

out = sys.argv[1]
os.makedirs(out)
formats = [tarfile.USTAR_FORMAT, tarfile.PAX_FORMAT, tarfile.GNU_FORMAT]
expect = []
n = 0
for s, count in enumerate([5, 1, 7]):
    path = f"{out}/shard-{s}.tar"
    with tarfile.open(path, "w", format=formats[s]) as tar:
        for i in range(count):
            key = f"sample{n:06d}"
            fields = {"txt": f"text of {n}".encode(), "json": json.dumps({"n": n}).encode()}
            if n % 3 == 0:
                fields["bin"] = bytes(range(n % 256)) * 3
            for name, data in fields.items():
                info = tarfile.TarInfo(f"{key}.{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            n += 1
    with tarfile.open(path) as tar:
        samples = []
        for m in tar.getmembers():
            key, field = m.name.split(".", 1)
            if not samples or samples[-1]["key"] != key:
                samples.append({"key": key, "fields": {}})
            samples[-1]["fields"][field] = tar.extractfile(m).read().hex()
        expect.extend(samples)
with open(f"{out}/expect.json", "w") as f:
    json.dump(expect, f)
