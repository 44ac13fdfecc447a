"""The body of a loader session's request (``POST /v1/loaders``, the Go
``loader/spec.Spec``) from :class:`cacheagent.Loader`'s arguments."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, Optional, Tuple


def _default_rank_world() -> Tuple[int, int]:
    """torch.distributed's rank and world size if torch is imported and the
    process group initialised; else RANK / WORLD_SIZE; else 0 and 1."""
    torch = sys.modules.get("torch")
    if torch is not None:
        dist = getattr(torch, "distributed", None)
        try:
            if dist is not None and dist.is_available() and dist.is_initialized():
                return int(dist.get_rank()), int(dist.get_world_size())
        except Exception:  # pragma: no cover - a half-initialised torch
            pass
    return int(os.environ.get("RANK", "0") or 0), int(os.environ.get("WORLD_SIZE", "1") or 1)


def _manifest(manifest: Any) -> Any:
    """A manifest given as a dict, its JSON text or a file's path, decoded."""
    if isinstance(manifest, (str, bytes, os.PathLike)) and not str(
            manifest if not isinstance(manifest, bytes) else manifest.decode()).lstrip().startswith("{"):
        with open(manifest, "rb") as f:  # a manifest file's path
            manifest = f.read()
    return json.loads(manifest) if isinstance(manifest, (str, bytes)) else manifest


def session_request(data: Optional[str], pattern: Optional[str], manifest: Any, batch_size: int,
                    strings: Dict[str, Optional[str]], ints: Dict[str, int], drop_last: bool,
                    wrap: bool) -> Dict[str, Any]:
    """The request: the dataset, then the settings in ``strings`` and
    ``ints`` (by their JSON names) that are set, then the flags."""
    req: Dict[str, Any] = {"batch_size": int(batch_size)}
    if data is not None:
        req["data"] = str(data)
    if pattern is not None:
        req["pattern"] = pattern
    if manifest is not None:
        req["manifest"] = _manifest(manifest)
    req.update({k: str(v) for k, v in strings.items() if v})
    req.update({k: int(v) for k, v in ints.items() if v})
    if drop_last:
        req["drop_last"] = True
    if not wrap:
        req["tail"] = "drop"
    return req
