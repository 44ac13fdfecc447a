"""PyTorch helpers: a sampler that announces each epoch's order, and a
map-style dataset that reads objects through leases.

Nothing here imports torch: both classes follow the protocols that
``torch.utils.data.DataLoader`` uses (a sampler is an iterable of indices
with ``__len__``; a map-style dataset has ``__getitem__`` and ``__len__``),
so ``import cacheagent.torch`` works, and costs nothing, with or without
torch installed.

Both are safe with DataLoader worker processes: each process opens its own
client lazily, on first use after a fork (sockets are never shared across
fork), and a Dataset pickles without its client (spawn start method).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Sized

from .client import DEFAULT_SOCKET, Client
from .errors import CacheagentError
from .lease import Lease
from .uri import ObjectLike, ObjectRef, object_of

__all__ = ["PlannedSampler", "Dataset"]

log = logging.getLogger("cacheagent")


class _PerProcessClient:
    """A Client opened lazily, once per process (internal)."""

    def __init__(self, socket: str, mount_root: Optional[str], timeout: float) -> None:
        self.socket, self.mount_root, self.timeout = socket, mount_root, timeout
        self._init_state()

    def _init_state(self) -> None:
        self._client: Optional[Client] = None
        self._pid = -1
        self._lock = threading.Lock()

    def get(self) -> Client:
        with self._lock:
            if self._client is None or self._pid != os.getpid():
                self._client = Client(self.socket, timeout=self.timeout, mount_root=self.mount_root)
                self._pid = os.getpid()
            return self._client

    def close(self) -> None:
        with self._lock:
            c, self._client = self._client, None
        if c is not None and self._pid == os.getpid():
            c.close()

    def __getstate__(self) -> Dict[str, Any]:
        return {"socket": self.socket, "mount_root": self.mount_root, "timeout": self.timeout}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.socket, self.mount_root, self.timeout = state["socket"], state["mount_root"], state["timeout"]
        self._init_state()


def _indices(item: Any) -> Sequence[int]:
    """The dataset indices one sampler item stands for: an index, or a batch
    of them (a BatchSampler's list)."""
    if isinstance(item, (list, tuple)):
        return [int(i) for i in item]
    return [int(item)]


class PlannedSampler:
    """Wrap a sampler so that the daemon knows each epoch's read order.

    At each ``__iter__`` it draws the wrapped sampler's order for the
    epoch once (``list(iter(sampler))``), maps the indices to objects
    (``paths[i]``: ``gs://`` URIs, or paths under ``mount_root``), announces
    that order as a plan (one plan id per PlannedSampler, so each epoch's
    plan replaces the previous one), then yields the same indices while
    advancing the plan: at most every ``advance_every`` items or
    ``advance_interval`` seconds. The plan is advisory: daemon errors
    (none running, a timeout ...) are logged and counted in ``errors``,
    never raised into the training loop. Items that are lists of indices
    (a BatchSampler) are planned index by index.

    Works with any ``torch.utils.data.Sampler``, DistributedSampler
    included (``set_epoch`` is forwarded); pass it as DataLoader's
    ``sampler`` (or ``batch_sampler`` when wrapping a BatchSampler).
    Call :meth:`close` (or use ``with``) to drop the plan when training ends.
    """

    def __init__(self, sampler: Iterable[Any], paths: Sequence[ObjectLike], socket: str = DEFAULT_SOCKET, *,
                 mount_root: Optional[str] = None, plan_id: Optional[str] = None, advance_every: int = 64,
                 advance_interval: float = 0.5, timeout: float = 10.0) -> None:
        self.sampler = sampler
        self.paths = paths
        self.mount_root = mount_root
        self.plan_id = plan_id or f"torch-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.advance_every = max(1, int(advance_every))
        self.advance_interval = advance_interval
        self.errors = 0
        self.announced: Optional[int] = None  # objects in the last plan announced, None if it failed
        self._clients = _PerProcessClient(socket, mount_root, timeout)

    def __len__(self) -> int:
        if not isinstance(self.sampler, Sized):
            raise TypeError(f"cacheagent: PlannedSampler: the wrapped {type(self.sampler).__name__} has no len()")
        return len(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        """Forward to the wrapped sampler's ``set_epoch`` when it has one."""
        fn = getattr(self.sampler, "set_epoch", None)
        if fn is not None:
            fn(epoch)

    def _failed(self, what: str, e: BaseException) -> None:
        self.errors += 1
        level = logging.WARNING if self.errors == 1 else logging.DEBUG
        log.log(level, "cacheagent: PlannedSampler: %s failed (advisory, training goes on): %s", what, e)

    def _announce(self, refs: List[ObjectRef]) -> bool:
        try:
            self._clients.get().plan(refs, id=self.plan_id)
        except (CacheagentError, OSError) as e:
            self.announced = None
            self._failed(f"announcing plan {self.plan_id}", e)
            return False
        self.announced = len(refs)
        return True

    def _advance(self, pos: int) -> None:
        try:
            self._clients.get().advance(self.plan_id, pos)
        except (CacheagentError, OSError) as e:
            self._failed(f"advancing plan {self.plan_id}", e)

    def __iter__(self) -> Iterator[Any]:
        order = list(iter(self.sampler))
        refs: List[ObjectRef] = []
        try:
            for item in order:
                refs.extend(object_of(self.paths[i], self.mount_root) for i in _indices(item))
        except (ValueError, IndexError) as e:
            # bad paths are the caller's bug, but the plan is advisory: train on
            self._failed("mapping indices to objects", e)
            refs = []
        planned = bool(refs) and self._announce(refs)
        pos = last_pos = 0
        last_t = time.monotonic()
        for item in order:
            if planned and pos > last_pos and (pos - last_pos >= self.advance_every
                                              or time.monotonic() - last_t >= self.advance_interval):
                self._advance(pos)
                last_pos, last_t = pos, time.monotonic()
            yield item
            pos += len(item) if isinstance(item, (list, tuple)) else 1
        if planned and pos > last_pos:
            self._advance(pos)

    def close(self) -> None:
        """Drop the plan and close the client. The sampler can be iterated
        again (a new plan is announced)."""
        try:
            if self.announced is not None:
                self._clients.get().drop_plan(self.plan_id)
        except (CacheagentError, OSError) as e:
            self._failed(f"dropping plan {self.plan_id}", e)
        finally:
            self.announced = None
            self._clients.close()

    def __enter__(self) -> "PlannedSampler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Decoder = Callable[[memoryview, ObjectRef], Any]


class Dataset:
    """A map-style dataset of objects, read through leases.

    ``dataset[i]`` leases ``uris[i]`` (a ``gs://`` URI, or a path under
    ``mount_root``) and returns:

    * with ``decode``: ``decode(view, ref)``, where ``view`` is a read-only
      memoryview of the object valid only during the call (copy what you
      keep; decoders such as image or JSON decoders do);
    * else, for names ending in ``.npy``: the numpy array;
    * else: the bytes.

    Lifetime: by default the result is a copy and the lease is released
    before ``__getitem__`` returns, which is what DataLoader workers need
    (the result outlives the call, is collated and pickled). With
    ``zero_copy=True`` arrays and memoryviews are read-only views of the
    daemon's copy, valid while the lease is held: the lease is kept until
    the returned object is garbage collected (views derived from it, such
    as slices, must not outlive it), then released on the client's next
    call. ``zero_copy`` does not apply with ``decode``.

    ``__getitems__(indices)`` (used by DataLoader in torch >= 2.0 for a
    whole batch) first asks the daemon to fetch every object of the batch
    at once (one request; the downloads run in parallel), then leases and
    reads each one.

    Each process (the main one and every DataLoader worker) opens its own
    client on first use; the dataset pickles without it.
    """

    def __init__(self, uris: Sequence[ObjectLike], decode: Optional[Decoder] = None, socket: str = DEFAULT_SOCKET,
                 *, mount_root: Optional[str] = None, zero_copy: bool = False, timeout: float = 30.0) -> None:
        self.uris = uris
        self.decode = decode
        self.zero_copy = zero_copy
        self.mount_root = mount_root
        self._clients = _PerProcessClient(socket, mount_root, timeout)

    def __len__(self) -> int:
        return len(self.uris)

    def _ref(self, index: int) -> ObjectRef:
        return object_of(self.uris[index], self.mount_root)

    def _load(self, client: Client, ref: ObjectRef) -> Any:
        lease: Optional[Lease] = client.open(ref)
        try:
            if self.decode is not None:
                view = lease.bytes()
                try:
                    return self.decode(view, ref)
                finally:
                    view.release()
            if ref.name.endswith(".npy"):
                value: Any = lease.array()
                if not self.zero_copy:
                    return value.copy()
            else:
                view = lease.bytes()
                if not self.zero_copy:
                    try:
                        return bytes(view)
                    finally:
                        view.release()
                value = view
            _keep_until_collected(value, lease)
            lease = None  # released when value goes
            return value
        finally:
            if lease is not None:
                lease.close()

    def __getitem__(self, index: int) -> Any:
        return self._load(self._clients.get(), self._ref(index))

    def __getitems__(self, indices: Sequence[int]) -> List[Any]:
        client = self._clients.get()
        refs = [self._ref(i) for i in indices]
        if len(refs) > 1:
            client.fetch(refs)
        return [self._load(client, r) for r in refs]

    def close(self) -> None:
        """Close this process's client (its leases go with it)."""
        self._clients.close()


def _keep_until_collected(value: Any, lease: Lease) -> None:
    import weakref

    # Lease.__del__ queues the release without I/O; the finaliser only drops
    # the last reference to the lease.
    holder: List[Optional[Lease]] = [lease]
    weakref.finalize(value, holder.clear)
