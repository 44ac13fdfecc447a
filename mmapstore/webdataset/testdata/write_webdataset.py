#!/usr/bin/python3
"""Write WebDataset tar shards with Python's tarfile, and expect.json.

Usage: write_webdataset.py OUTDIR

Writes the same members in pax, GNU and ustar formats: samples of
jpg (random bytes), cls and json members, a sample in a subdirectory, a
sample with a path over 100 characters (a pax 'x' header or a GNU 'L'
entry; in ustar format a name split into prefix and name), a directory
entry, a member with no extension and metadata members; and two small
shards of one long-named member (pax and GNU). expect.json
records what tarfile reads back (TarInfo.offset_data and size for every
regular file) and the samples WebDataset would form, grouped here with
WebDataset's own rule (the regex of webdataset's base_plus_ext and the
consecutive grouping of group_by_keys, without lower-casing).
"""
import io
import json
import os
import random
import re
import sys
import tarfile

KEY_RE = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
META_RE = re.compile(r"__[^/]*__($|/)")


def entries(rng):
    out = []
    for i in range(4):
        key = "%06d" % i
        out.append((key + ".jpg", rng.randbytes(rng.choice([0, 1, 511, 512, 513, 1025]))))
        out.append((key + ".cls", str(i % 3).encode()))
        out.append((key + ".json", json.dumps({"i": i}).encode()))
    out.append(("__meta__.json", b"{}"))  # a sample: its key is __meta__
    out.append(("__meta__/info.json", b"{}"))  # metadata, in no sample
    out.append(("README", b"no extension"))
    out.append(("train/", None))  # a directory
    out.append(("train/part_1/000004.seg.png", rng.randbytes(200)))
    out.append(("train/part_1/000004.jpg", rng.randbytes(30)))
    deep = "train/" + "very_long_directory_name_" * 5 + "/000005"
    out.append((deep + ".jpg", rng.randbytes(90)))
    out.append((deep + ".cls", b"2"))
    out.append(("000000.txt", b"the key of sample 0 again, not consecutive"))
    return out


def write(path, fmt, members):
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name.rstrip("/"))
            info.mtime = 1700000000
            info.uname = info.gname = "wds"
            if data is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            else:
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))


def expected(path):
    members = []
    with tarfile.open(path, "r") as tar:
        for info in tar:
            if info.isreg():
                members.append({"name": info.name, "offset": info.offset_data, "size": info.size})
    samples, fields = [], []
    for m in members:
        name = m["name"]
        if "/" not in name and name.startswith("__") and name.endswith("__"):
            continue
        if META_RE.match(name):
            continue
        match = KEY_RE.match(name)
        if not match:
            continue
        key, field = match.group(1), match.group(2)
        if not samples or samples[-1]["key"] != key:
            samples.append({"key": key, "fields": []})
        samples[-1]["fields"].append([field, m["offset"], m["size"]])
        if field not in fields:
            fields.append(field)
    return {"file": os.path.basename(path), "size": os.path.getsize(path),
            "members": members, "samples": samples, "fields": fields}


def main(out):
    members = entries(random.Random(42))
    expect = []
    for fname, fmt in [("shard_pax.tar", tarfile.PAX_FORMAT),
                       ("shard_gnu.tar", tarfile.GNU_FORMAT),
                       ("shard_ustar.tar", tarfile.USTAR_FORMAT)]:
        path = os.path.join(out, fname)
        write(path, fmt, members)
        expect.append(expected(path))
    # Small shards of one long-named member, the fuzz test's seeds.
    long = [("d/" + "long_name_" * 11 + "x.cls", b"7")]
    for fname, fmt in [("long_pax.tar", tarfile.PAX_FORMAT),
                       ("long_gnu.tar", tarfile.GNU_FORMAT)]:
        path = os.path.join(out, fname)
        write(path, fmt, long)
        expect.append(expected(path))
    with open(os.path.join(out, "expect.json"), "w") as f:
        json.dump(expect, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
