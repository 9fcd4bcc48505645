"""The controller's side of ALTER_PARTITION_REASSIGNMENTS, DECOMMISSION_BROKER, UNREGISTER_BROKER.

Theory of operation
-------------------
Each API has a pure ``decide_*`` function: the request body, the current image and the active
term's state in; the ``Decision`` (from :mod:`rafka.kraft.reassign`) and the answer out, or
the plan's named error raised — nothing was written, and the service's guard turns it into
``{error, message}``. The handlers (``HANDLERS``, against the service's narrow
:class:`~rafka.kraft.admin_context.AdminContext`) run under its decision lock, propose the
records as one guarded command and answer with ``metadata_offset`` (a forwarding broker waits
for its own image to reach it, ``broker/handlers/admin.py``).

``complete_due`` is called by the service's periodic loop: it proposes the
switch of every reassignment whose target replicas are all in sync. A switch rejected because
the partition moved meanwhile (its epoch guard) is decided again on the next tick.
"""

from __future__ import annotations

from typing import Any

from rafka.kraft import reassign
from rafka.kraft.admin_context import AdminContext, HandlerTable, answer_with_offset
from rafka.kraft.controller import ControllerState, Decision
from rafka.metadata import MetadataImage
from rafka.wire.protocol import ApiKey

__all__ = ["HANDLERS", "alter_partition_reassignments", "complete_due",
           "decide_alter_partition_reassignments", "decide_decommission_broker",
           "decide_unregister_broker", "decommission_broker", "unregister_broker"]

_DONE: dict[str, Any] = {"error": 0, "message": None}


def _throttle(body: dict[str, Any]) -> int:
    return int(body.get("throttle_bytes_per_s") or 0)


def decide_alter_partition_reassignments(image: MetadataImage, body: dict[str, Any],
                                         state: ControllerState) -> Decision:
    """Start, replace or cancel (``replicas`` None) the reassignments the body lists."""
    items = [reassign.ReassignItem(p["topic"], p["partition"],
                                   None if p.get("replicas") is None else tuple(p["replicas"]))
             for p in body["partitions"]]
    return reassign.alter_reassignments(image, items, _throttle(body), state)


def decide_decommission_broker(image: MetadataImage, body: dict[str, Any], state: ControllerState
                               ) -> tuple[Decision, dict[str, Any]]:
    """Decommission ``broker_id`` (or, with ``cancel``, put it back in service); the answer
    lists the reassignments the decision starts."""
    bid = body["broker_id"]
    if body.get("cancel"):
        d = reassign.recommission_broker(image, bid)
        moved: list[reassign.ReassignItem] = []
    else:
        d, moved = reassign.decommission_broker(image, bid, _throttle(body), state)
    return d, {**_DONE, "moved": [{"topic": it.topic, "partition": it.partition,
                                   "replicas": list(it.replicas or ())} for it in moved]}


def decide_unregister_broker(image: MetadataImage, body: dict[str, Any]) -> Decision:
    return reassign.unregister_broker(image, body["broker_id"])


async def complete_due(ctx: AdminContext) -> None:
    """Propose the due switches (a rejection is logged by the periodic loop, retried next tick)."""
    state = ctx.active_state()
    d = reassign.complete_reassignments(ctx.require_quorum().image(), state)
    if d:
        await ctx.propose(d)


async def alter_partition_reassignments(ctx: AdminContext, body: dict[str, Any]) -> dict[str, Any]:
    state = ctx.active_state()
    d = decide_alter_partition_reassignments(ctx.require_quorum().image(), body, state)
    return await answer_with_offset(ctx, d, _DONE)


async def decommission_broker(ctx: AdminContext, body: dict[str, Any]) -> dict[str, Any]:
    state = ctx.active_state()
    d, answer = decide_decommission_broker(ctx.require_quorum().image(), body, state)
    return await answer_with_offset(ctx, d, answer)


async def unregister_broker(ctx: AdminContext, body: dict[str, Any]) -> dict[str, Any]:
    ctx.active_state()
    d = decide_unregister_broker(ctx.require_quorum().image(), body)
    return await answer_with_offset(ctx, d, _DONE)


HANDLERS: HandlerTable = {
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: alter_partition_reassignments,
    ApiKey.DECOMMISSION_BROKER: decommission_broker,
    ApiKey.UNREGISTER_BROKER: unregister_broker,
}
