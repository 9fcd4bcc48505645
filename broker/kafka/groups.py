"""Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) on top of
rafka's controller-assigned groups (CONSUMER_GROUP_HEARTBEAT, KIP-848 style).

Theory of operation
-------------------
Who assigns. In the classic protocol one member (the leader) runs the client's assignor and
the coordinator hands its result out in SyncGroup. rafka's controller already computes a
sticky, balanced assignment for every group, writes it to the metadata log (so a controller
failover keeps it) and moves a partition only once its owner's heartbeat released it; native
members and Kafka members may share one group. A client-side leader would make a second
assignment authority whose result the controller would have to adopt as a target — and
during a leader change or a mixed group the two would disagree. So the controller stays the
one authority: *no* member is made the leader (``leader`` is the empty string, which no
member id equals), every SyncGroup carries no assignments, and each member is answered the
partitions the controller assigned it. The client's protocol name is echoed (the group's
first choice that the member offers), so the client runs the *rebalance protocol* that name
implies — eager for range / roundrobin / sticky, cooperative for cooperative-sticky —
while its assignor itself never runs.

Generations. A classic generation belongs to the group, not to a member, and moves once per
rebalance, as in Kafka: this broker (the group's coordinator) keeps a ``ClassicGroup``. A
rebalance starts when a member joins (new, or rejoining on its own with other protocols or
metadata than it joined with) or when a heartbeat finds that the controller's assignment for
its member is no longer what the member was given. A known member of a stable group that
rejoins with the very protocols it joined with is answered the current generation at once, as
Kafka answers a follower whose metadata did not change: the others are not disturbed.
Members are then answered ``REBALANCE_IN_PROGRESS`` on Heartbeat (and SyncGroup) and rejoin;
a JoinGroup waits at the barrier until every known member has rejoined or has been silent for
its session timeout (dropped), bounded by the rebalance timeout (members still missing are
dropped then, and made to leave natively so their partitions move). Then the generation moves
by one and every waiting JoinGroup is answered with it — all members of a stable group report
the same generation id.

Each classic request is also one native heartbeat (a waiting JoinGroup sends one every few
seconds to keep its native membership alive):

* JoinGroup v4+ without a member id (and without an instance id) → no native request:
  ``MEMBER_ID_REQUIRED`` with a member id made here (KIP-394); the member's next JoinGroup
  with it joins natively under that id (the controller takes a member id a join names).
* JoinGroup → ``owned_partitions`` = nothing for an eager member (it revoked everything
  before rejoining), what it still holds for a cooperative one (KIP-429: it keeps them; its
  subscription v1+ names them — the client may not have acted on its last answer yet);
  epoch 0 for a new member (the controller picks the member id), else its current epoch.
* SyncGroup → owning what the member holds; the answer's assignment (a
  ConsumerProtocolAssignment v0) is remembered as *given*. A cooperative member told to
  give partitions up keeps claiming them until it rejoins — KIP-429 clients rejoin once the
  revocation is done — so a partition moves only after its owner let it go.
* Heartbeat → owning what the member holds.
* LeaveGroup → heartbeat with epoch −1.

Native member-epoch errors become the classic ones a client acts on: ``UNKNOWN_MEMBER_ID``
(forget the member id, join afresh) and ``ILLEGAL_GENERATION`` (rejoin). The per-member state
lives in this broker — the group's coordinator, where FindCoordinator sends its members — and
is bounded (``MAX_MEMBERS``, least recently used first out). A coordinator move loses it: the
members are then told ``UNKNOWN_MEMBER_ID`` by the controller or here, and rejoin.

Static members (KIP-345, ``group.instance.id``, JoinGroup v5+) map onto rafka's native static
membership: every native heartbeat of the member carries its instance id. A JoinGroup without
a member id naming an instance id a member of the group holds is a restarted process: the
native join takes the old member's place (the controller hands it the old member epoch and
partitions, with no group epoch bump), the old member id is fenced (``members.py``), and —
when the group is stable and the subscription unchanged — the JoinGroup is answered the
current generation at once, with no rebalance: the other members never hear of it, and the
member's SyncGroup gives it its old partitions. (A changed subscription, or a rebalance under
way, joins the barrier as any rejoin does.) A request naming a fenced member id, or an instance
id another member holds, is ``FENCED_INSTANCE_ID`` (JoinGroup, SyncGroup, Heartbeat,
OffsetCommit, TxnOffsetCommit, LeaveGroup). A static member that does not rejoin a rebalance
is not dropped when it completes (as in Kafka): its partitions wait for it until its session
times out. LeaveGroup v3+ names members by member id or by instance id (an admin removing a
static member: its partitions move at once).

The subscription is read from the first protocol's metadata (ConsumerProtocolSubscription:
``int16 version``, then the topics; later versions only append fields).
"""

