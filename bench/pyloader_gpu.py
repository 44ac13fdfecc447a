#!/usr/bin/python3
"""cacheagent.Loader's ring as pinned memory: host-to-device copies of its batches.

The ring a cacheagent.Loader maps is ordinary shared memory (a memfd). Registered
once with the CUDA runtime (cudaHostRegister, through torch.cuda.cudart()), the
batches' views are pinned, so `torch.from_numpy(batch["x"]).to("cuda",
non_blocking=True)` is a DMA from the ring with no bounce copy. This measures
the copy rate of warm batches from the ring pageable, from the ring
registered, and from torch's own pinned buffers (pin_memory=True, the
baseline), each copy timed with CUDA events. Needs a CUDA GPU and torch.

    CACHEAGENT_BIN_DIR=DIR /usr/bin/python3 bench/pyloader_gpu.py [--rows 256 --sample-bytes 150528 --batch 64]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyloader  # noqa: E402  (the dataset, the emulator and the daemon)
import torch  # noqa: E402

import cacheagent  # noqa: E402


def copy_rate(ld: cacheagent.Loader, dev: torch.device, staged: bool) -> tuple[float, int]:
    """One epoch: each batch's x copied to dev (from a torch pinned buffer
    when staged), timed with CUDA events. Returns (GB/s of the copies, bytes)."""
    ms, nbytes, host, gpu = 0.0, 0, None, None
    for b in ld:
        src = torch.from_numpy(b["x"])
        if staged:
            if host is None or host.shape != src.shape:
                host = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
            host.copy_(src)
            src = host
        if gpu is None or gpu.shape != src.shape:
            gpu = torch.empty(src.shape, dtype=src.dtype, device=dev)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        gpu.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()  # the slot goes back to the daemon when the loop moves on
        ms += start.elapsed_time(end)
        nbytes += src.numel() * src.element_size()
    return nbytes / (ms / 1e3) / 1e9, nbytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--rows", type=int, default=256, help="samples per shard")
    ap.add_argument("--sample-bytes", type=int, default=3 * 224 * 224)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prefetch", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    dev = torch.device("cuda")
    cudart = torch.cuda.cudart()
    procs: list = []
    tmp = Path(tempfile.mkdtemp(prefix="pyloader-gpu-"))
    try:
        sock, data = pyloader.setup(tmp, args, procs)
        with cacheagent.Loader(data, pattern="shard-*.{x,y}.npy", batch_size=args.batch, shuffle="global", seed=1,
                               epochs=1000, prefetch=args.prefetch, rank=0, world_size=1, socket=sock,
                               timeout=300) as ld:
            for _ in ld:  # warm: the shards come into the cache
                pass
            print(f"pyloader_gpu: {torch.cuda.get_device_name(0)}, torch {torch.__version__}; "
                  f"{args.shards} shards x {args.rows} samples of {args.sample_bytes} B, batch {args.batch}, "
                  f"ring {ld.ring_bytes >> 20} MiB in {ld.slots} slots")
            ptr, size = ld.ring.ctypes.data, ld.ring_bytes
            for r in range(args.rounds):
                pageable, n = copy_rate(ld, dev, staged=False)
                staged, _ = copy_rate(ld, dev, staged=True)
                err = cudart.cudaHostRegister(ptr, size, 0)
                if int(err) != 0:
                    sys.exit(f"cudaHostRegister of the ring: error {err}")
                pinned, _ = copy_rate(ld, dev, staged=False)
                cudart.cudaHostUnregister(ptr)
                print(f"round {r + 1}: {n >> 20} MiB per epoch: ring pageable {pageable:.1f} GB/s, "
                      f"torch pinned buffer {staged:.1f} GB/s, ring registered {pinned:.1f} GB/s "
                      f"({pinned / staged:.2f} of the pinned buffer's rate)")
    finally:
        pyloader.cleanup(procs, tmp)


if __name__ == "__main__":
    main()
