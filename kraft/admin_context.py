"""The narrow interface between the controller's admin modules and ``ControllerService``.

Theory of operation
-------------------
Each ``kraft/*_admin.py`` module has two layers:

* pure ``decide_*`` functions: the request body and what they read (the metadata image, the
  active term's :class:`~rafka.kraft.controller.ControllerState`, a setting, a placement) in;
  the records to propose (a :class:`~rafka.kraft.controller.Decision`) and/or the answer out,
  or a named ``RafkaError`` raised. No I/O, no clock, no randomness — like
  :mod:`rafka.kraft.controller`, and unit-tested the same way;
* async handlers ``handler(ctx, body) -> body``: read from the context, decide, propose,
  answer (admin answers carry ``metadata_offset``, see ``kraft/service.py``). A module's
  ``HANDLERS`` table maps each ``ApiKey`` it serves to its handler.

The handlers see the service only through :class:`AdminContext`, the few things the glue
needs: the quorum (image, committed offset, dedup table), "am I the active controller" (with
the term's in-memory state), ``propose`` a decision as a guarded command, a replica placement
and the settings. ``ControllerService`` implements it, binds every module's ``HANDLERS`` to
itself and wraps each handler in its guard (active controller only, one decision at a time
under its lock, bounded by ``controller.propose.timeout.ms``, errors turned into
``{error, message}``); its public ``handlers`` mapping is the merge. Tests may drive a
handler with any object that has these members.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from rafka.kraft.controller import ControllerState, Decision
from rafka.kraft.quorum import MetadataQuorum, ProposeResult
from rafka.metadata import MetadataRecord
from rafka.wire.errors import RafkaError
from rafka.wire.protocol import ApiKey

__all__ = ["AdminContext", "AdminHandler", "HandlerTable", "VoterSpec", "answer_with_offset",
           "decide_each", "per_item_error"]

ItemT = TypeVar("ItemT")

VoterSpec = tuple[int, tuple[str, int], tuple[str, int]]  # (id, raft addr, rpc addr)


class AdminContext(Protocol):
    """What an admin handler may ask of the controller service (``ControllerService``)."""

    @property
    def node_id(self) -> int: ...

    @property
    def voters(self) -> Sequence[VoterSpec]:
        """The configured voters (``controller.quorum.voters``), sorted by id."""
        ...

    def require_quorum(self) -> MetadataQuorum:
        """The quorum engine; ``BROKER_NOT_AVAILABLE`` while the service is starting."""
        ...

    def active_state(self) -> ControllerState:
        """The active term's in-memory state; ``NOT_CONTROLLER`` unless this node is active."""
        ...

    def in_doubt(self, request_id: str) -> bool:
        """A proposal of the current term under ``request_id`` whose wait was cut short: its
        command may still commit (False when this node is not active)."""
        ...

    async def propose(self, decision: Decision, request_id: str | None = None) -> ProposeResult:
        """Propose ``decision`` as one guarded command of the current term; returns once it is
        applied and fsynced, or raises the refusal (a guard's error, ``NOT_CONTROLLER``)."""
        ...

    def placement(self) -> tuple[int, int]:
        """A (start index, shift) for :func:`rafka.kraft.controller.place_replicas`."""
        ...

    def setting(self, name: str, default: Any) -> Any:
        """A setting by its Kafka-style name, as the type of ``default``."""
        ...


AdminHandler = Callable[[AdminContext, dict[str, Any]], Awaitable[dict[str, Any]]]
HandlerTable = Mapping[ApiKey, AdminHandler]


def decide_each(items: Iterable[ItemT], decide_one: Callable[[ItemT], tuple[dict[str, Any], list[MetadataRecord]]]
                ) -> tuple[list[dict[str, Any]], Decision]:
    """The per-item results and one ``Decision`` of all their records, in request order, for
    APIs that answer item by item (``decide_one(item) -> (result, records)``, pure)."""
    results: list[dict[str, Any]] = []
    decision = Decision()
    for item in items:
        result, records = decide_one(item)
        decision.records.extend(records)
        results.append(result)
    return results, decision


def per_item_error(name: str, exc: RafkaError) -> dict[str, Any]:
    """One item's refusal in a per-item answer (``{"name", "error", "message"}``)."""
    return {"name": name, "error": int(exc.code), "message": exc.message}


async def answer_with_offset(ctx: AdminContext, decision: Decision, answer: dict[str, Any],
                             *, write: bool = True) -> dict[str, Any]:
    """Propose ``decision`` when it has records (and ``write``), then ``answer`` with the
    committed ``metadata_offset`` a forwarding broker waits for (``broker/handlers/admin.py``)."""
    if decision and write:
        await ctx.propose(decision)
    return {**answer, "metadata_offset": ctx.require_quorum().committed_offset()}
