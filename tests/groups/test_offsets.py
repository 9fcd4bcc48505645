"""Committed offsets: encoding, the coordinator's cache rebuilt from a real partition log,
member-epoch validation, and the admin APIs (with a fake replica manager around a real log)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import trio
import trio.testing
from rafka.broker.groups.offsets import GroupOffsetsManager
from rafka.broker.groups.offsets_cache import (
    OFFSETS_TOPIC,
    OffsetValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    offsets_partition,
    offsets_topic_spec,
)
from rafka.log.config import LogConfig
from rafka.log.partition_log import PartitionLog
from rafka.metadata import MetadataDelta, MetadataImage, Partition, Topic
from rafka.metadata.groups import GroupEpoch, GroupMember
from rafka.wire.errors import ErrorCode, error_for
from rafka.wire.protocol import ApiKey, validate_request


def test_encoding_round_trip_and_partitioning():
    assert decode_key(encode_key("g", "t", 3)) == ("g", "t", 3)
    v = OffsetValue(42, "meta", 1700, 5)
    assert decode_value(encode_value(v)) == v
    assert encode_value(None) is None and decode_value(None) is None
    # stable, spread, in range
    assert offsets_partition("g", 10) == offsets_partition("g", 10)
    assert {offsets_partition(f"group-{i}", 10) for i in range(200)} == set(range(10))
    spec = offsets_topic_spec(5)
    assert spec["replication_factor"] == 3 and spec["configs"]["cleanup.policy"] == "compact"
    assert offsets_topic_spec(1)["replication_factor"] == 1


class FakePartition:
    topic, partition = OFFSETS_TOPIC, 0

    def __init__(self, plog):
        self.log = plog
        self.leader_epoch = 0
        self.high_watermark = 0
        self.leader = True
        self.gate: trio.Event | None = None  # set: appends wait for it (an ISR that is slow to ack)

    async def wait_produce(self, last_offset, acks, leader_epoch=None):
        if self.gate is not None:
            await self.gate.wait()
        self.high_watermark = self.log.log_end_offset
        return ErrorCode.NONE


class FakeRM:
    def __init__(self, plog, image):
        self.p = FakePartition(plog)
        self.image = image

    def get_leader(self, topic, partition):
        assert topic == OFFSETS_TOPIC
        if not self.p.leader:
            raise error_for(ErrorCode.NOT_LEADER_OR_FOLLOWER, "not leader")
        return self.p

    def append(self, p, records, acks):
        return p.log.append(records, p.leader_epoch)


class FakePublisher:
    def __init__(self, rm):
        self.rm = rm

    async def wait_for_offset(self, offset):
        return self.rm.image


def image_with(records):
    d = MetadataDelta(MetadataImage.EMPTY)
    for i, r in enumerate(
        [Topic(OFFSETS_TOPIC, "oid"), Partition("oid", 0, (1,), (1,), 1), *records]
    ):
        d.replay(r, i, 1)
    return d.apply()


@pytest.fixture
def setup(tmp_path):
    plog = PartitionLog.open(tmp_path / "o-0", LogConfig.from_dict({"cleanup.policy": "compact"}))
    rm = FakeRM(plog, image_with([]))
    mgr = GroupOffsetsManager(rm, FakePublisher(rm), wall_clock_ms=lambda: 1000)
    yield rm, mgr
    plog.close()


async def call(mgr, api, body):
    validate_request(api, body)
    return await mgr.handlers[api](body)


def commit_body(group, offsets, member_id=None, epoch=None):
    return {
        "group_id": group,
        "member_id": member_id,
        "member_epoch": epoch,
        "topics": [
            {"name": t, "partitions": [{"partition": p, "offset": o}]}
            for (t, p), o in offsets.items()
        ],
    }


async def test_commit_fetch_reload_delete(setup):
    rm, mgr = setup
    r = await call(mgr, ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 5, ("t", 1): 7}))
    assert r["error"] == 0 and all(p["error"] == 0 for t in r["topics"] for p in t["partitions"])
    await call(mgr, ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 9}))
    await call(mgr, ApiKey.OFFSET_COMMIT, commit_body("h", {("t", 0): 1}))
    f = await call(
        mgr,
        ApiKey.OFFSET_FETCH,
        {"group_id": "g", "topics": [{"name": "t", "partitions": [0, 1, 2]}]},
    )
    assert [(p["partition"], p["offset"]) for p in f["topics"][0]["partitions"]] == [
        (0, 9),
        (1, 7),
        (2, -1),
    ]
    # a new leader epoch rebuilds the cache from the log
    rm.p.leader_epoch = 1
    mgr.caches.clear()
    f = await call(mgr, ApiKey.OFFSET_FETCH, {"group_id": "g", "topics": None})
    assert [(p["partition"], p["offset"]) for p in f["topics"][0]["partitions"]] == [(0, 9), (1, 7)]
    lg = await call(mgr, ApiKey.LIST_GROUPS, {})
    assert [g["group_id"] for g in lg["groups"]] == ["g", "h"]
    d = await call(mgr, ApiKey.DESCRIBE_GROUPS, {"groups": ["g", "zz"]})
    assert (
        d["groups"][0]["state"] == "Empty"
        and d["groups"][0]["offsets"][0]["partitions"][0]["offset"] == 9
    )
    assert d["groups"][1]["error"] == ErrorCode.GROUP_ID_NOT_FOUND
    r = await call(mgr, ApiKey.DELETE_GROUPS, {"groups": ["g"]})
    assert r["groups"][0]["error"] == 0
    mgr.caches.clear()  # tombstones survive a reload
    f = await call(mgr, ApiKey.OFFSET_FETCH, {"group_id": "g", "topics": None})
    assert f["topics"] == []
    r = await call(mgr, ApiKey.DELETE_GROUPS, {"groups": ["g"]})
    assert r["groups"][0]["error"] == ErrorCode.GROUP_ID_NOT_FOUND
    # not the leader -> NOT_COORDINATOR
    rm.p.leader = False
    f = await call(mgr, ApiKey.OFFSET_FETCH, {"group_id": "h", "topics": None})
    assert f["error"] == ErrorCode.NOT_COORDINATOR


async def test_member_validation_and_non_empty_group(setup):
    rm, mgr = setup
    member = GroupMember(
        "g",
        "m1",
        member_epoch=3,
        previous_member_epoch=2,
        subscribed_topics=("t",),
        assigned=(("t", 0),),
        pending_revocation=(("t", 1),),
    )
    rm.image = image_with([GroupEpoch("g", 3, 3), member])
    ok = await call(
        mgr,
        ApiKey.OFFSET_COMMIT,
        commit_body("g", {("t", 0): 1, ("t", 1): 2, ("t", 2): 3}, "m1", 3),
    )
    errs = [p["error"] for t in ok["topics"] for p in t["partitions"]]
    assert errs == [0, 0, ErrorCode.STALE_MEMBER]
    # the previous epoch: a commit that raced the heartbeat advancing the member (still owns t-0)
    prev = await call(mgr, ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1}, "m1", 2))
    assert prev["error"] == 0 and prev["topics"][0]["partitions"][0]["error"] == 0
    stale = await call(mgr, ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 4}, "m1", 1))
    assert stale["error"] == ErrorCode.FENCED_MEMBER_EPOCH
    unknown = await call(mgr, ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 4}, "zombie", 3))
    assert unknown["error"] == ErrorCode.UNKNOWN_MEMBER_ID
    outsider = await call(mgr, ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 4}))
    assert outsider["error"] == ErrorCode.UNKNOWN_MEMBER_ID
    r = await call(mgr, ApiKey.DELETE_GROUPS, {"groups": ["g"]})
    assert r["groups"][0]["error"] == ErrorCode.NON_EMPTY_GROUP
    r = await call(
        mgr,
        ApiKey.ALTER_GROUP_OFFSETS,
        {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition": 0, "offset": 0}]}]},
    )
    assert r["error"] == ErrorCode.NON_EMPTY_GROUP
    f = await call(mgr, ApiKey.OFFSET_FETCH, {"group_id": "g", "topics": None})
    assert [(p["partition"], p["offset"]) for p in f["topics"][0]["partitions"]] == [(0, 1), (1, 2)]
    d = await call(mgr, ApiKey.DESCRIBE_GROUPS, {"groups": ["g"]})
    m = d["groups"][0]["members"][0]
    assert m["member_id"] == "m1" and m["assignment"] == [{"name": "t", "partitions": [0]}]
    # the member leaves: now the group can be reset and deleted
    rm.image = image_with([GroupEpoch("g", 4, 4), replace(member, member_epoch=3)])
    rm.image = image_with([GroupEpoch("g", 4, 4)])  # an empty group: allowed
    r = await call(
        mgr,
        ApiKey.ALTER_GROUP_OFFSETS,
        {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition": 0, "offset": 0}]}]},
    )
    assert r["error"] == 0
    f = await call(
        mgr, ApiKey.OFFSET_FETCH, {"group_id": "g", "topics": [{"name": "t", "partitions": [0]}]}
    )
    assert f["topics"][0]["partitions"][0]["offset"] == 0


def fetched(f):
    return {(t["name"], p["partition"]): p["offset"] for t in f["topics"] for p in t["partitions"]}


async def test_expiry_of_empty_groups_offsets(tmp_path):
    """offsets.retention (KIP-211): an empty group's offsets go once the retention has passed
    since its newest commit or since its last member left, whichever is later; a group with
    members, offsets pending in a transaction, or a commit in flight keeps them."""
    now = [10_000_000]
    plog = PartitionLog.open(tmp_path / "o-0", LogConfig.from_dict({"cleanup.policy": "compact"}))
    rm = FakeRM(plog, image_with([]))
    mgr = GroupOffsetsManager(rm, FakePublisher(rm), wall_clock_ms=lambda: now[0], retention_ms=10_000)
    for g in ("alone", "live", "txn", "racing"):
        await call(mgr, ApiKey.OFFSET_COMMIT, commit_body(g, {("t", 0): 5}))
    member = GroupMember("live", "m1", member_epoch=1, previous_member_epoch=0,
                         subscribed_topics=("t",), assigned=(("t", 0),))
    rm.image = image_with([GroupEpoch("live", 1, 1), member])
    _, cache = mgr._coordinator("txn")
    cache.add_pending(77, [(("txn", "t", 1), OffsetValue(9, "", now[0], -1))])

    now[0] += 9_999
    assert await mgr.expire_offsets() == 0
    # a commit to "racing" is appended (its ISR has not acknowledged it yet) when the pass runs
    rm.p.gate = gate = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, mgr, ApiKey.OFFSET_COMMIT, commit_body("racing", {("t", 0): 6}))
        await trio.testing.wait_all_tasks_blocked()
        rm.p.gate = None  # only that commit waits
        now[0] += 1
        assert await mgr.expire_offsets() == 1  # "alone" only
        gate.set()
    assert fetched(await call(mgr, ApiKey.OFFSET_FETCH, {"group_id": "alone", "topics": None})) == {}
    assert fetched(await call(mgr, ApiKey.OFFSET_FETCH, {"group_id": "racing", "topics": None})) == {("t", 0): 6}
    assert fetched(await call(mgr, ApiKey.OFFSET_FETCH, {"group_id": "txn", "topics": None})) == {("t", 0): 5}

    now[0] += 10**9  # members keep a group's offsets however old they are
    assert await mgr.expire_offsets() == 1  # "racing"; "txn" waits for its open transaction
    assert fetched(await call(mgr, ApiKey.OFFSET_FETCH, {"group_id": "live", "topics": None})) == {("t", 0): 5}
    assert fetched(await call(mgr, ApiKey.OFFSET_FETCH, {"group_id": "txn", "topics": None})) == {("t", 0): 5}
    cache.end_txn(77, False, plog.log_end_offset)  # aborted

    rm.image = image_with([GroupEpoch("live", 2, 2)])  # its last member left: the clock starts now
    now[0] += 1
    assert await mgr.expire_offsets() == 1  # "txn", whose transaction was aborted
    now[0] += 9_999
    assert await mgr.expire_offsets() == 0
    now[0] += 1
    assert await mgr.expire_offsets() == 1  # "live"
    mgr.caches.clear()  # the tombstones are in the log: a reload agrees
    for g in ("alone", "live", "racing", "txn"):
        assert fetched(await call(mgr, ApiKey.OFFSET_FETCH, {"group_id": g, "topics": None})) == {}
    assert mgr.expired == 4
    plog.close()


async def test_statistics_is_a_typed_snapshot(setup):
    """``statistics()``: what metrics read (committed offsets of the led partitions, expiries),
    as a frozen snapshot rather than the manager's private caches."""
    import dataclasses

    from rafka.broker.groups.offsets import CommittedOffset

    rm, mgr = setup
    s0 = mgr.statistics()
    assert s0.committed == () and s0.offsets_expired == 0 and s0.commits_in_flight == 0
    assert s0.offsets_topic.loaded == (0,)  # the led partition is loaded by the snapshot
    await call(mgr, ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 5, ("t", 1): 7}))
    await call(mgr, ApiKey.OFFSET_FETCH, {"group_id": "g", "topics": None})
    s = mgr.statistics()
    assert sorted(s.committed, key=lambda c: c.partition) == [
        CommittedOffset("g", "t", 0, 5), CommittedOffset("g", "t", 1, 7)]
    assert s.read_barrier.confirmed == 1 and s.read_barrier.in_flight == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.offsets_expired = 1  # type: ignore[misc]
    rm.p.leader = False  # no longer led: nothing to report, the cache is dropped
    s = mgr.statistics()
    assert s.committed == () and s.offsets_topic.loaded == ()


