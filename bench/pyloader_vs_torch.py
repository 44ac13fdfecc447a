#!/usr/bin/python3
"""cacheagent.Loader against PyTorch's DataLoader, warm, in a PyTorch loop.

For one sample size it starts the GCS emulator and a daemon (the setup of
bench/pyloader.py), uploads a dataset of .npy shards (x: uint8 rows
of --sample-bytes, y: int64) and writes the same shards to a temporary
directory in /dev/shm for the PyTorch peer (bench/torch_peer.py:
DataLoader with 2 workers, persistent, prefetch_factor 4, mmap .npy).

  * Loader: one epoch fills the cache (cold, not counted); then
    --handoff-epochs epochs timing each batch's hand-off (Ready received ->
    views built -> Release sent, pyloader.handoff_epoch); then --epochs
    epochs through `for batch in loader`, each batch made into tensors with
    torch.from_numpy(batch['x']) and torch.from_numpy(batch['y']). Every
    tensor's data pointer is asserted to lie inside the loader's ring (zero
    copies) and to be the numpy view's own.
  * PyTorch: torch_peer.py in a subprocess, one warm-up epoch (starts the
    workers, faults the mappings in), then --epochs measured epochs; its
    batches are already tensors.

--order loader,torch (default) or torch,loader picks which runs first.
It prints one JSON line with both rates and the ratio. Everything it
starts (emulator, daemon, temp dirs) is stopped and removed on exit.

    /usr/bin/python3 bench/pyloader_vs_torch.py --shards 64 --rows 8192 --sample-bytes 1024 --batch 256
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from numpy.lib import format as fmt  # noqa: E402

import pyloader  # noqa: E402  (puts python/src on the path)

import cacheagent  # noqa: E402


def write_peer_copy(d: Path, args: argparse.Namespace) -> None:
    """The dataset pyloader.setup uploads, byte for byte (same generator,
    same order of draws), as .npy files in d."""
    rng = np.random.default_rng(1)
    for k in range(args.shards):
        for suffix, a in (("x", rng.integers(0, 255, (args.rows, args.sample_bytes), dtype=np.uint8)),
                          ("y", np.arange(args.rows, dtype=np.int64))):
            with open(d / f"shard-{k:04d}.{suffix}.npy", "wb") as f:
                fmt.write_array(f, a)


def run_loader(sock: str, data: str, args: argparse.Namespace) -> dict:
    total = 1 + args.handoff_epochs + args.epochs
    with cacheagent.Loader(data, pattern="shard-*.{x,y}.npy", batch_size=args.batch, shuffle="global", seed=1,
                           epochs=total + 1, prefetch=args.prefetch, rank=0, world_size=1, socket=sock,
                           timeout=120) as ld:
        t0 = time.perf_counter()
        cold_n = sum(len(b) for b in ld)  # the shards come into the cache
        cold = time.perf_counter() - t0
        ns: list = []
        for e in range(1, 1 + args.handoff_epochs):
            ns += pyloader.handoff_epoch(ld, e)
        ld.set_epoch(1 + args.handoff_epochs)
        lo = ld.ring.ctypes.data
        hi = lo + ld.ring_bytes
        from_numpy = torch.from_numpy
        samples = batches = 0
        t0 = time.perf_counter()
        for _ in range(args.epochs):
            for b in ld:
                xa, ya = b["x"], b["y"]
                x, y = from_numpy(xa), from_numpy(ya)
                px, py = x.data_ptr(), y.data_ptr()
                # Zero copies: the tensors are the ring's memory.
                if not (lo <= px and px + xa.nbytes <= hi and lo <= py and py + ya.nbytes <= hi
                        and px == xa.ctypes.data and py == ya.ctypes.data):
                    raise AssertionError(f"batch {b.epoch}/{b.index}: a tensor's buffer is not inside the ring "
                                         f"[{lo:#x}, {hi:#x}): x {px:#x}+{xa.nbytes}, y {py:#x}+{ya.nbytes}")
                if x.shape[0] != y.shape[0]:
                    raise AssertionError("x and y batches differ in length")
                samples += x.shape[0]
                batches += 1
        warm = time.perf_counter() - t0
        ring_mib = ld.ring_bytes / 2**20
    us = sorted(v / 1e3 for v in ns)
    return {"samples": samples, "batches_checked": batches, "seconds": warm, "samples_per_sec": samples / warm,
            "cold_samples_per_sec": cold_n / cold, "handoff_batches": len(us),
            "handoff_median_us": statistics.median(us), "handoff_p99_us": us[min(len(us) - 1, int(len(us) * .99))],
            "handoff_mean_us": statistics.fmean(us), "ring_mib": ring_mib}


def run_torch(d: Path, args: argparse.Namespace) -> dict:
    out = subprocess.run([sys.executable, str(HERE / "torch_peer.py"), "--dir", str(d), "--batch", str(args.batch),
                          "--epochs", str(args.epochs), "--json"], check=True, stdout=subprocess.PIPE, timeout=600)
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--rows", type=int, default=8192, help="samples per shard")
    ap.add_argument("--sample-bytes", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--prefetch", type=int, default=8, help="the Loader's ring slots")
    ap.add_argument("--epochs", type=int, default=2, help="measured warm epochs of each")
    ap.add_argument("--handoff-epochs", type=int, default=3)
    ap.add_argument("--order", default="loader,torch", choices=("loader,torch", "torch,loader"))
    ap.add_argument("--target", type=float, default=0, help="the ratio the issue asks for (printed as met/missed)")
    args = ap.parse_args()
    procs: list = []
    tmp = Path(tempfile.mkdtemp(prefix="pyloader-vs-torch-"))
    shm = Path(tempfile.mkdtemp(prefix="pyloader-vs-torch-", dir="/dev/shm"))
    try:
        sock, data = pyloader.setup(tmp, args, procs)
        write_peer_copy(shm, args)
        res: dict = {}
        for who in args.order.split(","):
            res[who] = run_loader(sock, data, args) if who == "loader" else run_torch(shm, args)
        ratio = res["loader"]["samples_per_sec"] / res["torch"]["samples_per_sec"]
        rep = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "order": args.order,
               "samples": args.shards * args.rows, "sample_bytes": args.sample_bytes, "batch": args.batch,
               "prefetch": args.prefetch, "epochs": args.epochs, "loader": res["loader"], "torch": res["torch"],
               "ratio": ratio, "target": args.target,
               "met": (ratio >= args.target) if args.target else None,
               "handoff_met": res["loader"]["handoff_median_us"] <= 20}
        print(json.dumps(rep))
    finally:
        pyloader.cleanup(procs, tmp, shm)


if __name__ == "__main__":
    main()
