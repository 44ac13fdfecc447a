#!/usr/bin/python3
"""The PyTorch peer of `cacheagent-bench loader`.

Reads the same .npy shards (written by `cacheagent-bench loader --write-dir`)
with torch.utils.data.DataLoader in its recommended configuration: a
map-style Dataset over memory-mapped .npy files, shuffle=True, num_workers=2
(this machine has 2 cores), persistent_workers=True, prefetch_factor=4 and
the default batch collation. It prints samples per second over the measured
epochs, after one warm-up epoch that also starts the workers.

Run it with Debian's interpreter, which has python3-torch:

    /usr/bin/python3 bench/torch_peer.py --dir DIR/bench/train --batch 256 --json
"""

import argparse
import bisect
import glob
import json
import os
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Shards(Dataset):
    """Samples of x/y shard pairs, memory-mapped lazily in each worker."""

    def __init__(self, root):
        xs = sorted(glob.glob(os.path.join(root, "shard-*.x.npy")))
        if not xs:
            sys.exit(f"no shard-*.x.npy under {root}")
        self.paths = [(x, x[: -len("x.npy")] + "y.npy") for x in xs]
        self.offsets = [0]
        for x, _ in self.paths:
            a = np.load(x, mmap_mode="r")
            self.offsets.append(self.offsets[-1] + a.shape[0])
            self.row_bytes = int(np.prod(a.shape[1:])) * a.dtype.itemsize
        self.maps = None

    def __len__(self):
        return self.offsets[-1]

    def __getitem__(self, i):
        if self.maps is None:
            self.maps = [(np.load(x, mmap_mode="r"), np.load(y, mmap_mode="r")) for x, y in self.paths]
        g = bisect.bisect_right(self.offsets, i) - 1
        x, y = self.maps[g]
        r = i - self.offsets[g]
        # The mappings are read-only: copy the row, as a Dataset must.
        return torch.from_numpy(np.array(x[r])), int(y[r])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="directory holding shard-*.x.npy and shard-*.y.npy")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=1, help="measured epochs, after one warm-up epoch")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--prefetch-factor", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    ds = Shards(args.dir)
    g = torch.Generator()
    g.manual_seed(args.seed)
    dl = DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                    persistent_workers=args.workers > 0, prefetch_factor=args.prefetch_factor, generator=g)
    for x, y in dl:  # warm-up: starts the workers and faults the mappings in
        pass
    samples, start = 0, time.perf_counter()
    for _ in range(args.epochs):
        for x, y in dl:
            if y.shape[0] != x.shape[0]:
                sys.exit("x and y batches differ in length")
            samples += x.shape[0]
    took = time.perf_counter() - start
    rep = {"samples": samples, "seconds": took, "samples_per_sec": samples / took, "batch": args.batch,
           "workers": args.workers, "prefetch_factor": args.prefetch_factor, "torch": torch.__version__,
           "sample_bytes": ds.row_bytes}
    if args.json:
        print(json.dumps(rep))
    else:
        print(f"{samples} samples in {took:.2f} s: {samples / took:.0f} samples/s "
              f"(batch {args.batch}, {args.workers} workers, torch {torch.__version__})")


if __name__ == "__main__":
    main()
