"""Object names: ``gs://`` URIs and paths under a mount.

:func:`parse_uri` parses ``gs://BUCKET[/PATH][#GENERATION]`` exactly as the
Go side does (``fetch.ParseURI``): a trailing ``#`` followed only by ASCII
digits pins a (positive, 64-bit) generation; any other ``#`` is part of the
name, as GCS allows; the bucket is required; the path is kept verbatim.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

__all__ = ["URI", "ObjectRef", "parse_uri", "parse_object", "parse_prefix", "object_of", "ObjectLike"]

_MAX_GENERATION = (1 << 63) - 1


@dataclass(frozen=True)
class ObjectRef:
    """One object, at a pinned generation or (``generation == 0``) the live one."""

    bucket: str
    name: str
    generation: int = 0

    def to_json(self) -> Dict[str, Any]:
        """The object as the daemon's ObjectRef JSON."""
        d: Dict[str, Any] = {"bucket": self.bucket, "name": self.name}
        if self.generation:
            d["generation"] = self.generation
        return d

    def __str__(self) -> str:
        s = f"gs://{self.bucket}/{self.name}"
        return f"{s}#{self.generation}" if self.generation else s


@dataclass(frozen=True)
class URI:
    """A parsed ``gs://BUCKET[/PATH][#GENERATION]``.

    ``path`` is an object name or a prefix (possibly empty: the whole
    bucket); ``generation`` is 0 unless pinned.
    """

    bucket: str
    path: str = ""
    generation: int = 0

    def object(self) -> ObjectRef:
        """The object this URI names; ValueError if its path is empty."""
        if not self.path:
            raise ValueError(f"{str(self)!r} has no object name")
        return ObjectRef(self.bucket, self.path, self.generation)

    def __str__(self) -> str:
        s = f"gs://{self.bucket}/{self.path}"
        return f"{s}#{self.generation}" if self.generation else s


def _is_digits(s: str) -> bool:
    return s != "" and all("0" <= c <= "9" for c in s)


def parse_uri(s: str) -> URI:
    """Parse ``gs://BUCKET[/PATH][#GENERATION]``; ValueError if malformed."""
    if not isinstance(s, str) or not s.startswith("gs://"):
        raise ValueError(f"{s!r:.200} is not a gs://BUCKET/PATH URI")
    rest = s[len("gs://"):]
    generation = 0
    i = rest.rfind("#")
    if i >= 0 and _is_digits(rest[i + 1:]):
        g = int(rest[i + 1:])
        if g <= 0 or g > _MAX_GENERATION:
            raise ValueError(f"{s!r:.200}: bad generation {rest[i + 1:]!r:.40}")
        rest, generation = rest[:i], g
    bucket, _, path = rest.partition("/")
    if not bucket:
        raise ValueError(f"{s!r:.200} has no bucket")
    if generation and not path:
        raise ValueError(f"{s!r:.200} pins a generation but names no object")
    return URI(bucket, path, generation)


def parse_object(s: str) -> ObjectRef:
    """Parse a URI that names one object (its path must not be empty)."""
    return parse_uri(s).object()


def parse_prefix(s: str) -> URI:
    """Parse a URI naming a bucket or prefix, which cannot pin a generation."""
    u = parse_uri(s)
    if u.generation:
        raise ValueError(f"{s!r:.200}: a prefix cannot pin a generation")
    return u


ObjectLike = Union[str, "os.PathLike[str]", ObjectRef]
"""What names an object: a ``gs://`` URI, a path under a mount, or an ObjectRef."""


def object_of(obj: ObjectLike, mount_root: Optional[str] = None) -> ObjectRef:
    """Return the object ``obj`` names.

    ``obj`` is an :class:`ObjectRef`, a ``gs://`` URI, or, when
    ``mount_root`` is given, a path under the mount root laid out as
    ``<mount_root>/<bucket>/<name>`` (the layout of ``cacheagent mount``:
    ``/mnt/gcs/my-bucket/train/x.npy`` is ``gs://my-bucket/train/x.npy``).
    Paths are made absolute, but not resolved through symlinks, before
    the mount root is stripped. ValueError if ``obj`` names no object.
    """
    if isinstance(obj, ObjectRef):
        return obj
    s = os.fspath(obj)
    if not isinstance(s, str):
        raise ValueError(f"{obj!r:.200} is not a str path or URI")
    if s.startswith("gs://"):
        return parse_object(s)
    if mount_root is None:
        raise ValueError(f"{s!r:.200} is not a gs:// URI (pass mount_root= to use paths under a mount)")
    root = os.path.abspath(os.fspath(mount_root))
    path = os.path.abspath(s)
    rel = os.path.relpath(path, root) if path.startswith(root.rstrip("/") + "/") else ""
    bucket, _, name = rel.partition("/")
    if not bucket or not name:
        raise ValueError(f"{s!r:.200} is not a path to an object under the mount root {root!r}")
    return ObjectRef(bucket, name)