def test_committed_leader_epoch_is_kept_and_old_values_still_read() -> None:
    import msgpack

    v = OffsetValue(7, "m", 123, 2, leader_epoch=5)
    assert decode_value(encode_value(v)) == v
    old = msgpack.packb([7, "m", 123, 2])  # written before the leader epoch was kept
    assert decode_value(old) == OffsetValue(7, "m", 123, 2, -1)
    assert len(msgpack.unpackb(encode_value(OffsetValue(7, "m", 123, 2)))) == 4


async def test_a_fetch_answers_after_the_commits_accepted_before_it(setup):
    """A commit accepted (validated, appended) but not yet acknowledged when an OFFSET_FETCH
    arrives is part of what that fetch reads: a new owner must not start from the offset before
    it (queue chaos seed 3, session 28). The fetch's read barrier alone would leave the order
    to the scheduler once both are acknowledged together, so it is tried many times."""
    rm, mgr = setup

    async def fetch(into: list[dict]) -> None:
        into.append(await call(mgr, ApiKey.OFFSET_FETCH, {"group_id": "g", "topics": None}))

    for i in range(1, 25):
        rm.p.gate = trio.Event()  # the ISR has not acknowledged yet
        got: list[dict] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, mgr, ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): i}))
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(fetch, got)
            await trio.testing.wait_all_tasks_blocked()
            assert not got
            rm.p.gate.set()
        assert fetched(got[0]) == {("t", 0): i}, f"round {i}"
    rm.p.gate = None
