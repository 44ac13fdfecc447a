#!/usr/bin/python3
"""Write token files and expect.json.

Usage: write_tokens.py OUTDIR

Writes a nanoGPT-style train.bin (raw uint16, as nanoGPT's prepare.py
writes it with np.memmap), an OLMo-style raw uint32 file, and two llm.c
shards as llm.c's dev/data/data_common.py write_datafile lays them out: a
header of 256 int32 (magic, version, token count) and the tokens after it,
uint16 with magic 20240520 and version 1, uint32 with magic 20240801 and
version 7. expect.json records what numpy reads back.
"""
import json
import os
import sys

import numpy as np


def write_raw(path, toks, dtype):
    arr = np.memmap(path, dtype=dtype, mode="w+", shape=(len(toks),))
    arr[:] = toks
    arr.flush()
    del arr


def write_llmc(path, toks, magic, version, dtype):
    header = np.zeros(256, dtype=np.int32)
    header[0] = magic
    header[1] = version
    header[2] = len(toks)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.array(toks, dtype=dtype).tobytes())


def main(out):
    rng = np.random.default_rng(7)
    gpt2 = rng.integers(0, 50257, size=300)
    llama = rng.integers(0, 128256, size=200)
    files = [
        ("train.bin", "raw", np.uint16, gpt2),
        ("olmo_uint32.bin", "raw", np.uint32, llama),
        ("empty.bin", "raw", np.uint16, gpt2[:0]),
        ("gpt2_000001.bin", "llmc", np.uint16, gpt2[:16]),
        ("llama3_000001.bin", "llmc", np.uint32, llama[:12]),
    ]
    expect = []
    for name, fmt, dtype, toks in files:
        path = os.path.join(out, name)
        if fmt == "raw":
            if len(toks):
                write_raw(path, toks, dtype)
            else:
                open(path, "wb").close()
            offset, version = 0, 0
            got = np.fromfile(path, dtype=dtype)
        else:
            magic, version = (20240520, 1) if dtype == np.uint16 else (20240801, 7)
            write_llmc(path, toks, magic, version, dtype)
            header = np.fromfile(path, dtype=np.int32, count=256)
            assert header[0] == magic and header[1] == version
            offset = 256 * 4
            got = np.fromfile(path, dtype=dtype, offset=offset)
            assert len(got) == header[2]
        expect.append({"file": name, "format": fmt, "dtype": np.dtype(dtype).name,
                       "offset": offset, "version": version, "tokens": got.tolist()})
    with open(os.path.join(out, "expect.json"), "w") as f:
        json.dump(expect, f)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
