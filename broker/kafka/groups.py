"""Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) on top of
rafka's controller-assigned groups (CONSUMER_GROUP_HEARTBEAT, KIP-848 style).

Theory of operation
-------------------
In the classic protocol one member (the leader) computes the assignment client-side and the
coordinator hands it out in SyncGroup. rafka's controller computes assignments itself, so
this adapter makes *no* member the leader (``leader`` is the empty string, which no member
id equals): every member's SyncGroup carries no assignments, and each member is answered the
partitions the controller assigned it. Each classic request becomes one native heartbeat:

* JoinGroup → heartbeat with ``owned_partitions = []`` (a classic member rejoins having
  revoked everything — the eager protocol), epoch 0 for a new member (the controller picks
  the member id), else the member's current epoch. ``generation_id`` = the member epoch.
* SyncGroup → heartbeat that owns what the member was last answered; the answer's
  assignment is encoded as a ConsumerProtocolAssignment v0 and remembered as *given*.
* Heartbeat → heartbeat owning *given*; when the controller's assignment for the member is
  no longer *given* (it must release partitions, or may take more), the answer is
  ``REBALANCE_IN_PROGRESS`` and the member rejoins, releasing everything, so partitions move
  only after their owner let them go — the controller's invariant holds unchanged.
* LeaveGroup → heartbeat with epoch −1.

Native member-epoch errors become the classic ones a client acts on: ``UNKNOWN_MEMBER_ID``
(forget the member id, join afresh) and ``ILLEGAL_GENERATION`` (rejoin). The per-member state
(epoch, given partitions, last metadata offset for commits) lives in this broker — the group's
coordinator, where FindCoordinator sends its members — and is bounded (``MAX_MEMBERS``,
least recently used first out). A coordinator move loses it: the members are then told
``UNKNOWN_MEMBER_ID`` by the controller or here, and rejoin.

The subscription is read from the first protocol's metadata (ConsumerProtocolSubscription:
``int16 version``, then the topics; later versions only append fields). The protocol name
answered is the client's first, so its own assignor is named but never run.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.index import load_entity_schema
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from rafka.broker.kafka.codec import KafkaRequest, build
from rafka.broker.kafka.context import call_native, kafka_error, ms
from rafka.broker.kafka.members import MAX_MEMBERS, ClassicGroups, Member
from rafka.wire.protocol import ApiKey

__all__ = ["ClassicGroups", "MAX_MEMBERS", "join_group", "sync_group", "heartbeat", "leave_group"]

NONE, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS = 0, 25, 22, 27
INCONSISTENT_GROUP_PROTOCOL = 23
_FENCED_MEMBER_EPOCH, _STALE_MEMBER = 110, 1007
_VERSION = struct.Struct(">h")
_Subscription = load_entity_schema("consumer_protocol_subscription", 0, EntityType.data)
_Assignment = load_entity_schema("consumer_protocol_assignment", 0, EntityType.data)


def decode_subscription(metadata: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription (any version: v0's fields lead)."""
    if len(metadata) < 2:
        raise ValueError("subscription shorter than its version")
    sub, _ = entity_reader(_Subscription)(metadata, 2)
    return [str(t) for t in sub.topics]


