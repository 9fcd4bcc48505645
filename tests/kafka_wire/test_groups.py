"""The classic group adapter's pure parts (broker/kafka/groups.py): subscriptions of every
ConsumerProtocolSubscription version are read, assignments are written as Kafka clients
read them, and the member table stays bounded."""

from __future__ import annotations

import io
import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_entity_schema
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from rafka.broker.kafka.codec import build
from rafka.broker.kafka.groups import (
    ClassicGroups,
    Member,
    decode_owned,
    decode_subscription,
    encode_assignment,
)

names = st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=8)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 3), st.lists(names, max_size=5))
def test_subscription_of_any_version(version: int, topics: list[str]) -> None:
    cls = load_entity_schema("consumer_protocol_subscription", version, EntityType.data)
    data = {"topics": topics, "user_data": b"u", "owned_partitions": [
        {"topic": "x", "partitions": [1]}], "generation_id": 4, "rack_id": "r"}
    buf = io.BytesIO()
    entity_writer(cls)(buf, build(cls, data))
    assert decode_subscription(struct.pack(">h", version) + buf.getvalue()) == topics


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 3), st.frozensets(st.tuples(names, st.integers(0, 100)), max_size=6))
def test_owned_partitions_of_a_subscription(version: int, owned: frozenset[tuple[str, int]]) -> None:
    """A cooperative member's JoinGroup names what it holds (v1+); v0 does not say."""
    cls = load_entity_schema("consumer_protocol_subscription", version, EntityType.data)
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(owned):
        by_topic.setdefault(t, []).append(p)
    data = {"topics": ["t"], "user_data": None, "generation_id": 4, "rack_id": None,
            "owned_partitions": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
    buf = io.BytesIO()
    entity_writer(cls)(buf, build(cls, data))
    raw = struct.pack(">h", version) + buf.getvalue()
    assert decode_owned(raw) == (None if version == 0 else owned)
    assert decode_owned(raw[:5]) in (None, frozenset())  # cut short: not trusted, no crash


@settings(max_examples=50, deadline=None)
@given(st.frozensets(st.tuples(names, st.integers(0, 100)), max_size=10))
def test_assignment_reads_back(parts: frozenset[tuple[str, int]]) -> None:
    raw = encode_assignment(parts)
    assert struct.unpack_from(">h", raw)[0] == 0
    cls = load_entity_schema("consumer_protocol_assignment", 0, EntityType.data)
    entity, used = entity_reader(cls)(raw, 2)
    assert used == len(raw) - 2
    assert {(t.topic, p) for t in entity.assigned_partitions for p in t.partitions} == parts


def test_member_table_is_bounded_least_recently_used_out() -> None:
    groups = ClassicGroups(max_members=3)
    for i in range(3):
        groups.put("g", f"m{i}", Member(epoch=i, topics=["t"], session_timeout_ms=10_000))
    assert groups.get("g", "m0") is not None  # m0 used: m1 is now the oldest
    groups.put("g", "m3", Member(epoch=3, topics=["t"], session_timeout_ms=10_000))
    assert sorted(m for _, m in groups.members) == ["m0", "m2", "m3"]


def test_a_static_instance_taken_over_fences_the_old_member_id() -> None:
    """KIP-345 bookkeeping: the instance id names its newest member; the member id it replaced
    is fenced (and so is any member id naming an instance id another member holds); the fenced
    ids are bounded like the members."""
    groups = ClassicGroups(max_members=2)
    groups.put("g", "old", Member(epoch=1, topics=["t"], session_timeout_ms=10_000, instance_id="i"))
    assert groups.holder("g", "i") == "old" and not groups.is_fenced("g", "old", "i")
    groups.take_over("g", "old", "i")
    groups.put("g", "new", Member(epoch=1, topics=["t"], session_timeout_ms=10_000, instance_id="i"))
    assert groups.holder("g", "i") == "new" and groups.get("g", "old") is None
    assert groups.is_fenced("g", "old", "") and groups.is_fenced("g", "other", "i")
    assert not groups.is_fenced("g", "new", "i") and not groups.is_fenced("g", "", "i")
    groups.drop("g", "new")
    assert groups.holder("g", "i") is None  # a dropped member frees its instance id
    for n in range(3):
        groups.take_over("g", f"gone{n}", "j")
    assert len(groups.fenced) == 2 and not groups.is_fenced("g", "old", "")


async def test_a_pending_member_id_joins_once_within_its_session(autojump_clock) -> None:  # type: ignore[no-untyped-def]
    """KIP-394 bookkeeping: a member id handed out with MEMBER_ID_REQUIRED is good for one
    join within the session timeout; the pending ids are bounded like the members."""
    import trio

    groups = ClassicGroups(max_members=2)
    a, b = groups.new_pending("g", 10_000), groups.new_pending("g", 10_000)
    assert a != b
    assert groups.take_pending("g", a) and not groups.take_pending("g", a)  # once
    assert not groups.take_pending("other", b)  # another group's id
    late = groups.new_pending("g", 10_000)
    await trio.sleep(11)
    assert not groups.take_pending("g", late)  # its session timeout passed
    for _ in range(3):
        groups.new_pending("g", 10_000)
    assert len(groups.pending) == 2


class _NativeGroup:
    """A stand-in for the controller's CONSUMER_GROUP_HEARTBEAT, just enough for the classic
    layer's static-membership paths: one topic of two partitions, all to the first member;
    a join naming a held instance id takes that member's place, epoch and partitions."""

    def __init__(self) -> None:
        self.members: dict[str, dict] = {}  # type: ignore[type-arg]
        self.made = 0

    async def dispatch(self, req):  # type: ignore[no-untyped-def]
        b = req.body
        mid, epoch, inst = b.get("member_id") or "", b["member_epoch"], b.get("instance_id") or ""
        if epoch == -1:
            self.members.pop(mid, None)
            return {"error": 0, "member_id": mid, "member_epoch": -1, "assignment": None}
        if epoch == 0:
            if not mid:
                self.made += 1
                mid = f"m{self.made}"
            old = next((k for k, v in self.members.items() if inst and v["instance"] == inst), None)
            if old is not None:
                self.members[mid] = {**self.members.pop(old), "instance": inst}
            else:
                parts = [] if self.members else [0, 1]
                self.members[mid] = {"epoch": 1, "instance": inst, "parts": parts}
        elif mid not in self.members:
            held = any(inst and v["instance"] == inst for v in self.members.values())
            return {"error": 82 if held else 25, "member_id": mid, "member_epoch": epoch}
        m = self.members[mid]
        return {"error": 0, "member_id": mid, "member_epoch": m["epoch"], "metadata_offset": 0,
                "assignment": [{"name": "t", "partitions": m["parts"]}]}


def _join_request(member_id: str, instance: str | None, version: int = 7,  # type: ignore[no-untyped-def]
                  topics: list[str] | None = None):
    from rafka.broker.kafka.codec import KafkaRequest, request_schema

    sub = load_entity_schema("consumer_protocol_subscription", 0, EntityType.data)
    buf = io.BytesIO()
    entity_writer(sub)(buf, build(sub, {"topics": topics or ["t"], "user_data": None}))
    body = build(request_schema(11, version), {
        "group_id": "g", "session_timeout": 10_000, "rebalance_timeout": 10_000,
        "member_id": member_id, "group_instance_id": instance, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": struct.pack(">h", 0) + buf.getvalue()}]})
    return KafkaRequest(11, version, 1, "test", body)


def _heartbeat_request(member_id: str, generation: int, instance: str | None):  # type: ignore[no-untyped-def]
    from rafka.broker.kafka.codec import KafkaRequest, request_schema

    body = build(request_schema(12, 4), {"group_id": "g", "generation_id": generation,
                                         "member_id": member_id, "group_instance_id": instance})
    return KafkaRequest(12, 4, 2, "test", body)


async def test_a_lone_static_member_restarting_keeps_the_groups_generation() -> None:
    """The restarted process of a group's only (static) member is answered the current
    generation at once — the group is not forgotten and restarted at generation 0 while the
    old member id is fenced — and the old member id is then FENCED_INSTANCE_ID."""
    from types import SimpleNamespace

    from rafka.broker.kafka.groups import heartbeat, join_group

    native = _NativeGroup()
    ctx = SimpleNamespace(dispatch=native.dispatch, groups=ClassicGroups())
    first = await join_group(ctx, _join_request("", "i"))  # static: no MEMBER_ID_REQUIRED
    assert first["error_code"] == 0 and first["member_id"] == "m1"
    generation = first["generation_id"]
    assert generation >= 1
    again = await join_group(ctx, _join_request("", "i"))  # the restarted process
    assert again["error_code"] == 0 and again["member_id"] == "m2"
    assert again["generation_id"] == generation == ctx.groups.group("g").generation
    assert (await heartbeat(ctx, _heartbeat_request("m1", generation, "i")))["error_code"] == 82
    dynamic = await join_group(ctx, _join_request("", None))
    assert dynamic["error_code"] == 79 and dynamic["member_id"]  # KIP-394 for dynamic ones


def _sync_request(member_id: str, generation: int):  # type: ignore[no-untyped-def]
    from rafka.broker.kafka.codec import KafkaRequest, request_schema

    body = build(request_schema(14, 3), {"group_id": "g", "generation_id": generation,
                                         "member_id": member_id, "group_instance_id": None,
                                         "assignments": []})
    return KafkaRequest(14, 3, 3, "test", body)


async def _dynamic_member(ctx, topics: list[str] | None = None) -> dict:  # type: ignore[no-untyped-def,type-arg]
    from rafka.broker.kafka.groups import join_group, sync_group

    first = await join_group(ctx, _join_request("", None))
    assert first["error_code"] == 79  # KIP-394: learn the member id first
    joined = await join_group(ctx, _join_request(first["member_id"], None, topics=topics))
    assert joined["error_code"] == 0
    synced = await sync_group(ctx, _sync_request(joined["member_id"], joined["generation_id"]))
    assert synced["error_code"] == 0
    return joined


async def test_a_known_member_rejoining_unchanged_keeps_the_generation(autojump_clock) -> None:  # type: ignore[no-untyped-def]
    """A member of a stable group that rejoins with the protocols it joined with is answered
    the current generation at once (as Kafka answers a follower with unchanged metadata): no
    rebalance, the other member's heartbeat stays NONE. A rejoin with another subscription
    moves the generation. Before the change every rejoin started a rebalance."""
    from types import SimpleNamespace

    import trio
    from rafka.broker.kafka.groups import heartbeat, join_group, sync_group

    native = _NativeGroup()
    ctx = SimpleNamespace(dispatch=native.dispatch, groups=ClassicGroups())
    a = await _dynamic_member(ctx)
    got: dict[str, dict] = {}  # type: ignore[type-arg]

    async def second() -> None:
        got["b"] = await _dynamic_member(ctx)

    async with trio.open_nursery() as nursery:  # a second member: one rebalance, a rejoins
        nursery.start_soon(second)
        while not ctx.groups.group("g").rebalancing:
            await trio.sleep(0.01)
        told = await heartbeat(ctx, _heartbeat_request(a["member_id"], a["generation_id"], None))
        assert told["error_code"] == 27  # REBALANCE_IN_PROGRESS
        rejoined = await join_group(ctx, _join_request(a["member_id"], None))
        assert rejoined["error_code"] == 0
        await sync_group(ctx, _sync_request(a["member_id"], rejoined["generation_id"]))
    b, generation = got["b"], ctx.groups.group("g").generation
    assert b["generation_id"] == rejoined["generation_id"] == generation == a["generation_id"] + 1
    again = await join_group(ctx, _join_request(a["member_id"], None))  # unchanged
    assert again["error_code"] == 0 and again["generation_id"] == generation
    assert ctx.groups.group("g").generation == generation and not ctx.groups.group("g").rebalancing
    assert (await sync_group(ctx, _sync_request(a["member_id"], generation)))["error_code"] == 0
    assert (await heartbeat(ctx, _heartbeat_request(b["member_id"], generation, None)))["error_code"] == 0
    changed = await join_group(ctx, _join_request(a["member_id"], None, topics=["t", "u"]))
    assert changed["error_code"] == 0 and changed["generation_id"] == generation + 1


async def test_a_classic_members_offset_fetch_waits_for_the_groups_newest_assignment() -> None:
    """OffsetFetch v1–8 names no member, so the native fetch carries the newest metadata offset
    any classic member of the group was answered: the coordinator answers once its image has
    that assignment, after which the partitions' previous owner cannot commit there (queue
    chaos seed 3, session 28; broker/groups/offsets.py)."""
    from types import SimpleNamespace

    from rafka.broker.kafka import apis
    from rafka.broker.kafka.codec import KafkaRequest, request_schema

    groups = ClassicGroups()
    groups.put("g", "a", Member(epoch=3, topics=["t"], session_timeout_ms=10_000, metadata_offset=40))
    groups.put("g", "b", Member(epoch=1, topics=["t"], session_timeout_ms=10_000, metadata_offset=57))
    groups.put("g", "c", Member(epoch=1, topics=["t"], session_timeout_ms=10_000))  # not answered yet
    groups.put("h", "d", Member(epoch=9, topics=["t"], session_timeout_ms=10_000, metadata_offset=99))
    sent: list[dict] = []

    async def dispatch(request):  # type: ignore[no-untyped-def]
        sent.append(request.body)
        return {"topics": []}

    ctx = SimpleNamespace(groups=groups, dispatch=dispatch)
    for group, wanted in (("g", 57), ("other", None)):
        body = build(request_schema(9, 7), {"group_id": group, "topics": None, "require_stable": False})
        await apis.offset_fetch(ctx, KafkaRequest(9, 7, 1, "c", body))  # type: ignore[arg-type]
        assert sent[-1].get("min_metadata_offset") == wanted, sent[-1]
