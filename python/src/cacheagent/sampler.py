"""The node shuffle's partition of shards across nodes, as the Go sampler
computes it (``sampler.Partition``), for jobs that want to know which
shards a node reads without asking the daemon (e.g. to warm them).

The construction (docs/architecture.md, "Rank-aware loading"):

1. the shards with rows, in index order, are shuffled by Fisher-Yates from
   the end with PCG-DXSM (Go's ``math/rand/v2.PCG``: 128-bit state
   hi=seed, lo=key) keyed ``mix(mix(0) ^ 5 << 56 ^ nodes)`` (SplitMix64's
   finaliser), each swap index drawn by Lemire's multiply-and-reject;
2. stably sorted by row count, largest first;
3. each shard, in that order, goes to the node with the fewest rows so
   far, the lowest-numbered on a tie.
"""

from __future__ import annotations

import heapq
from typing import List, Sequence

__all__ = ["node_partition", "node_of"]

_M64 = (1 << 64) - 1
_STREAM_NODES = 5


def _mix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


class _PCG:
    """Go's math/rand/v2 PCG (128-bit LCG, DXSM output)."""

    _MUL = (2549297995355413924 << 64) | 4865540595714422341
    _INC = (6364136223846793005 << 64) | 1442695040888963407

    def __init__(self, hi: int, lo: int) -> None:
        self.state = ((hi & _M64) << 64) | (lo & _M64)

    def uint64(self) -> int:
        self.state = (self.state * self._MUL + self._INC) & ((1 << 128) - 1)
        hi, lo = self.state >> 64, self.state & _M64
        hi ^= hi >> 32
        hi = (hi * 0xDA942042E4DD58B5) & _M64
        hi ^= hi >> 48
        return (hi * (lo | 1)) & _M64

    def below(self, n: int) -> int:
        """A uniform integer in [0, n), n > 0 (Lemire's method)."""
        m = self.uint64() * n
        lo = m & _M64
        if lo < n:
            thresh = ((1 << 64) - n) % n
            while lo < thresh:
                m = self.uint64() * n
                lo = m & _M64
        return m >> 64


def node_partition(rows: Sequence[int], nodes: int, seed: int = 0) -> List[List[int]]:
    """The shards (indexes into ``rows``, each shard's sample count) that
    each of ``nodes`` nodes reads in the node shuffle with ``seed``, each
    node's in increasing order. Fixed across epochs."""
    if nodes <= 0:
        raise ValueError(f"{nodes} nodes")
    groups = [g for g, n in enumerate(rows) if n > 0]
    if len(groups) < nodes:
        raise ValueError(f"{len(groups)} shards with samples cannot be partitioned across {nodes} nodes")
    src = _PCG(seed, _mix(_mix(0) ^ (_STREAM_NODES << 56) ^ nodes))
    for i in range(len(groups) - 1, 0, -1):
        j = src.below(i + 1)
        groups[i], groups[j] = groups[j], groups[i]
    groups.sort(key=lambda g: -rows[g])  # stable
    heap = [(0, k) for k in range(nodes)]
    parts: List[List[int]] = [[] for _ in range(nodes)]
    for g in groups:
        load, k = heapq.heappop(heap)
        parts[k].append(g)
        heapq.heappush(heap, (load + rows[g], k))
    return [sorted(p) for p in parts]


def node_of(rank: int, world_size: int, nodes: int) -> int:
    """A rank's node as torchrun numbers ranks: rank // (world_size // nodes)."""
    return rank // (world_size // nodes)