from __future__ import annotations

import io
import struct
from typing import Any

import trio
from kio.index import load_entity_schema
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from rafka.broker.kafka.codec import KafkaRequest, build
from rafka.broker.kafka.context import call_native, kafka_error, ms
from rafka.broker.kafka.members import MAX_MEMBERS, ClassicGroup, ClassicGroups, Member
from rafka.wire.protocol import ApiKey

__all__ = ["ClassicGroups", "MAX_MEMBERS", "join_group", "sync_group", "heartbeat", "leave_group",
           "fenced"]

NONE, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS = 0, 25, 22, 27
FENCED_INSTANCE_ID = 82
MEMBER_ID_REQUIRED = 79
INCONSISTENT_GROUP_PROTOCOL = 23
COOPERATIVE = frozenset({"cooperative-sticky"})  # protocol names whose clients run KIP-429
_FENCED_MEMBER_EPOCH, _STALE_MEMBER = 110, 1007
_VERSION = struct.Struct(">h")
_Subscription = load_entity_schema("consumer_protocol_subscription", 0, EntityType.data)
_Subscription1 = load_entity_schema("consumer_protocol_subscription", 1, EntityType.data)
_Assignment = load_entity_schema("consumer_protocol_assignment", 0, EntityType.data)


def decode_subscription(metadata: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription (any version: v0's fields lead)."""
    if len(metadata) < 2:
        raise ValueError("subscription shorter than its version")
    sub, _ = entity_reader(_Subscription)(metadata, 2)
    return [str(t) for t in sub.topics]


def decode_owned(metadata: bytes) -> frozenset[tuple[str, int]] | None:
    """The partitions a ConsumerProtocolSubscription v1+ says its member holds (KIP-429);
    ``None`` for v0, which does not say, or a subscription that does not parse."""
    if len(metadata) < 2 or _VERSION.unpack_from(metadata)[0] < 1:
        return None
    try:
        sub, _ = entity_reader(_Subscription1)(metadata, 2)
    except Exception:  # noqa: BLE001 - then we do not know; the caller keeps its own view
        return None
    return frozenset((str(t.topic), p) for t in sub.owned_partitions for p in t.partitions)


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
    if m is not None and m.instance_id:
        body["instance_id"] = m.instance_id
    return await call_native(ctx, req, ApiKey.CONSUMER_GROUP_HEARTBEAT, body)


def _instance(body: Any) -> str:
    """The request's group.instance.id ("" for a dynamic member or a version without it)."""
    return getattr(body, "group_instance_id", None) or ""


def _unknown(groups: ClassicGroups, group: str, member_id: str, instance_id: str) -> int:
    """The error for a request naming a member this broker does not have."""
    return FENCED_INSTANCE_ID if groups.is_fenced(group, member_id, instance_id) else UNKNOWN_MEMBER_ID


def fenced(ctx: Any, group: str, member_id: str, instance_id: str) -> bool:
    """Whether a request of ``member_id`` (e.g. an OffsetCommit) comes from a static member a
    newer process with the same instance id replaced."""
    return ctx.groups.is_fenced(group, member_id, instance_id)


def commit_topics(body: Any) -> list[dict[str, Any]]:
    """The native commit's topics of an OffsetCommit / TxnOffsetCommit body."""
    return [{"name": t.name, "partitions": [
        {"partition": p.partition_index, "offset": p.committed_offset,
         "metadata": p.committed_metadata,
         "leader_epoch": getattr(p, "committed_leader_epoch", -1)}
        for p in t.partitions]} for t in body.topics]


def fenced_commit_answer(ctx: Any, body: Any, generation: int) -> dict[str, Any] | None:
    """The answer to an OffsetCommit / TxnOffsetCommit of a classic member that a newer
    process with its instance id replaced (KIP-345: FENCED_INSTANCE_ID per partition), or
    None: the commit goes ahead."""
    if generation < 0 or not fenced(ctx, body.group_id, body.member_id, _instance(body)):
        return None
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": FENCED_INSTANCE_ID}
                                        for p in t.partitions]} for t in body.topics]}