def encode_assignment(parts: frozenset[tuple[str, int]]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(parts):
        by_topic.setdefault(t, []).append(p)
    entity = build(_Assignment, {"assigned_partitions": [
        {"topic": t, "partitions": ps} for t, ps in by_topic.items()], "user_data": None})
    buf = io.BytesIO()
    entity_writer(_Assignment)(buf, entity)
    return _VERSION.pack(0) + buf.getvalue()


def _tp_list(parts: frozenset[tuple[str, int]]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(parts):
        by_topic.setdefault(t, []).append(p)
    return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


def _parts(assignment: Any) -> frozenset[tuple[str, int]]:
    return frozenset((a["name"], p) for a in assignment or () for p in a["partitions"])


async def _beat(ctx: Any, req: KafkaRequest, group: str, member_id: str, epoch: int,
                owned: frozenset[tuple[str, int]] | None, m: Member | None) -> dict[str, Any]:
    body: dict[str, Any] = {"group_id": group, "member_id": member_id, "member_epoch": epoch,
                            "client_id": req.client_id or ""}
    if owned is not None:
        body["owned_partitions"] = _tp_list(owned)
    if m is not None and epoch >= 0:
        body["subscribed_topics"] = m.topics
        body["session_timeout_ms"] = m.session_timeout_ms
    return await call_native(ctx, req, ApiKey.CONSUMER_GROUP_HEARTBEAT, body)


def _member_error(code: int) -> int:
    if code in (UNKNOWN_MEMBER_ID, _FENCED_MEMBER_EPOCH, _STALE_MEMBER):
        return UNKNOWN_MEMBER_ID
    return kafka_error(code)


async def join_group(ctx: Any, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    protocol = b.protocols[0].name if b.protocols else ""
    out = {"throttle_time": 0, "generation_id": -1, "protocol_type": "consumer",
           "protocol_name": protocol, "leader": "", "member_id": b.member_id, "members": ()}
    if b.protocol_type != "consumer" or not b.protocols:
        return {**out, "error_code": INCONSISTENT_GROUP_PROTOCOL}
    try:
        topics = decode_subscription(bytes(b.protocols[0].metadata))
    except Exception:  # noqa: BLE001 - a subscription we cannot read
        return {**out, "error_code": INCONSISTENT_GROUP_PROTOCOL}
    groups: ClassicGroups = ctx.groups
    m = groups.get(b.group_id, b.member_id) if b.member_id else None
    if b.member_id and m is None:
        return {**out, "error_code": UNKNOWN_MEMBER_ID, "member_id": ""}
    new = Member(epoch=0 if m is None else m.epoch, topics=topics,
                 session_timeout_ms=ms(b.session_timeout))
    native = await _beat(ctx, req, b.group_id, b.member_id if m else "", new.epoch,
                         frozenset(), new)
    if native.get("error"):
        if b.member_id:
            groups.drop(b.group_id, b.member_id)
        return {**out, "error_code": _member_error(native["error"]), "member_id": ""}
    member_id = native["member_id"]
    new.epoch = native["member_epoch"]
    new.metadata_offset = native.get("metadata_offset")
    new.latest = _parts(native.get("assignment"))
    groups.put(b.group_id, member_id, new)
    return {**out, "error_code": NONE, "generation_id": new.epoch, "member_id": member_id}


async def sync_group(ctx: Any, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    out = {"throttle_time": 0, "protocol_type": "consumer",
           "protocol_name": getattr(b, "protocol_name", None), "assignment": b""}
    groups: ClassicGroups = ctx.groups
    m = groups.get(b.group_id, b.member_id)
    if m is None:
        return {**out, "error_code": UNKNOWN_MEMBER_ID}
    native = await _beat(ctx, req, b.group_id, b.member_id, m.epoch, m.latest, m)
    if native.get("error"):
        groups.drop(b.group_id, b.member_id)
        return {**out, "error_code": _member_error(native["error"])}
    m.epoch = native["member_epoch"]
    m.metadata_offset = native.get("metadata_offset")
    m.given = m.latest = _parts(native.get("assignment"))
    return {**out, "error_code": NONE, "assignment": encode_assignment(m.given)}


async def heartbeat(ctx: Any, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    groups: ClassicGroups = ctx.groups
    m = groups.get(b.group_id, b.member_id)
    if m is None:
        return {"throttle_time": 0, "error_code": UNKNOWN_MEMBER_ID}
    native = await _beat(ctx, req, b.group_id, b.member_id, m.epoch, m.given, m)
    if native.get("error"):
        groups.drop(b.group_id, b.member_id)
        return {"throttle_time": 0, "error_code": _member_error(native["error"])}
    m.epoch = native["member_epoch"]
    m.metadata_offset = native.get("metadata_offset")
    m.latest = _parts(native.get("assignment"))
    code = NONE if m.latest == m.given else REBALANCE_IN_PROGRESS
    return {"throttle_time": 0, "error_code": code}


async def leave_group(ctx: Any, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    groups: ClassicGroups = ctx.groups
    ids = [b.member_id] if req.api_version < 3 else [x.member_id for x in b.members]
    answers = []
    for member_id in ids:
        m = groups.get(b.group_id, member_id)
        code = UNKNOWN_MEMBER_ID
        if m is not None:
            native = await _beat(ctx, req, b.group_id, member_id, -1, None, None)
            code = _member_error(native.get("error") or 0)
            groups.drop(b.group_id, member_id)
        answers.append({"member_id": member_id, "group_instance_id": None, "error_code": code})
    top = answers[0]["error_code"] if req.api_version < 3 and answers else NONE
    return {"throttle_time": 0, "error_code": top, "members": answers}


def commit_member(ctx: Any, group: str, member_id: str) -> Member | None:
    """The classic member an OffsetCommit names (its current epoch and metadata offset)."""
    groups: ClassicGroups = ctx.groups
    return groups.get(group, member_id)
