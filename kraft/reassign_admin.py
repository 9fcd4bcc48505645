"""The controller's side of ALTER_PARTITION_REASSIGNMENTS, DECOMMISSION_BROKER, UNREGISTER_BROKER.

Theory of operation
-------------------
Each handler runs under the service's decision lock (``ControllerService._guard``), decides
with the pure functions of :mod:`rafka.kraft.reassign` against the current image, proposes the
records as one guarded command and answers with ``metadata_offset`` (a forwarding broker waits
for its own image to reach it, ``broker/handlers/admin.py``). A refused plan raises its named
error, which the guard turns into ``{error, message}`` — nothing was written.

``complete_due`` is called by the service's periodic loop: it proposes the
switch of every reassignment whose target replicas are all in sync. A switch rejected because
the partition moved meanwhile (its epoch guard) is decided again on the next tick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rafka.kraft import reassign

if TYPE_CHECKING:
    from rafka.kraft.service import ControllerService

__all__ = ["alter_partition_reassignments", "complete_due", "decommission_broker",
           "unregister_broker"]


async def complete_due(service: ControllerService) -> None:
    """Propose the due switches (a rejection is logged by the periodic loop, retried next tick)."""
    active = service._require_active()
    d = reassign.complete_reassignments(service._q().image(), active.state)
    if d:
        await service._propose(d)


async def alter_partition_reassignments(service: ControllerService, body: dict[str, Any]
                                        ) -> dict[str, Any]:
    active = service._require_active()
    items = [reassign.ReassignItem(p["topic"], p["partition"],
                                   None if p.get("replicas") is None else tuple(p["replicas"]))
             for p in body["partitions"]]
    d = reassign.alter_reassignments(service._q().image(), items,
                                     int(body.get("throttle_bytes_per_s") or 0), active.state)
    if d:
        await service._propose(d)
    return {"error": 0, "message": None, "metadata_offset": service._q().committed_offset()}


async def decommission_broker(service: ControllerService, body: dict[str, Any]) -> dict[str, Any]:
    active = service._require_active()
    image = service._q().image()
    bid = body["broker_id"]
    if body.get("cancel"):
        d = reassign.recommission_broker(image, bid)
        moved: list[reassign.ReassignItem] = []
    else:
        d, moved = reassign.decommission_broker(
            image, bid, int(body.get("throttle_bytes_per_s") or 0), active.state)
    if d:
        await service._propose(d)
    return {"error": 0, "message": None,
            "moved": [{"topic": it.topic, "partition": it.partition, "replicas": list(it.replicas or ())}
                      for it in moved],
            "metadata_offset": service._q().committed_offset()}


async def unregister_broker(service: ControllerService, body: dict[str, Any]) -> dict[str, Any]:
    service._require_active()
    d = reassign.unregister_broker(service._q().image(), body["broker_id"])
    await service._propose(d)
    return {"error": 0, "message": None, "metadata_offset": service._q().committed_offset()}
