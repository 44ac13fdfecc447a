#!/usr/bin/python3
"""Where a process's CPU goes, per object, by category (issue 28).

Reads `perf script -F ip,sym` output of a `perf record -g` (frame-pointer
call graphs; Go keeps frame pointers) and counts each sample once, in the
first category of CATEGORIES that a function of its stack matches, so the
categories add up to the whole. A sample in the storage client that is in
net/http below it counts as net/http. Prints a Markdown table of
microseconds of CPU per object, one column per profile:

    perf record -F 2000 -g -o bare.pf -- bareget -endpoint EP -connections 128 gs://bench/data/
    perf record -F 2000 -g -o agent.pf -- cacheagent --endpoint EP --cache-dir DIR --connections 64 prefetch gs://bench/data/
    perf script -i bare.pf -F ip,sym > bare.txt; perf script -i agent.pf -F ip,sym > agent.txt
    bench/perfsplit.py --hz 2000 --objects 20000 bare.txt agent.txt
"""

import argparse
import collections
from typing import Dict, List, Tuple

# (category, substrings of function names); the first match wins.
CATEGORIES: List[Tuple[str, List[str]]] = [
    ("listing (request, JSON)", ["fetch.(*GCS).List", "bare.List"]),
    ("garbage collector", ["runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep",
                           "runtime.bgscavenge", "runtime.gcStart", "runtime.(*mheap).alloc"]),
    ("stack growth (newstack)", ["runtime.newstack"]),
    ("pwrite into the segment", ["syscall.pwrite", "__x64_sys_pwrite64"]),
    ("group fdatasync", ["unix.Fdatasync", "__x64_sys_fdatasync"]),
    ("index (badger)", ["badger"]),
    ("CRC32C", ["crc32", "crc32cShift", "xPowBytes"]),
    ("socket read and write", ["syscall.read", "ksys_read", "syscall.write", "ksys_write"]),
    ("the storage client (its own code)", ["cloud.google.com/go/storage"]),
    ("net/http", ["net/http."]),
    ("the program's own code", ["cacheagent/cacheagent"]),
]
OTHER = "runtime, scheduler, other"


def split(path: str) -> Tuple[Dict[str, int], int]:
    """Counts the samples of one `perf script` output by category."""
    counts: Dict[str, int] = collections.Counter()
    total = 0
    stack: List[str] = []

    def flush() -> None:
        nonlocal total
        if not stack:
            return
        total += 1
        joined = " ".join(stack)
        for name, patterns in CATEGORIES:
            if any(p in joined for p in patterns):
                if name.startswith("the storage client") and "net/http." in joined:
                    name = "net/http"
                counts[name] += 1
                return
        counts[OTHER] += 1

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                flush()
                stack.clear()
                continue
            parts = line.split(None, 1)
            stack.append(parts[1] if len(parts) > 1 else "?")
    flush()
    return counts, total


def main() -> None:
    ap = argparse.ArgumentParser(description="Where a process's CPU goes, per object, by category.")
    ap.add_argument("--hz", type=float, required=True, help="perf record's -F")
    ap.add_argument("--objects", type=int, required=True, help="objects the run fetched")
    ap.add_argument("profiles", nargs="+", help="perf script -F ip,sym outputs")
    args = ap.parse_args()
    us = 1e6 / args.hz / args.objects  # microseconds per object of one sample
    results = [split(p) for p in args.profiles]
    print("| category | " + " | ".join(args.profiles) + " |")
    print("|---" * (len(args.profiles) + 1) + "|")
    for name in [n for n, _ in CATEGORIES] + [OTHER]:
        print(f"| {name} | " + " | ".join(f"{c[name] * us:.1f}" for c, _ in results) + " |")
    print("| **total** | " + " | ".join(f"**{t * us:.0f}**" for _, t in results) + " |")


if __name__ == "__main__":
    main()
