#!/usr/bin/python3
"""cacheagent.Loader against PyTorch's DataLoader on token windows and
WebDataset tars, warm, in a PyTorch loop (issue 20's performance points).

--format tokens: a nanoGPT train.bin (uint16 tokens written with np.memmap;
--tokens of them), samples are windows of --seq-len + 1 tokens (4 KiB at
2048), --batch 64, global shuffle.
  * Loader: format="tokens"; per batch the (batch, L+1) uint16 view of the
    ring becomes int64 tensors x, y (one astype, as nanoGPT's get_batch
    makes int64; torch 1.13 has no uint16 tensors) -- "int64 x,y"; and the
    same loop with no conversion (torch.from_numpy of the ring's bytes viewed
    as int16, zero copies; a GPU job would widen on the device) --
    "zero-copy"; and a second session with token_out_dtype="int64" (the
    daemon widens the tokens as it gathers; x, y are views of the ring's
    int64 tensor) -- "ring int64".
  * PyTorch: what nanoGPT does, as a DataLoader: a Dataset that np.memmap's
    train.bin (once per worker) and returns a random window as x, y int64
    tensors; 2 workers, persistent_workers=True, prefetch_factor=4.
--format webdataset: --shards tars of --per-shard samples, each a "bin"
member of --sample-bytes and a small "cls" member, --batch 64.
  * Loader: format guessed from "shard-*.tar", global shuffle; per batch each
    field's data and offsets become tensors (torch.from_numpy: zero copies).
  * PyTorch: an IterableDataset reading the same tars with Python's tarfile
    in 2 worker processes (shards split between them, shuffled per epoch),
    yielding each sample's members as bytes; default collation (lists of
    bytes), persistent_workers=True, prefetch_factor=4. No decoding on
    either side.

Both read the same data and the same number of samples per epoch. The
emulator and daemon are set up once (pyloader.start); the files the PyTorch
side reads are in /dev/shm (warm, like the cache). The Loader's first epoch
fills the cache and is not counted; the PyTorch side's first epoch starts
its workers and is not counted. Then --runs runs, each measuring --epochs
epochs of both, the order alternating between runs; one JSON line per run,
then a summary line with the min and median of the runs' ratios (with
--go-bench, tokens, also `cacheagent-bench loader` on the same train.bin: the
Go loader alone and its gather against a one-core memcpy).

    /usr/bin/python3 bench/pyformats.py --format tokens --runs 5
    /usr/bin/python3 bench/pyformats.py --format webdataset --runs 5
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info  # noqa: E402

import pyloader  # noqa: E402  (puts python/src on the path)

import cacheagent  # noqa: E402


# ----- the PyTorch peers (run in a subprocess: --peer)

class Windows(Dataset):
    """nanoGPT's get_batch as a Dataset: a random window of train.bin as
    x, y int64 tensors; the memmap opened once per worker."""

    def __init__(self, path: str, seq_len: int, n: int) -> None:
        self.path, self.L, self.n = path, seq_len, n
        self.data = None
        self.rng = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, _: int):
        if self.data is None:
            self.data = np.memmap(self.path, dtype=np.uint16, mode="r")
            self.rng = np.random.default_rng(os.getpid())
        i = int(self.rng.integers(len(self.data) - self.L))
        x = torch.from_numpy(self.data[i:i + self.L].astype(np.int64))
        y = torch.from_numpy(self.data[i + 1:i + 1 + self.L].astype(np.int64))
        return x, y


class Tars(IterableDataset):
    """WebDataset samples read with tarfile: each worker reads its share of
    the shards (shuffled per epoch) and yields {field: bytes} per sample."""

    def __init__(self, paths: list) -> None:
        self.paths = paths
        self.epoch = 0

    def __iter__(self):
        w = get_worker_info()
        paths = list(self.paths)
        random.Random(self.epoch).shuffle(paths)
        self.epoch += 1
        if w is not None:
            paths = paths[w.id::w.num_workers]
        for p in paths:
            with tarfile.open(p) as tar:
                key, sample = None, {}
                for m in tar:
                    if not m.isfile():
                        continue
                    k, field = m.name.split(".", 1)
                    if k != key and sample:
                        yield sample
                        sample = {}
                    key = k
                    sample[field] = tar.extractfile(m).read()
                if sample:
                    yield sample


def peer(args: argparse.Namespace) -> None:
    """One warm-up epoch (starts the workers), then --epochs measured; prints
    one JSON line."""
    if args.format == "tokens":
        ds = Windows(args.peer, args.seq_len, args.samples)
        dl = DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=2, persistent_workers=True,
                        prefetch_factor=4)
    else:
        ds = Tars(sorted(str(p) for p in Path(args.peer).glob("shard-*.tar")))
        dl = DataLoader(ds, batch_size=args.batch, num_workers=2, persistent_workers=True, prefetch_factor=4)
    for _ in dl:
        pass
    samples, t0 = 0, time.perf_counter()
    for _ in range(args.epochs):
        for b in dl:
            samples += len(b[0]) if args.format == "tokens" else len(b["bin"])
    dt = time.perf_counter() - t0
    print(json.dumps({"samples": samples, "seconds": dt, "samples_per_sec": samples / dt}))


def run_peer(args: argparse.Namespace, where: str, samples: int) -> dict:
    cmd = [sys.executable, __file__, "--peer", where, "--format", args.format, "--batch", str(args.batch),
           "--epochs", str(args.epochs), "--seq-len", str(args.seq_len), "--samples", str(samples)]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, timeout=900)
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


# ----- the Loader side

def loader_epochs(ld: cacheagent.Loader, args: argparse.Namespace, mode: str) -> dict:
    """--epochs epochs through `for batch in ld` in a PyTorch loop."""
    from_numpy = torch.from_numpy
    lo, hi = ld.ring.ctypes.data, ld.ring.ctypes.data + ld.ring_bytes
    samples = 0
    t0 = time.perf_counter()
    for _ in range(args.epochs):
        for b in ld:
            if args.format == "tokens":
                t = b["tokens"]
                if mode == "int64":
                    t64 = from_numpy(t.astype(np.int64))
                    x, y = t64[:, :-1], t64[:, 1:]
                elif mode == "ring-int64":  # widened by the daemon: int64 in the ring
                    t64 = from_numpy(t)
                    x, y = t64[:, :-1], t64[:, 1:]
                    if t64.dtype != torch.int64 or not lo <= x.data_ptr() < hi:
                        raise AssertionError("the tokens tensor is not an int64 view of the ring")
                else:
                    x = from_numpy(t.view(np.int16))
                    if not lo <= x.data_ptr() < hi:
                        raise AssertionError("the tokens tensor is not a view of the ring")
            else:
                for name in b.fields:
                    f = b[name]
                    d, o = from_numpy(f.data), from_numpy(f.offsets)
                    if len(f.data) and not lo <= d.data_ptr() < hi or not lo <= o.data_ptr() < hi:
                        raise AssertionError(f"field {name} is not a view of the ring")
            samples += len(b)
    dt = time.perf_counter() - t0
    return {"samples": samples, "seconds": dt, "samples_per_sec": samples / dt}


def go_bench(tmp: Path, endpoint: str, args: argparse.Namespace) -> dict:
    """`cacheagent-bench loader --data` over the same train.bin (its own
    cache, filled by a first run; the second run's figures): the Go loader
    alone, its gather against a one-core memcpy measured in the same run."""
    exe = tmp / "bin" / "cacheagent-bench"
    subprocess.run(["go", "build", "-o", str(exe), "./bench/cmd/cacheagent-bench"], cwd=pyloader.REPO, check=True)
    (tmp / "gobench").mkdir()
    cfg = tmp / "gobench.yaml"
    cfg.write_text(f"tiers:\n  disk: {{dir: {tmp / 'gobench'}, max: 8GiB}}\n  shm: {{dir: none}}\n"
                   f"fetch: {{endpoint: \"{endpoint}\"}}\ncontrol: {{socket: {tmp / 'gobench.sock'}}}\n"
                   "metrics: {listen: none}\ngpu: none\n")
    cmd = [str(exe), "--config", str(cfg), "loader", "--data", f"gs://{pyloader.BUCKET}/tokens/", "--pattern",
           "*.bin", "--format", "tokens", "--seq-len", str(args.seq_len), "--token-dtype", "uint16", "--batch",
           str(args.batch), "--shuffle", "global", "--epochs", "4", "--json"]
    for _ in range(2):  # the first run fills the cache; the second's epochs are all warm
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, timeout=600)
    rep = json.loads(out.stdout)
    keep = ("epochs", "samples_per_sec", "gather_gbps", "memcpy_gbps", "gather_vs_memcpy", "delivered_gbps",
            "delivered_vs_memcpy", "stall_share", "workers")
    return {k: v for k, v in rep["runs"][0].items() if k in keep}


# ----- data

def make_tokens(args: argparse.Namespace, shm: Path, upload) -> tuple:
    path = shm / "train.bin"
    mm = np.memmap(path, dtype=np.uint16, mode="w+", shape=(args.tokens,))
    mm[:] = np.random.default_rng(1).integers(0, 50257, size=args.tokens, dtype=np.uint16)
    mm.flush()
    del mm
    upload("tokens/train.bin", path.read_bytes())
    kw = dict(pattern="*.bin", format="tokens", seq_len=args.seq_len, token_dtype="uint16")
    return str(path), f"gs://{pyloader.BUCKET}/tokens/", kw, (args.tokens - 1) // args.seq_len


def make_tars(args: argparse.Namespace, shm: Path, upload) -> tuple:
    rng = np.random.default_rng(1)
    n = 0
    for s in range(args.shards):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for _ in range(args.per_shard):
                for field, data in (("bin", rng.integers(0, 255, args.sample_bytes, dtype=np.uint8).tobytes()),
                                    ("cls", str(n % 1000).encode())):
                    info = tarfile.TarInfo(f"sample{n:08d}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                n += 1
        (shm / f"shard-{s:04d}.tar").write_bytes(buf.getvalue())
        upload(f"wds/shard-{s:04d}.tar", buf.getvalue())
    return str(shm), f"gs://{pyloader.BUCKET}/wds/", dict(pattern="shard-*.tar"), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--format", choices=("tokens", "webdataset"), required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--tokens", type=int, default=32 << 20, help="tokens in train.bin (uint16)")
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--per-shard", type=int, default=64, help="samples per tar")
    ap.add_argument("--sample-bytes", type=int, default=100_000)
    ap.add_argument("--prefetch", type=int, default=8, help="the Loader's ring slots")
    ap.add_argument("--epochs", type=int, default=2, help="measured epochs per run, of each")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--target", type=float, default=0)
    ap.add_argument("--go-bench", action="store_true", help="tokens: also run cacheagent-bench loader on the data")
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    ap.add_argument("--samples", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer:
        return peer(args)
    procs: list = []
    ld64 = None
    tmp = Path(tempfile.mkdtemp(prefix="pyformats-"))
    shm = Path(tempfile.mkdtemp(prefix="pyformats-", dir="/dev/shm"))
    try:
        sock, upload = pyloader.start(tmp, procs)
        make = make_tokens if args.format == "tokens" else make_tars
        where, data, kw, samples = make(args, shm, upload)
        runs = []
        if args.format == "tokens":  # a second session, the daemon widening the tokens to int64
            ld64 = cacheagent.Loader(data, batch_size=args.batch, shuffle="global", seed=1, prefetch=args.prefetch,
                                     epochs=1 << 20, rank=0, world_size=1, socket=sock, timeout=300,
                                     token_out_dtype="int64", **kw)
        with cacheagent.Loader(data, batch_size=args.batch, shuffle="global", seed=1, prefetch=args.prefetch,
                               epochs=1 << 20, rank=0, world_size=1, socket=sock, timeout=300, **kw) as ld:
            assert ld.batches_per_epoch == -(-samples // args.batch), (ld.batches_per_epoch, samples)
            cold = loader_epochs(ld, argparse.Namespace(**{**vars(args), "epochs": 1}), "zero-copy")
            for r in range(args.runs):
                order = ["loader", "torch"] if r % 2 == 0 else ["torch", "loader"]
                res = {}
                for who in order:
                    if who == "torch":
                        res["torch"] = run_peer(args, where, samples)
                    else:
                        res["loader"] = loader_epochs(ld, args, "int64" if args.format == "tokens" else "")
                        if args.format == "tokens":
                            res["loader_zero_copy"] = loader_epochs(ld, args, "zero-copy")
                            res["loader_ring_int64"] = loader_epochs(ld64, args, "ring-int64")
                rep = {"run": r, "order": ",".join(order), "format": args.format, "samples_per_epoch": samples,
                       "batch": args.batch, **res, "ratio": res["loader"]["samples_per_sec"] /
                       res["torch"]["samples_per_sec"]}
                for k in ("zero_copy", "ring_int64"):
                    if "loader_" + k in res:
                        rep["ratio_" + k] = res["loader_" + k]["samples_per_sec"] / res["torch"]["samples_per_sec"]
                runs.append(rep)
                print(json.dumps(rep), flush=True)
            st = {k: v for k, v in ld.stats.items() if k in ("batches", "wait_s", "handoff_us")}
        ratios = [r["ratio"] for r in runs]
        summary = {"summary": True, "format": args.format, "runs": len(runs), "ratio_min": min(ratios),
                   "ratio_median": statistics.median(ratios), "target": args.target,
                   "met": (min(ratios) >= args.target) if args.target else None,
                   "loader_median": statistics.median(r["loader"]["samples_per_sec"] for r in runs),
                   "torch_median": statistics.median(r["torch"]["samples_per_sec"] for r in runs),
                   "cold_samples_per_sec": cold["samples_per_sec"], "ring_mib": ld.ring_bytes / 2**20,
                   "nproc": os.cpu_count(), "loader_stats": st}
        for k in ("zero_copy", "ring_int64") if args.format == "tokens" else ():
            rs = [r["ratio_" + k] for r in runs]
            summary.update({f"ratio_{k}_min": min(rs), f"ratio_{k}_median": statistics.median(rs),
                            f"loader_{k}_median": statistics.median(r["loader_" + k]["samples_per_sec"]
                                                                    for r in runs)})
        if args.go_bench and args.format == "tokens":
            summary["go_loader"] = go_bench(tmp, upload.endpoint, args)
        print(json.dumps(summary, default=str), flush=True)
    finally:
        if ld64 is not None:
            ld64.close()
        pyloader.cleanup(procs, tmp, shm)


if __name__ == "__main__":
    main()
