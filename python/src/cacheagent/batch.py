"""Batch: one batch of a :class:`cacheagent.Loader`, numpy views of its ring."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional

from .errors import ClientClosed

if TYPE_CHECKING:  # pragma: no cover
    from .loader import Loader

__all__ = ["Batch"]


class Batch:
    """One batch: ``batch.ids`` (int64 sample ids) and ``batch[name]`` for
    each array of the dataset, numpy views of the loader's ring.

    The views are valid until the batch is released (see the module's
    documentation); :meth:`copy` returns a batch that owns its arrays.
    ``epoch`` and ``index`` place it in the loader's sequence.
    """

    __slots__ = ("arrays", "epoch", "index", "seq", "slot", "_loader", "_owned", "__weakref__")

    def __init__(self, arrays: Dict[str, Any], epoch: int, index: int, seq: int, slot: int,
                 loader: Optional["Loader"]) -> None:
        self.arrays = arrays
        self.epoch, self.index, self.seq, self.slot = epoch, index, seq, slot
        self._loader = loader
        self._owned = loader is None

    @property
    def ids(self) -> Any:
        """The samples' ids (numpy int64), as ``cacheagent loader ids`` prints them."""
        return self.arrays["ids"]

    def __getitem__(self, name: str) -> Any:
        return self.arrays[name]

    def __contains__(self, name: object) -> bool:
        return name in self.arrays

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
        return Batch({k: v.copy() for k, v in self.arrays.items()}, self.epoch, self.index, self.seq, self.slot, None)

    def __repr__(self) -> str:
        return f"<cacheagent.Batch epoch {self.epoch} index {self.index} samples {len(self)} arrays {self.keys()}>"
