"""Plans: telling the daemon the order in which objects will be read.

A plan is the order in which a reader will open objects. The daemon
prefetches ahead of the reader's position and, when the cache is full,
evicts what the announced plans need last. Advancing is advisory: it only
moves the daemon's look-ahead window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Protocol

from .errors import ClientClosed, ResourceNotFound

__all__ = ["Plan", "PlanInfo"]


class _PlanClient(Protocol):
    """What a Plan needs of the client that announced it
    (cacheagent.Client)."""

    def advance(self, plan_id: str, position: int) -> None: ...

    def get_plan(self, plan_id: str) -> "PlanInfo": ...

    def drop_plan(self, plan_id: str) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class PlanInfo:
    """An announced plan as the daemon describes it (``GET /v1/plans``)."""

    id: str
    objects: int
    position: int
    created: str

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "PlanInfo":
        """Build from the daemon's Plan JSON."""
        return cls(str(d["id"]), int(d.get("objects", 0)), int(d.get("position", 0)), str(d.get("created", "")))


class Plan:
    """A handle on an announced plan.

    :meth:`advance` reports the reader's position; :meth:`close` drops the
    plan (and closes the client if the plan owns it, as the ones from
    :func:`cacheagent.plan` do). Plans are context managers.

    Attributes:
        id: the plan's id.
        objects: the number of objects in the plan.
        position: the last position reported through this handle.
    """

    def __init__(self, client: _PlanClient, info: PlanInfo, *, owns_client: bool = False) -> None:
        self.client = client
        self.id = info.id
        self.objects = info.objects
        self.position = info.position
        self.created = info.created
        self._owns_client = owns_client
        self._closed = False

    def advance(self, position: int) -> None:
        """Report that the reader is about to open the object at ``position``
        (0-based; ``len(plan)`` means done)."""
        if self._closed:
            raise ClientClosed(f"cacheagent: plan {self.id} is closed")
        self.client.advance(self.id, position)
        self.position = position

    def info(self) -> PlanInfo:
        """The plan as the daemon describes it now."""
        return self.client.get_plan(self.id)

    def close(self) -> None:
        """Drop the plan. Idempotent; a plan the daemon no longer has is fine."""
        if self._closed:
            return
        self._closed = True
        try:
            self.client.drop_plan(self.id)
        except ResourceNotFound:
            pass
        finally:
            if self._owns_client:
                self.client.close()

    def __len__(self) -> int:
        return self.objects

    def __enter__(self) -> "Plan":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<cacheagent.Plan {self.id} position {self.position}/{self.objects}>"

