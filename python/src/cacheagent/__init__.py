"""cacheagent: the Python client of the cacheagent daemon.

The daemon (``cacheagent serve``) caches GCS objects on local NVMe and in
``/dev/shm`` for every process on a machine. This package talks to it over
its control socket:

* :class:`Client` -- status, plans, fetch/promote/prefetch and leases;
* :func:`open` -- lease one object and map its local copy read-only
  (``lease.bytes()``, ``lease.array()`` for ``.npy``);
* :func:`plan` -- announce the order in which objects will be read;
* :mod:`cacheagent.checkpoint` -- save checkpoints through the daemon (a
  local write, uploaded behind training) and restore them;
* :class:`Loader` -- the daemon's Go loader for this process: batches
  gathered into a shared ring (a memfd) and yielded as numpy views, no copy;
* :mod:`cacheagent.sampler` -- ``node_partition``: the shards each node
  reads in the ``"node"`` shuffle, as the Go sampler splits them;
* :mod:`cacheagent.torch` -- ``PlannedSampler`` and ``Dataset`` for PyTorch
  (torch itself is never imported by ``import cacheagent``).

Objects are named by ``gs://BUCKET/NAME[#GENERATION]`` URIs (or paths
under a mount, given ``mount_root``). Errors are
:class:`~cacheagent.errors.CacheagentError` subclasses carrying the
daemon's message. numpy is needed only for ``.npy`` arrays.
"""

from __future__ import annotations

from typing import Optional

from ._version import __version__
from .client import DEFAULT_SOCKET, Client, DaemonInfo
from .errors import (CacheagentError, CheckpointFailed, ChecksumError, ClientClosed, Conflict, DaemonNotRunning,
                     DaemonTimeout, DaemonUnavailable, InternalError, InvalidName, InvalidRequest, LoaderError,
                     NoFleet, NoShm, NoSpace, NotFound, PermissionDenied, ProtocolError, ResourceNotFound,
                     SessionEnded)
from . import checkpoint
from .lease import Lease, ObjectAttrs
from .batch import Field
from .loader import Batch, Loader
from .plan import Plan, PlanInfo
from .client import plan  # after .plan: the function, not the module, is cacheagent.plan
from .uri import URI, ObjectLike, ObjectRef, object_of, parse_object, parse_prefix, parse_uri

__all__ = [
    "__version__", "DEFAULT_SOCKET", "Client", "Loader", "Batch", "Field", "DaemonInfo", "Lease", "ObjectAttrs",
    "Plan", "PlanInfo",
    "URI", "ObjectRef", "ObjectLike", "open", "plan", "parse_uri", "parse_object", "parse_prefix", "object_of",
    "CacheagentError", "NotFound", "InvalidName", "ChecksumError", "NoSpace", "NoShm", "ResourceNotFound",
    "InvalidRequest", "DaemonUnavailable", "DaemonNotRunning", "DaemonTimeout", "SessionEnded", "NoFleet",
    "Conflict", "PermissionDenied", "CheckpointFailed", "LoaderError", "ProtocolError", "InternalError",
    "ClientClosed", "checkpoint",
]


def open(uri: ObjectLike, socket: Optional[str] = None, *, mount_root: Optional[str] = None) -> Lease:
    """Lease one object through a new client and map it read-only.

    The lease owns its client: ``close()`` releases the lease and ends the
    client's session. Use it as a context manager::

        with cacheagent.open("gs://bucket/train/x.npy") as lease:
            x = lease.array()        # read-only view, valid inside the block

    For many objects, keep one :class:`Client` and call ``client.open``.
    """
    c = Client(socket or DEFAULT_SOCKET, mount_root=mount_root)
    try:
        lease = c.open(uri)
    except BaseException:
        c.close()
        raise
    lease._owner = c
    return lease
