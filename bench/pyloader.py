#!/usr/bin/python3
"""Micro-benchmark of cacheagent.Loader: the per-batch hand-off.

The hand-off is the client's share of each batch: from the daemon's Ready
received on the data socket, through the slot header's check and the numpy
views built from its descriptors, to the Release sent. It is measured per
batch over warm epochs (the dataset cached by a first epoch), and printed
in microseconds (median, p99, mean; target <= 20 us), with the samples per
second of an epoch read through the public iterator.

By default it is self-contained: it builds `cacheagent` and the GCS
emulator (bench/cmd/gcsemu), uploads a dataset of .npy shards (x: uint8
rows of --sample-bytes, y: int64), starts a daemon on a temporary control
socket and stops everything at the end (CACHEAGENT_BIN_DIR names a directory
with both binaries built already). With --socket and --data it uses a
running daemon and an existing dataset instead.

    /usr/bin/python3 bench/pyloader.py [--shards 16 --rows 8192 --sample-bytes 1024 --batch 256]
"""

from __future__ import annotations

import argparse
import io
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python" / "src"))

import numpy as np  # noqa: E402

import cacheagent  # noqa: E402
from cacheagent import loader as _ld  # noqa: E402

BUCKET = "bench"


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def cleanup(procs: list, *dirs: Path) -> None:
    """Stop procs (last started first) and remove dirs."""
    for p in reversed(procs):
        _stop(p)
        if p.stdout:
            p.stdout.close()
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def start(tmp: Path, procs: list, disk_max: str = "8GiB") -> tuple:
    """Build (or copy $CACHEAGENT_BIN_DIR's), start the emulator (bucket
    "bench", empty) and a daemon whose disk tier is tmp/disk; return (socket,
    an upload function upload(name, data)); upload.endpoint is the
    emulator's endpoint, as the daemon's config takes it."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    prebuilt = os.environ.get("CACHEAGENT_BIN_DIR")  # a directory with cacheagent and gcsemu built already
    for target, name in (("./cmd/cacheagent", "cacheagent"), ("./bench/cmd/gcsemu", "gcsemu")):
        if prebuilt:
            shutil.copy(Path(prebuilt) / name, bin_dir / name)
        else:
            subprocess.run(["go", "build", "-o", str(bin_dir / name), target], cwd=REPO, check=True)
    emu = subprocess.Popen([str(bin_dir / "gcsemu"), "-bucket", BUCKET, "-prefix", "unused/", "-objects", "1",
                            "-size", "1", "-first-byte", "0", "-rate", "0"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    procs.append(emu)
    r, _, _ = select.select([emu.stdout], [], [], 30)
    endpoint = emu.stdout.readline().decode().strip() if r else ""
    if not endpoint.startswith("http://"):
        sys.exit(f"gcsemu printed no endpoint: {endpoint!r}")
    base = endpoint.split("/storage/v1/")[0]

    def upload(name: str, data: bytes) -> None:
        req = urllib.request.Request(f"{base}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name="
                                     f"{quote(name, safe='')}", data=data, method="POST")
        urllib.request.urlopen(req, timeout=120).read()

    upload.endpoint = endpoint

    (tmp / "disk").mkdir()
    sock = str(tmp / "control.sock")
    cfg = tmp / "cacheagent.yaml"
    cfg.write_text("tiers:\n"
                   f"  disk: {{dir: {tmp / 'disk'}, max: {disk_max}}}\n"
                   "  shm: {dir: none}\n"
                   f"fetch: {{endpoint: \"{endpoint}\"}}\n"
                   f"control: {{socket: {sock}}}\n"
                   "metrics: {listen: none}\n"
                   "gpu: none\n")
    log = open(tmp / "daemon.log", "ab")
    procs.append(subprocess.Popen([str(bin_dir / "cacheagent"), "serve", "--config", str(cfg)], stdout=log,
                                  stderr=log, stdin=subprocess.DEVNULL))
    deadline = time.monotonic() + 30
    while True:
        try:
            cacheagent.Client(sock, timeout=2).close()
            break
        except cacheagent.CacheagentError:
            if time.monotonic() > deadline:
                sys.exit("the daemon did not start:\n" + (tmp / "daemon.log").read_text()[-3000:])
            time.sleep(0.05)
    return sock, upload


def setup(tmp: Path, args: argparse.Namespace, procs: list) -> tuple:
    """Build, start the emulator and the daemon, upload the dataset;
    return (socket, data URI)."""
    sock, upload = start(tmp, procs)
    rng = np.random.default_rng(1)
    from numpy.lib import format as fmt

    for k in range(args.shards):
        for suffix, a in (("x", rng.integers(0, 255, (args.rows, args.sample_bytes), dtype=np.uint8)),
                          ("y", np.arange(args.rows, dtype=np.int64))):
            buf = io.BytesIO()
            fmt.write_array(buf, a)
            upload(f"pyloader/shard-{k:04d}.{suffix}.npy", buf.getvalue())
    return sock, f"gs://{BUCKET}/pyloader/"


def handoff_epoch(ld: cacheagent.Loader, epoch: int) -> list:
    """One epoch through the loader's message path, timing each batch's
    hand-off: Ready received -> views built -> Release sent (ns)."""
    if ld._pos != (epoch, 0) or ld._ended:
        ld._seek(epoch, 0)
    perf = time.perf_counter_ns
    out = []
    recv, batch, send, pack = ld._recv, ld._batch, ld._sock.send, _ld._RELEASE.pack
    while True:
        t, m = recv()
        t0 = perf()
        if t == _ld.T_READY:
            b = batch(m)
            x = b.arrays  # the views, as a training step would take them
            send(pack(_ld.T_RELEASE, b.slot, b.seq))
            out.append(perf() - t0)
            del x, b
        elif t == _ld.T_EPOCH_END:
            ld._pos = (m[1] + 1, 0)
            return out
        elif t == _ld.T_END:
            ld._pos, ld._ended = (m[1], m[2]), True
            return out
        elif t == _ld.T_ERROR:
            ld._raise_error(m)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", help="a running daemon's control socket (with --data)")
    ap.add_argument("--data", help="the dataset's gs://BUCKET/PREFIX (with --socket)")
    ap.add_argument("--pattern", default="shard-*.{x,y}.npy")
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--rows", type=int, default=8192, help="samples per shard")
    ap.add_argument("--sample-bytes", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--prefetch", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=3, help="measured epochs (after a warm-up one)")
    args = ap.parse_args()
    procs: list = []
    tmp = Path(tempfile.mkdtemp(prefix="pyloader-bench-"))
    try:
        if args.socket and args.data:
            sock, data = args.socket, args.data
        else:
            sock, data = setup(tmp, args, procs)
        with cacheagent.Loader(data, pattern=args.pattern, batch_size=args.batch, shuffle="global", seed=1,
                               epochs=args.epochs + 2, prefetch=args.prefetch, rank=0, world_size=1, socket=sock,
                               timeout=120) as ld:
            t0 = time.perf_counter()
            n = sum(len(b) for b in ld)  # warm-up: the shards come into the cache
            cold = time.perf_counter() - t0
            ns: list = []
            for e in range(1, args.epochs + 1):
                ns += handoff_epoch(ld, e)
            ld.set_epoch(args.epochs + 1)
            waited = ld._wait_ns
            t0 = time.perf_counter()
            samples = 0
            for b in ld:
                samples += len(b)
            warm = time.perf_counter() - t0
            waited = (ld._wait_ns - waited) / 1e9
        us = sorted(v / 1e3 for v in ns)
        p99 = us[min(len(us) - 1, int(len(us) * 0.99))]
        print(f"pyloader: {args.shards} shards x {args.rows} samples of {args.sample_bytes} B (+8 B y), "
              f"batch {args.batch}, prefetch {args.prefetch}, {len(ld)} batches/epoch, ring {ld.ring_bytes >> 20} MiB")
        print(f"hand-off per batch (Ready received -> views built -> Release sent), {len(us)} batches over "
              f"{args.epochs} warm epochs: median {statistics.median(us):.1f} us, p99 {p99:.1f} us, "
              f"mean {statistics.fmean(us):.1f} us (target <= 20 us)")
        print(f"warm epoch through the iterator: {samples / warm:,.0f} samples/s ({samples} samples in {warm:.3f} s; "
              f"blocked waiting for batches {waited:.3f} s); cold first epoch {n / cold:,.0f} samples/s")
    finally:
        cleanup(procs, tmp)


if __name__ == "__main__":
    main()