def _member_error(code: int) -> int:
    if code in (UNKNOWN_MEMBER_ID, _FENCED_MEMBER_EPOCH, _STALE_MEMBER):
        return UNKNOWN_MEMBER_ID
    return kafka_error(code)


def _absorb(m: Member, native: dict[str, Any]) -> None:
    """What a native heartbeat answer tells about its member."""
    m.epoch = native["member_epoch"]
    m.metadata_offset = native.get("metadata_offset")
    m.latest = _parts(native.get("assignment"))
    m.last_seen = trio.current_time()


def _protocol(groups: ClassicGroups, group: str, offered: list[str]) -> str:
    """The group's protocol: that of its members so far when this member offers it, else
    this member's first choice (Kafka picks one all members support)."""
    g = groups.groups.get(group)
    for mid in g.members if g is not None else ():
        other = groups.members.get((group, mid))
        if other is not None and other.protocol in offered:
            return other.protocol
    return offered[0]


async def _leave_natively(ctx: Any, req: KafkaRequest, group: str, member_id: str) -> None:
    await _beat(ctx, req, group, member_id, -1, None, None)


async def _complete(ctx: Any, req: KafkaRequest, groups: ClassicGroups, group: str,
                    g: ClassicGroup) -> None:
    """End the rebalance: members that did not rejoin are dropped (and leave natively, so the
    controller moves their partitions now), the generation moves by one, and every member
    that rejoined is answered with it."""
    g.generation += 1
    g.rebalancing = False
    gone = []
    now = trio.current_time()
    for mid in list(g.members):
        m = groups.members.get((group, mid))
        if m is None:
            continue
        if m.joining:
            m.joining = m.synced = False
            m.generation = g.generation
        elif not (m.instance_id and not m.expired(now)):  # a static member's partitions
            gone.append(mid)  # wait for it until its session times out (KIP-345)
    for mid in gone:
        groups.drop(group, mid)
    g.poke()
    for mid in gone:
        await _leave_natively(ctx, req, group, mid)


def _unchanged_rejoin(g: ClassicGroup, m: Member, sent: tuple[tuple[str, bytes], ...]) -> bool:
    """A rejoin that changes nothing: the group is stable, the member is in its generation and
    its protocols (names and metadata, owned partitions included) are the ones it joined with
    — a cooperative member that revoked partitions says so in its metadata, so its rejoin does
    move the group on, as KIP-429's second rebalance needs."""
    return (not g.rebalancing and not m.joining and m.generation == g.generation
            and bool(m.protocols) and m.protocols == sent)


def _barrier_ready(groups: ClassicGroups, group: str, g: ClassicGroup, now: float) -> bool:
    if now >= g.deadline:
        return True
    for mid in g.members:
        m = groups.members.get((group, mid))
        if m is not None and not m.joining and not m.expired(now):
            return False
    return True


