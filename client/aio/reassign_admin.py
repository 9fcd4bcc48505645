"""Partition reassignment and broker decommission on the admin client (``rafka partition``,
``rafka broker``; docs/operations.md).

Theory of operation
-------------------
``alter_partition_reassignments(admin, {tp: [replicas] | None})`` sends one
ALTER_PARTITION_REASSIGNMENTS (as kafka-python / confluent-kafka's method of that name; None
cancels); any broker forwards it to the active controller, which validates the whole plan —
a bad entry raises its named error (``InvalidReplicaAssignmentError``,
``InvalidReplicationFactorError``, ``UnknownTopicOrPartitionError``,
``NoReassignmentInProgressError``) and nothing changes — and answers once it is committed.
``throttle_bytes_per_s`` limits the new replicas' catch-up (kafka-reassign-partitions'
``--throttle``).

``list_partition_reassignments(admin)`` asks any broker for the partitions being moved (from its
metadata image), then each of their leaders for the replicas' log end offsets, which gives the
catch-up ``lag`` of every adding replica (None when its leader could not be asked).

``decommission_broker(admin, id)`` moves every replica off a broker (the controller picks the
new brokers, keeping the replication factor) and stops new placements on it;
``broker_replicas(admin, id)`` lists what it still holds, ``wait_...`` poll until done (the
caller bounds the time: ``trio.fail_after``). ``unregister_broker(admin, id)`` then removes a
stopped, empty broker's registration (Kafka's UNREGISTER_BROKER).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import trio
from rafka.client.types import TopicPartition
from rafka.wire.errors import RafkaError
from rafka.wire.protocol import ApiKey

if TYPE_CHECKING:
    from rafka.client.aio.admin import AsyncAdmin

__all__ = ["PartitionReassignment", "alter_partition_reassignments", "broker_replicas",
           "decommission_broker", "list_partition_reassignments", "unregister_broker",
           "wait_decommissioned", "wait_reassignments"]

POLL_INTERVAL_S = 0.2


class PartitionReassignment(NamedTuple):
    replicas: tuple[int, ...]  # the whole set while moving: target + those being removed
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    throttle_bytes_per_s: int  # 0: none
    lag: dict[int, int] | None  # adding replica -> records behind the leader (None: unknown)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing_replicas)


def _tp(key: Any) -> TopicPartition:
    return key if isinstance(key, TopicPartition) else TopicPartition(str(key[0]), int(key[1]))


async def alter_partition_reassignments(
        admin: AsyncAdmin, reassignments: Mapping[Any, Sequence[int] | None], *,
        throttle_bytes_per_s: int = 0) -> None:
    """Move each partition to its target replicas (None: cancel its reassignment)."""
    parts = [{"topic": tp.topic, "partition": tp.partition,
              "replicas": None if r is None else [int(x) for x in r]}
             for tp, r in ((_tp(k), v) for k, v in reassignments.items())]
    resp = await admin._request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
        "partitions": parts, "throttle_bytes_per_s": int(throttle_bytes_per_s),
        "timeout_ms": admin.request_timeout_ms})
    resp.raise_for_error()


def _entry(e: Mapping[str, Any], leos: Mapping[int, int] | None) -> PartitionReassignment:
    lag = None
    if leos is not None and e["leader"] in leos:
        end = leos[e["leader"]]
        lag = {r: max(0, end - max(0, leos.get(r, 0))) for r in e["adding_replicas"]}
    return PartitionReassignment(
        tuple(e["replicas"]), tuple(e["adding_replicas"]), tuple(e["removing_replicas"]),
        tuple(e["isr"]), int(e["leader"]), int(e.get("throttle_bytes_per_s") or 0), lag)


def _leos(e: Mapping[str, Any]) -> dict[int, int] | None:
    raw = e.get("log_end_offsets")
    return None if raw is None else {int(k): int(v) for k, v in raw.items()}


async def list_partition_reassignments(
        admin: AsyncAdmin, partitions: Iterable[Any] | None = None
) -> dict[TopicPartition, PartitionReassignment]:
    """The reassignments in progress (all, or those of ``partitions``), with catch-up lag."""
    body: dict[str, Any] = {"topics": None}
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for tp in map(_tp, partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        body["topics"] = [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
    resp = await admin._request(ApiKey.LIST_PARTITION_REASSIGNMENTS, body)
    resp.raise_for_error()
    entries = {TopicPartition(e["topic"], e["partition"]): e for e in resp.body.get("reassignments") or []}
    leos: dict[TopicPartition, dict[int, int] | None] = {}
    core = admin._core
    by_leader: dict[int, list[TopicPartition]] = {}
    for tp, e in entries.items():
        if e["leader"] >= 0:
            by_leader.setdefault(int(e["leader"]), []).append(tp)
    if by_leader:
        with contextlib.suppress(RafkaError, OSError):
            await core.refresh_metadata()
    for leader, tps in sorted(by_leader.items()):
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        try:
            r = await core.request_node(leader, ApiKey.LIST_PARTITION_REASSIGNMENTS, {
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        except (RafkaError, OSError):
            continue  # lag unknown for these
        for e in r.body.get("reassignments") or []:
            leos[TopicPartition(e["topic"], e["partition"])] = _leos(e)
    return {tp: _entry(e, leos.get(tp)) for tp, e in sorted(entries.items())}


async def _replicas(admin: AsyncAdmin, topics: Iterable[str]) -> dict[TopicPartition, tuple[int, ...]]:
    resp = await admin._request(ApiKey.METADATA, {"topics": sorted(set(topics))})
    resp.raise_for_error()
    return {TopicPartition(t["name"], int(p["partition"])): tuple(p.get("replicas") or ())
            for t in resp.body.get("topics") or [] for p in t.get("partitions") or []}


async def wait_reassignments(admin: AsyncAdmin, targets: Mapping[Any, Sequence[int] | None]) -> None:
    """Until every partition of ``targets`` has switched: no longer listed as moving *and* its
    replicas in METADATA are the target (None: a cancel, not listed). Both checks, because any
    broker may answer, and one whose image is a moment behind would not list a move that has
    just started."""
    want = {_tp(k): None if v is None else tuple(v) for k, v in targets.items()}
    while True:
        moving = await list_partition_reassignments(admin, list(want))
        current = await _replicas(admin, (tp.topic for tp in want))
        if not moving and all(t is None or current.get(tp) == t for tp, t in want.items()):
            return
        await trio.sleep(POLL_INTERVAL_S)


async def decommission_broker(admin: AsyncAdmin, broker_id: int, *, throttle_bytes_per_s: int = 0,
                              cancel: bool = False) -> dict[TopicPartition, tuple[int, ...]]:
    """Start moving every replica off ``broker_id`` (``cancel``: put it back in service);
    returns the reassignments started: partition -> its new replicas."""
    resp = await admin._request(ApiKey.DECOMMISSION_BROKER, {
        "broker_id": int(broker_id), "throttle_bytes_per_s": int(throttle_bytes_per_s),
        "cancel": cancel, "timeout_ms": admin.request_timeout_ms})
    resp.raise_for_error()
    return {TopicPartition(m["topic"], m["partition"]): tuple(m["replicas"])
            for m in resp.body.get("moved") or []}


async def broker_replicas(admin: AsyncAdmin, broker_id: int) -> list[TopicPartition]:
    """Every partition (internal topics included) whose replicas include ``broker_id``."""
    resp = await admin._request(ApiKey.METADATA, {"topics": None})
    resp.raise_for_error()
    return sorted(TopicPartition(t["name"], int(p["partition"]))
                  for t in resp.body.get("topics") or [] for p in t.get("partitions") or []
                  if broker_id in (p.get("replicas") or ()))


async def wait_decommissioned(admin: AsyncAdmin, broker_id: int) -> None:
    """Until ``broker_id`` holds no replica."""
    while await broker_replicas(admin, broker_id):
        await trio.sleep(POLL_INTERVAL_S)


async def unregister_broker(admin: AsyncAdmin, broker_id: int) -> None:
    """Remove a stopped broker that holds no replica from the cluster metadata."""
    resp = await admin._request(ApiKey.UNREGISTER_BROKER, {
        "broker_id": int(broker_id), "timeout_ms": admin.request_timeout_ms})
    resp.raise_for_error()
