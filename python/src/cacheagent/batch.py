"""Batch: one batch of a :class:`cacheagent.Loader`, numpy views of its ring."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Protocol, Sequence

from .errors import ClientClosed

__all__ = ["Batch", "Field"]


class _Owner(Protocol):
    """What a batch needs of the loader that lent it (cacheagent.Loader)."""

    def _holds(self, b: "Batch", /) -> bool: ...

    def _release_batch(self, b: "Batch", /) -> None: ...


class Field:
    """One field of a WebDataset batch (``batch["jpg"]``): the samples'
    member bytes back to back in ``data`` (numpy uint8) and ``offsets``
    (numpy int64, ``len(batch) + 1`` entries, the first 0): sample ``i``'s
    value is ``data[offsets[i]:offsets[i + 1]]``, empty if the sample has
    no such member. Both are views of the loader's ring (valid as long as
    the batch), as is ``field[i]``; ``field.bytes(i)`` copies one value.
    """

    __slots__ = ("name", "offsets", "data")

    def __init__(self, name: str, offsets: Any, data: Any) -> None:
        self.name, self.offsets, self.data = name, offsets, data

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> Any:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"cacheagent: field {self.name!r}: sample {i} of {n}")
        return self.data[self.offsets[i]:self.offsets[i + 1]]

    def __iter__(self) -> Iterator[Any]:
        data, offs = self.data, self.offsets.tolist()
        for i in range(len(offs) - 1):
            yield data[offs[i]:offs[i + 1]]

    def bytes(self, i: int) -> bytes:
        """Sample ``i``'s value, copied."""
        return self[i].tobytes()

    @property
    def lengths(self) -> Any:
        """Each sample's value's size in bytes (numpy int64)."""
        return self.offsets[1:] - self.offsets[:-1]

    def __repr__(self) -> str:
        return f"<cacheagent.Field {self.name!r} samples {len(self)} bytes {int(self.offsets[-1])}>"


class Batch:
    """One batch: ``batch.ids`` (int64 sample ids) and ``batch[name]`` for
    each array of the dataset, numpy views of the loader's ring. A token
    dataset's batch has one array, ``"tokens"`` (samples of seq_len + 1
    tokens); a WebDataset batch has a :class:`Field` per field name
    (``batch["jpg"]``, names in ``batch.fields``), stored as the arrays
    ``"<field>.offsets"`` and ``"<field>.data"``.

    The views are valid until the batch is released (see the module's
    documentation); :meth:`copy` returns a batch that owns its arrays.
    ``epoch`` and ``index`` place it in the loader's sequence.
    """

    __slots__ = ("arrays", "fields", "epoch", "index", "seq", "slot", "_loader", "_owned", "__weakref__")

    def __init__(self, arrays: Dict[str, Any], epoch: int, index: int, seq: int, slot: int,
                 loader: Optional[_Owner], fields: Sequence[str] = ()) -> None:
        self.arrays = arrays
        self.fields: List[str] = list(fields)
        self.epoch, self.index, self.seq, self.slot = epoch, index, seq, slot
        self._loader = loader
        self._owned = loader is None

    @property
    def ids(self) -> Any:
        """The samples' ids (numpy int64), as ``cacheagent loader ids`` prints them."""
        return self.arrays["ids"]

    def __getitem__(self, name: str) -> Any:
        a = self.arrays.get(name)
        if a is not None:
            return a
        if name in self.fields:
            return Field(name, self.arrays[name + ".offsets"], self.arrays[name + ".data"])
        raise KeyError(name)

    def field(self, name: str) -> Field:
        """The WebDataset field ``name`` (a :class:`Field`)."""
        if name not in self.fields:
            raise KeyError(name)
        return self[name]

    def __contains__(self, name: object) -> bool:
        return name in self.arrays or name in self.fields

    def __len__(self) -> int:
        return len(self.arrays["ids"])

    def keys(self) -> List[str]:
        """The arrays' names (``"ids"`` last)."""
        return list(self.arrays)

    @property
    def valid(self) -> bool:
        """Whether the views still show this batch (its slot is held)."""
        return self._owned or (self._loader is not None and self._loader._holds(self))

    def release(self) -> None:
        """Give the batch's slot back to the daemon now; the views turn
        invalid. Idempotent; a copy's release does nothing."""
        if self._loader is not None:
            self._loader._release_batch(self)

    def copy(self) -> "Batch":
        """A batch with the same arrays copied out of the ring: valid for good."""
        if not self.valid:
            raise ClientClosed(f"cacheagent: batch {self.epoch}/{self.index} was released; copy it before")
        return Batch({k: v.copy() for k, v in self.arrays.items()}, self.epoch, self.index, self.seq, self.slot, None,
                     self.fields)

    def __repr__(self) -> str:
        what = f"fields {self.fields}" if self.fields else f"arrays {self.keys()}"
        return f"<cacheagent.Batch epoch {self.epoch} index {self.index} samples {len(self)} {what}>"