async def join_group(ctx: Any, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    offered = [p.name for p in b.protocols]
    out = {"throttle_time": 0, "generation_id": -1, "protocol_type": "consumer",
           "protocol_name": offered[0] if offered else "", "leader": "",
           "member_id": b.member_id, "members": ()}
    if b.protocol_type != "consumer" or not b.protocols:
        return {**out, "error_code": INCONSISTENT_GROUP_PROTOCOL}
    try:
        topics = decode_subscription(bytes(b.protocols[0].metadata))
    except Exception:  # noqa: BLE001 - a subscription we cannot read
        return {**out, "error_code": INCONSISTENT_GROUP_PROTOCOL}
    groups: ClassicGroups = ctx.groups
    instance = _instance(b)
    session_ms = ms(b.session_timeout)
    if not b.member_id and not instance and req.api_version >= 4:
        # KIP-394: a new dynamic member first learns its member id, then joins with it
        return {**out, "error_code": MEMBER_ID_REQUIRED,
                "member_id": groups.new_pending(b.group_id, session_ms)}
    m = groups.get(b.group_id, b.member_id) if b.member_id else None
    pending = m is None and bool(b.member_id) and groups.take_pending(b.group_id, b.member_id)
    if b.member_id and not pending and (
            m is None or groups.is_fenced(b.group_id, b.member_id, instance)):
        code = _unknown(groups, b.group_id, b.member_id, instance)
        return {**out, "error_code": code,
                "member_id": "" if code == UNKNOWN_MEMBER_ID else b.member_id}
    sent = tuple((p.name, bytes(p.metadata)) for p in b.protocols)
    if m is not None and _unchanged_rejoin(groups.group(b.group_id), m, sent):
        # Kafka answers a known member of a stable group that rejoins with the same protocols
        # (and is not the leader: rafka has none) the current generation at once; its
        # SyncGroup then gives it its assignment. Unless the controller moved its partitions
        # meanwhile: that is a rebalance, below.
        native = await _beat(ctx, req, b.group_id, b.member_id, m.epoch, m.owned, m)
        if native.get("error"):
            groups.drop(b.group_id, b.member_id)
            return {**out, "error_code": _member_error(native["error"]), "member_id": ""}
        _absorb(m, native)
        if m.latest == m.given:
            m.synced = False
            return {**out, "error_code": NONE, "generation_id": m.generation,
                    "member_id": b.member_id, "protocol_name": m.protocol}
    # a restarted static member: it takes the place of the member holding its instance id
    predecessor_id = groups.holder(b.group_id, instance) if not b.member_id else None
    predecessor = groups.members.get((b.group_id, predecessor_id)) if predecessor_id else None
    protocol = _protocol(groups, b.group_id, offered)
    cooperative = protocol in COOPERATIVE
    rebalance_ms = ms(getattr(b, "rebalance_timeout", b.session_timeout))
    new = Member(epoch=0 if m is None else m.epoch, topics=topics, session_timeout_ms=session_ms,
                 rebalance_timeout_ms=rebalance_ms, protocol=protocol, cooperative=cooperative,
                 instance_id=instance, protocols=sent)
    if cooperative:  # KIP-429: a member keeps what it holds across the rebalance, and its
        # subscription says what that is (it may not have acted on its last answer yet)
        chosen = next(p for p in b.protocols if p.name == protocol)
        said = decode_owned(bytes(chosen.metadata))
        held = m.owned if m is not None else frozenset()
        new.owned = said if said is not None else held
        if m is not None:
            new.given, new.generation = m.given, m.generation
    native = await _beat(ctx, req, b.group_id, b.member_id if m or pending else "", new.epoch,
                         new.owned, new)
    if native.get("error"):
        if b.member_id:
            groups.drop(b.group_id, b.member_id)
        return {**out, "error_code": _member_error(native["error"]), "member_id": ""}
    member_id = native["member_id"]
    _absorb(new, native)
    g = groups.group(b.group_id)
    static_rejoin = (predecessor is not None and predecessor_id != member_id
                     and not g.rebalancing and not predecessor.joining
                     and predecessor.topics == topics and predecessor.protocol == protocol)
    if static_rejoin:
        # KIP-345: the group is stable and nothing changed: the current generation at once,
        # no rebalance; SyncGroup hands it the partitions it inherited
        new.generation, new.synced = g.generation, False
    else:
        new.joining = True
    groups.put(b.group_id, member_id, new)  # first, so the group is never empty meanwhile
    if predecessor_id is not None and predecessor_id != member_id:
        groups.take_over(b.group_id, predecessor_id, instance)
    if static_rejoin:
        return {**out, "error_code": NONE, "generation_id": new.generation,
                "member_id": member_id, "protocol_name": protocol}
    g.start_rebalance(trio.current_time(), rebalance_ms)
    g.poke()
    keepalive = max(0.5, min(session_ms / 3000, 3.0))
    while new.joining:
        if groups.members.get((b.group_id, member_id)) is not new:
            code = _unknown(groups, b.group_id, member_id, instance)
            return {**out, "error_code": code, "member_id": ""}
        now = trio.current_time()
        if g.rebalancing and _barrier_ready(groups, b.group_id, g, now):
            await _complete(ctx, req, groups, b.group_id, g)
            continue
        changed = g.changed
        with trio.move_on_after(min(keepalive, max(0.0, g.deadline - now) + 0.01)):
            await changed.wait()
        if new.joining and trio.current_time() - new.last_seen >= keepalive:
            native = await _beat(ctx, req, b.group_id, member_id, new.epoch, new.owned, new)
            if native.get("error"):
                groups.drop(b.group_id, member_id)
                return {**out, "error_code": _member_error(native["error"]), "member_id": ""}
            _absorb(new, native)
    return {**out, "error_code": NONE, "generation_id": new.generation, "member_id": member_id,
            "protocol_name": protocol}


def _generation_error(g: ClassicGroup, m: Member, generation: int) -> int:
    if g.rebalancing or m.joining:
        return REBALANCE_IN_PROGRESS
    if generation != g.generation or m.generation != g.generation:
        return ILLEGAL_GENERATION
    return NONE


async def sync_group(ctx: Any, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    out = {"throttle_time": 0, "protocol_type": "consumer",
           "protocol_name": getattr(b, "protocol_name", None), "assignment": b""}
    groups: ClassicGroups = ctx.groups
    m = groups.get(b.group_id, b.member_id)
    if m is None or groups.is_fenced(b.group_id, b.member_id, _instance(b)):
        return {**out, "error_code": _unknown(groups, b.group_id, b.member_id, _instance(b))}
    code = _generation_error(groups.group(b.group_id), m, b.generation_id)
    if code:
        return {**out, "error_code": code}
    claim = m.owned if m.cooperative else m.latest
    native = await _beat(ctx, req, b.group_id, b.member_id, m.epoch, claim, m)
    if native.get("error"):
        groups.drop(b.group_id, b.member_id)
        return {**out, "error_code": _member_error(native["error"])}
    _absorb(m, native)
    given = m.latest
    if m.cooperative and m.owned - given:
        m.owned = m.owned | given  # released when the member rejoins saying so (KIP-429)
    else:
        m.owned = given
    m.given, m.synced = given, True
    return {**out, "error_code": NONE, "assignment": encode_assignment(m.given)}


async def heartbeat(ctx: Any, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    groups: ClassicGroups = ctx.groups
    m = groups.get(b.group_id, b.member_id)
    if m is None or groups.is_fenced(b.group_id, b.member_id, _instance(b)):
        return {"throttle_time": 0,
                "error_code": _unknown(groups, b.group_id, b.member_id, _instance(b))}
    native = await _beat(ctx, req, b.group_id, b.member_id, m.epoch, m.owned, m)
    if native.get("error"):
        groups.drop(b.group_id, b.member_id)
        return {"throttle_time": 0, "error_code": _member_error(native["error"])}
    _absorb(m, native)
    g = groups.group(b.group_id)
    code = _generation_error(g, m, b.generation_id)
    if code == NONE and m.synced and m.latest != m.given:  # the controller moved partitions: rebalance
        g.start_rebalance(trio.current_time(), m.rebalance_timeout_ms)
        code = REBALANCE_IN_PROGRESS
    return {"throttle_time": 0, "error_code": code}


async def leave_group(ctx: Any, req: KafkaRequest) -> dict[str, Any]:
    """v0-2: the member itself leaves. v3+ (KIP-345): a list of members, each by member id or
    by group.instance.id (an admin removing static members); a member id that does not hold
    the instance id named with it is FENCED_INSTANCE_ID."""
    b = req.body
    groups: ClassicGroups = ctx.groups
    asked = ([(b.member_id, "")] if req.api_version < 3
             else [(x.member_id or "", x.group_instance_id or "") for x in b.members])
    answers = []
    for member_id, instance in asked:
        target = member_id
        if instance:
            holder = groups.holder(b.group_id, instance) or await _native_holder(
                ctx, req, b.group_id, instance)
            code = (UNKNOWN_MEMBER_ID if holder is None else
                    FENCED_INSTANCE_ID if member_id and member_id != holder else NONE)
            target = holder or ""
        else:
            code = _unknown(groups, b.group_id, member_id, "")
            if groups.get(b.group_id, member_id) is not None:
                code = NONE
        if code == NONE:
            native = await _beat(ctx, req, b.group_id, target, -1, None, None)
            code = _member_error(native.get("error") or 0)
            groups.drop(b.group_id, target)
        answers.append({"member_id": member_id, "group_instance_id": instance or None,
                        "error_code": code})
    top = answers[0]["error_code"] if req.api_version < 3 and answers else NONE
    return {"throttle_time": 0, "error_code": top, "members": answers}


async def _native_holder(ctx: Any, req: KafkaRequest, group: str, instance: str) -> str | None:
    """The member id the controller's group has for ``instance`` (a static member this broker
    has no classic state for, e.g. after the coordinator moved)."""
    native = await call_native(ctx, req, ApiKey.DESCRIBE_GROUPS, {"groups": [group]})
    for g in native.get("groups") or []:
        for m in g.get("members") or []:
            if m.get("instance_id") == instance:
                return str(m["member_id"])
    return None


def group_protocol(ctx: Any, group: str) -> str | None:
    """The protocol name (assignor) this broker's classic members of ``group`` run, if any."""
    groups: ClassicGroups = ctx.groups
    g = groups.groups.get(group)
    for mid in g.members if g is not None else ():
        m = groups.members.get((group, mid))
        if m is not None:
            return m.protocol
    return None


def metadata_offset(ctx: Any, group: str) -> int | None:
    """The newest metadata offset any classic member of ``group`` known here was answered.
    OffsetFetch v1–8 names no member, so the fetch waits for all of them: once the coordinator's
    image has the asking member's assignment, the partitions' previous owner can no longer
    commit there (broker/groups/offsets.py)."""
    groups: ClassicGroups = ctx.groups
    g = groups.groups.get(group)
    if g is None:
        return None
    offsets = [m.metadata_offset for mid in g.members
               if (m := groups.members.get((group, mid))) is not None and m.metadata_offset is not None]
    return max(offsets, default=None)


def commit_member(ctx: Any, group: str, member_id: str) -> Member | None:
    """The classic member an OffsetCommit names (its current epoch and metadata offset)."""
    groups: ClassicGroups = ctx.groups
    return groups.get(group, member_id)
