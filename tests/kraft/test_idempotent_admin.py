"""Idempotent admin requests: a retried CREATE_TOPICS / DELETE_TOPICS / CREATE_PARTITIONS /
ALTER_CONFIGS with the same ``request_id`` is answered with the original outcome
(docs/chaos-results.md §3: a retry whose first attempt was committed but whose answer was lost
reported TOPIC_ALREADY_EXISTS for the caller's own topic), refusals included (txn chaos campaign
seed 3: topic-created-after-fail — a refused retry, then the first attempt's late forward
created the topic). ControllerService over the in-memory quorum, under trio's mock clock."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from rafka.kraft.memory import MemoryQuorumCluster
from rafka.kraft.quorum import Command, Guard
from rafka.kraft.state_machine import ControllerStateMachine
from rafka.metadata import LeaderChange, NoOp, Partition, Topic
from rafka.wire.errors import ErrorCode, error_for
from rafka.wire.protocol import ApiKey

from .test_service_memory import heartbeat, register, start, wait_active


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


def create_body(*names: str, rid: str | None = None, partitions: int = 1, rf: int = 1) -> dict:
    body: dict = {"topics": [{"name": n, "num_partitions": partitions, "replication_factor": rf}
                             for n in names], "timeout_ms": 1000}
    if rid is not None:
        body["request_id"] = rid
    return body


def records(cluster: MemoryQuorumCluster, kind: str) -> list:
    return [e.record for e in cluster.entries if e.record.record_type == kind]


async def active_cluster(nursery, brokers=(1,)):
    cluster = MemoryQuorumCluster([1, 2])
    s1 = await start(nursery, cluster, 1)
    s2 = await start(nursery, cluster, 2)
    cluster.elect(1)
    await wait_active(s1)
    for b in brokers:
        epoch = await register(s1, b)
        await heartbeat(s1, b, epoch, cluster.state_machine.image.offset)
    return cluster, s1, s2


def test_state_machine_same_request_id_applies_once():
    """The state machine itself: the second command with the same id is a duplicate (the
    original result, nothing appended); the dedup entry is visible through ``applied``."""
    sm = ControllerStateMachine()
    sm.apply(Command("leader", 1, 0, (LeaderChange(1, 1),)))
    cmd = Command("create:t:r1", 1, 0, (Topic("t", "tid-1"), Partition("tid-1", 0, (1,), (1,), 1)),
                  (Guard.topic_absent("t"),))
    first = sm.apply(cmd)
    assert first.error is None and not first.result.duplicate and len(first.entries) == 2
    assert sm.applied("create:t:r1") == first.result._replace(duplicate=True)
    again = sm.apply(cmd)
    assert again.error is None and again.result.duplicate and again.entries == []
    assert again.result[:3] == first.result[:3]
    other = sm.apply(Command("create:t:r2", 1, 0, cmd.records, cmd.guards))
    assert other.error is not None and other.error.code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert sm.applied("create:t:r2") is None  # refusals are not remembered
    # the table is part of the snapshot state
    restored = ControllerStateMachine(sm.image, sm.snapshot_state()["dedup"])
    assert restored.applied("create:t:r1") == sm.applied("create:t:r1")


async def test_same_request_id_creates_once_and_answers_success(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster, s1, _s2 = await active_cluster(nursery)
        h = s1.handlers[ApiKey.CREATE_TOPICS]
        r1 = await h(create_body("t", rid="abc", partitions=2))
        assert r1["error"] == 0 and r1["topics"][0]["error"] == 0, r1
        r2 = await h(create_body("t", rid="abc", partitions=2))
        assert r2["error"] == 0 and r2["topics"][0]["error"] == 0, r2
        assert r2["topics"][0]["topic_id"] == r1["topics"][0]["topic_id"]
        assert (r2["topics"][0]["num_partitions"], r2["topics"][0]["replication_factor"]) == (2, 1)
        assert r2["metadata_offset"] >= r1["metadata_offset"]
        assert len(records(cluster, "Topic")) == 1
        assert len(records(cluster, "Partition")) == 2
        # another call (another id, or none): the topic exists, as before
        r3 = await h(create_body("t", rid="other", partitions=2))
        assert r3["topics"][0]["error"] == ErrorCode.TOPIC_ALREADY_EXISTS
        r4 = await h(create_body("t", partitions=2))
        assert r4["topics"][0]["error"] == ErrorCode.TOPIC_ALREADY_EXISTS
        # the id is per operation: a delete with the same client id is not answered by the create
        r5 = await s1.handlers[ApiKey.DELETE_TOPICS]({"topics": ["t"], "timeout_ms": 1000, "request_id": "abc"})
        assert r5["topics"][0]["error"] == 0
        assert "t" not in cluster.state_machine.image.topics.by_name
        assert len(records(cluster, "RemoveTopic")) == 1
        nursery.cancel_scope.cancel()


async def test_committed_but_answer_lost_then_retry_on_new_controller(autojump_clock):
    """The first attempt is committed, but the controller is deposed before it answers
    (NOT_CONTROLLER): the client's retry, on the next controller, gets success."""
    async with trio.open_nursery() as nursery:
        cluster, s1, s2 = await active_cluster(nursery)
        await register(s1, 2)  # s2 also a broker: irrelevant, keeps the image realistic
        q1 = cluster.voters[1]
        real_propose = q1.propose

        async def propose_then_lose_answer(command):
            await real_propose(command)
            cluster.elect(2)  # deposed right after the commit
            raise error_for(ErrorCode.NOT_CONTROLLER, "leadership changed while proposing")

        q1.propose = propose_then_lose_answer  # type: ignore[method-assign]
        r1 = await s1.handlers[ApiKey.CREATE_TOPICS](create_body("t", rid="lost-1"))
        assert r1["error"] == ErrorCode.NOT_CONTROLLER
        q1.propose = real_propose  # type: ignore[method-assign]
        assert "t" in cluster.state_machine.image.topics.by_name  # it was committed
        await wait_active(s2)
        r2 = await s2.handlers[ApiKey.CREATE_TOPICS](create_body("t", rid="lost-1"))
        assert r2["error"] == 0 and r2["topics"][0]["error"] == 0, r2
        tid = cluster.state_machine.image.topics.by_name["t"].topic_id
        assert r2["topics"][0]["topic_id"] == tid
        assert len(records(cluster, "Topic")) == 1
        nursery.cancel_scope.cancel()


async def test_multi_topic_request_dedupes_each_topic(autojump_clock):
    """Each topic of one request has its own derived id: a retry of [a, b] after only a was
    committed answers a from the dedup table and creates b."""
    async with trio.open_nursery() as nursery:
        cluster, s1, _s2 = await active_cluster(nursery)
        h = s1.handlers[ApiKey.CREATE_TOPICS]
        r = await h(create_body("a", rid="multi"))
        assert r["topics"][0]["error"] == 0
        r = await h(create_body("a", "b", "bad name", rid="multi"))
        assert [t["error"] for t in r["topics"]] == [0, 0, ErrorCode.INVALID_TOPIC_EXCEPTION]
        assert len(records(cluster, "Topic")) == 2
        assert cluster.state_machine.applied("create:a:multi") is not None
        assert cluster.state_machine.applied("create:b:multi") is not None
        # validate_only never proposes and never consults the table
        r = await h({**create_body("c", rid="multi"), "validate_only": True})
        assert r["topics"][0]["error"] == 0 and "c" not in cluster.state_machine.image.topics.by_name
        nursery.cancel_scope.cancel()


async def test_retry_succeeds_although_the_decision_would_now_fail(autojump_clock):
    """The original outcome, not a new decision: rf=3 was possible at the first attempt; at the
    retry a broker is fenced (INVALID_REPLICATION_FACTOR if decided again)."""
    async with trio.open_nursery() as nursery:
        cluster, s1, _s2 = await active_cluster(nursery, brokers=(1, 2, 3))
        h = s1.handlers[ApiKey.CREATE_TOPICS]
        assert (await h(create_body("t", rid="rf3", rf=3)))["topics"][0]["error"] == 0
        b3 = cluster.state_machine.image.cluster.brokers[3]
        await heartbeat(s1, 3, b3.epoch, cluster.state_machine.image.offset, want_fence=True)
        assert cluster.state_machine.image.cluster.brokers[3].fenced
        r = await h(create_body("u", rid="x", rf=3))
        assert r["topics"][0]["error"] == ErrorCode.INVALID_REPLICATION_FACTOR
        r = await h(create_body("t", rid="rf3", rf=3))
        assert r["topics"][0]["error"] == 0 and r["topics"][0]["replication_factor"] == 3
        nursery.cancel_scope.cancel()


async def test_no_fresh_refusal_while_an_earlier_attempt_may_still_commit(autojump_clock):
    """The first attempt's command was submitted, but the controller stopped waiting for it
    (its decision timeout) — it may still commit, as a Raft entry does. Meanwhile a broker was
    fenced, so deciding the retry afresh would refuse with INVALID_REPLICATION_FACTOR, and
    the first attempt would then create the topic anyway (txn chaos campaign seed 3:
    topic-created-after-fail). The retry gets REQUEST_TIMED_OUT (retriable, outcome unknown)
    until the command has committed, then the original outcome."""
    async with trio.open_nursery() as nursery:
        cluster, s1, _s2 = await active_cluster(nursery, brokers=(1, 2, 3))
        q1 = cluster.voters[1]
        real_propose = q1.propose
        gate = trio.Event()

        async def commit_later(command):
            await gate.wait()
            await real_propose(command)

        async def submitted_but_slow(command):
            if not command.request_id.startswith("create:t:"):
                return await real_propose(command)
            nursery.start_soon(commit_later, command)  # in Raft's hands now
            await trio.sleep_forever()

        q1.propose = submitted_but_slow  # type: ignore[method-assign]
        h = s1.handlers[ApiKey.CREATE_TOPICS]
        first = await h(create_body("t", rid="slow", rf=3))
        assert first["error"] == ErrorCode.REQUEST_TIMED_OUT, first
        # a broker is fenced meanwhile: a fresh decision would be a refusal
        b3 = cluster.state_machine.image.cluster.brokers[3]
        await heartbeat(s1, 3, b3.epoch, cluster.state_machine.image.offset, want_fence=True)
        assert cluster.state_machine.image.cluster.brokers[3].fenced
        retry = await h(create_body("t", rid="slow", rf=3))
        assert retry["topics"][0]["error"] == ErrorCode.REQUEST_TIMED_OUT, retry
        gate.set()
        await trio.sleep(0.01)
        assert "t" in cluster.state_machine.image.topics.by_name
        last = await h(create_body("t", rid="slow", rf=3))
        assert last["topics"][0]["error"] == 0 and last["topics"][0]["replication_factor"] == 3
        other = await h(create_body("u", rid="fresh", rf=3))  # no earlier attempt: refused
        assert other["topics"][0]["error"] == ErrorCode.INVALID_REPLICATION_FACTOR
        q1.propose = real_propose  # type: ignore[method-assign]
        nursery.cancel_scope.cancel()


async def fence(s, cluster, bid):
    b = cluster.state_machine.image.cluster.brokers[bid]
    await heartbeat(s, bid, b.epoch, cluster.state_machine.image.offset, want_fence=True)
    assert cluster.state_machine.image.cluster.brokers[bid].fenced


async def unfence(s, cluster, *bids):
    for bid in bids:
        b = cluster.state_machine.image.cluster.brokers[bid]
        await heartbeat(s, bid, b.epoch, cluster.state_machine.image.offset)
        assert not cluster.state_machine.image.cluster.brokers[bid].fenced


def test_state_machine_remembers_a_recorded_refusal():
    """A command whose only record is a NoOp with an error code is remembered with a marker
    (its epoch slot: the code), part of the snapshot state; the image is unchanged but for its
    offset; the pair is evicted together."""
    sm = ControllerStateMachine(dedup_capacity=4)
    sm.apply(Command("leader", 1, 0, (LeaderChange(1, 1),)))
    before = sm.image
    refusal = Command("create:t:r1", 1, 0, (NoOp(ErrorCode.INVALID_REPLICATION_FACTOR, "rf 3 > 2"),))
    applied = sm.apply(refusal)
    assert applied.error is None and len(applied.entries) == 1
    assert sm.image.topics == before.topics and sm.image.cluster == before.cluster
    assert sm.image.offset == before.offset + 1
    hit = sm.applied("create:t:r1")
    marker = sm.applied("refused:create:t:r1")
    assert hit is not None and marker is not None
    assert marker.base_offset == hit.base_offset and marker.epoch == ErrorCode.INVALID_REPLICATION_FACTOR
    # a later attempt of the same id (here: a create) is a duplicate, nothing applied
    again = sm.apply(Command("create:t:r1", 1, 0, (Topic("t", "tid"),), (Guard.topic_absent("t"),)))
    assert again.result.duplicate and again.entries == [] and "t" not in sm.image.topics.by_name
    restored = ControllerStateMachine(sm.image, sm.snapshot_state()["dedup"], dedup_capacity=4)
    assert restored.applied("refused:create:t:r1") == marker
    # a plain NoOp (no code) is an accepted command without a marker
    sm.apply(Command("plain", 1, 0, (NoOp(),)))
    assert sm.applied("plain") is not None and sm.applied("refused:plain") is None
    sm.apply(Command("x1", 1, 0, (NoOp(),)))  # capacity 4: "leader" goes
    assert sm.applied("leader") is None and sm.applied("refused:create:t:r1") is not None
    sm.apply(Command("x2", 1, 0, (NoOp(),)))  # then the marker, and its id with it
    assert len(sm.dedup) == 3
    assert sm.applied("refused:create:t:r1") is None and sm.applied("create:t:r1") is None
    assert NoOp.from_dict({"type": "NoOp"}) == NoOp()  # a NoOp written before the fields


async def test_refusal_is_remembered_for_later_attempts(autojump_clock):
    """txn chaos campaign seed 3 (topic-created-after-fail): an attempt is refused
    (INVALID_REPLICATION_FACTOR: broker 3 fenced), the client reports the failure; then broker 3
    is back and another attempt of the same request arrives (the first attempt's forward, stuck
    in TCP behind the partition). Decided afresh it would create the topic; it gets the recorded
    refusal, and nothing is created. Without request_id nothing of this applies (last test)."""
    async with trio.open_nursery() as nursery:
        cluster, s1, _s2 = await active_cluster(nursery, brokers=(1, 2, 3))
        h = s1.handlers[ApiKey.CREATE_TOPICS]
        await fence(s1, cluster, 3)
        refused = await h(create_body("t", rid="seed3", rf=3))
        t0 = refused["topics"][0]
        assert t0["error"] == ErrorCode.INVALID_REPLICATION_FACTOR, refused
        await unfence(s1, cluster, 3)
        proposals = cluster.proposals
        late = await h(create_body("t", rid="seed3", rf=3))
        assert late["topics"][0] == t0, late
        assert "t" not in cluster.state_machine.image.topics.by_name
        assert records(cluster, "Topic") == []
        assert cluster.proposals == proposals  # answered from the table: nothing proposed
        # what it was answered from: the committed refusal
        noops = records(cluster, "NoOp")
        assert noops == [NoOp(ErrorCode.INVALID_REPLICATION_FACTOR, t0["message"])]
        assert refused["metadata_offset"] >= max(
            e.offset for e in cluster.entries if e.record.record_type == "NoOp")
        # another request for the same topic is decided afresh: it would have succeeded
        fresh = await h(create_body("t", rid="another", rf=3))
        assert fresh["topics"][0]["error"] == 0 and fresh["topics"][0]["replication_factor"] == 3
        # the other idempotent operations record their refusals the same way
        grow = {"topics": [{"name": "t", "count": 1}], "timeout_ms": 1000, "request_id": "g"}
        assert (await s1.handlers[ApiKey.CREATE_PARTITIONS](grow))["topics"][0]["error"] == ErrorCode.INVALID_PARTITIONS
        grow2 = {"topics": [{"name": "t", "count": 2}], "timeout_ms": 1000, "request_id": "g"}
        assert (await s1.handlers[ApiKey.CREATE_PARTITIONS](grow2))["topics"][0]["error"] == ErrorCode.INVALID_PARTITIONS
        assert len(cluster.state_machine.image.topics.by_name["t"].partitions) == 1
        gone = {"topics": ["nope"], "timeout_ms": 1000, "request_id": "d"}
        assert (await s1.handlers[ApiKey.DELETE_TOPICS](gone))["topics"][0]["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await h(create_body("nope", rid="mk"))
        assert (await s1.handlers[ApiKey.DELETE_TOPICS](gone))["topics"][0]["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert "nope" in cluster.state_machine.image.topics.by_name
        nursery.cancel_scope.cancel()


async def test_recorded_refusal_survives_controller_failover(autojump_clock):
    """The refusal is in the log: the next controller answers the later attempt with it."""
    async with trio.open_nursery() as nursery:
        cluster, s1, s2 = await active_cluster(nursery, brokers=(1, 2, 3))
        await fence(s1, cluster, 3)
        refused = await s1.handlers[ApiKey.CREATE_TOPICS](create_body("t", rid="fo", rf=3))
        assert refused["topics"][0]["error"] == ErrorCode.INVALID_REPLICATION_FACTOR
        cluster.elect(2)
        await wait_active(s2)
        await unfence(s2, cluster, 3)
        late = await s2.handlers[ApiKey.CREATE_TOPICS](create_body("t", rid="fo", rf=3))
        assert late["error"] == 0 and late["topics"][0] == refused["topics"][0], late
        assert "t" not in cluster.state_machine.image.topics.by_name
        nursery.cancel_scope.cancel()


async def test_refusal_snapshotted_away_answers_a_named_refusal(autojump_clock):
    """The NoOp entry is below the log start after a snapshot: the same code, with a message
    saying an earlier attempt was refused. A committed success still replays as success."""
    async with trio.open_nursery() as nursery:
        cluster, s1, _s2 = await active_cluster(nursery, brokers=(1, 2, 3))
        h = s1.handlers[ApiKey.CREATE_TOPICS]
        ok = await h(create_body("s", rid="ok", rf=3))
        assert ok["topics"][0]["error"] == 0
        await fence(s1, cluster, 3)
        refused = await h(create_body("t", rid="snap", rf=3))
        assert refused["topics"][0]["error"] == ErrorCode.INVALID_REPLICATION_FACTOR
        await unfence(s1, cluster, 3)
        cluster.snapshot()
        assert cluster.log_start > cluster.state_machine.applied("create:t:snap").base_offset
        late = await h(create_body("t", rid="snap", rf=3))
        t0 = late["topics"][0]
        assert t0["error"] == ErrorCode.INVALID_REPLICATION_FACTOR, late
        assert "earlier attempt of this request was refused" in t0["message"]
        assert "t" not in cluster.state_machine.image.topics.by_name
        again = await h(create_body("s", rid="ok", rf=3))  # success entries snapshotted too
        assert again["topics"][0]["error"] == 0
        assert again["topics"][0]["topic_id"] == ok["topics"][0]["topic_id"]
        nursery.cancel_scope.cancel()


async def test_refusal_without_request_id_proposes_nothing(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster, s1, _s2 = await active_cluster(nursery, brokers=(1, 2, 3))
        h = s1.handlers[ApiKey.CREATE_TOPICS]
        await fence(s1, cluster, 3)
        proposals, offset = cluster.proposals, cluster.state_machine.image.offset
        r = await h(create_body("t", rf=3))
        assert r["topics"][0]["error"] == ErrorCode.INVALID_REPLICATION_FACTOR
        assert (cluster.proposals, cluster.state_machine.image.offset) == (proposals, offset)
        assert records(cluster, "NoOp") == []
        # validate_only with a request_id never proposes either
        r = await h({**create_body("t", rid="v", rf=3), "validate_only": True})
        assert r["topics"][0]["error"] == ErrorCode.INVALID_REPLICATION_FACTOR
        assert cluster.proposals == proposals
        await unfence(s1, cluster, 3)
        r = await h(create_body("t", rf=3))  # decided afresh, as before
        assert r["topics"][0]["error"] == 0
        nursery.cancel_scope.cancel()


async def test_refusal_not_recorded_is_not_answered(autojump_clock):
    """Recording the refusal fails: NOT_CONTROLLER (the whole request, as a deposed controller
    answers) or the decision timeout (REQUEST_TIMED_OUT) — never the unrecorded refusal."""
    async with trio.open_nursery() as nursery:
        cluster, s1, s2 = await active_cluster(nursery, brokers=(1, 2, 3))
        await fence(s1, cluster, 3)
        q1 = cluster.voters[1]
        real_propose = q1.propose

        async def hang_on_refusal(command):
            if isinstance(command.records[0], NoOp):
                await trio.sleep_forever()
            return await real_propose(command)

        q1.propose = hang_on_refusal  # type: ignore[method-assign]
        h = s1.handlers[ApiKey.CREATE_TOPICS]
        r = await h(create_body("t", rid="slow", rf=3))
        assert r["error"] == ErrorCode.REQUEST_TIMED_OUT, r
        r = await h(create_body("t", rid="slow", rf=3))  # it may still commit: no fresh refusal
        assert r["topics"][0]["error"] == ErrorCode.REQUEST_TIMED_OUT, r

        async def deposed_on_refusal(command):
            if isinstance(command.records[0], NoOp):
                cluster.elect(2)
            return await real_propose(command)

        q1.propose = deposed_on_refusal  # type: ignore[method-assign]
        r = await h(create_body("u", rid="dep", rf=3))
        assert r["error"] == ErrorCode.NOT_CONTROLLER, r
        assert records(cluster, "NoOp") == []
        q1.propose = real_propose  # type: ignore[method-assign]
        nursery.cancel_scope.cancel()


async def test_fresh_decision_duplicate_of_a_pending_refusal(autojump_clock):
    """The first attempt's refusal record was still pending when the controller stopped
    waiting; a retry decided afresh (broker 3 back) proposes the create under the same id, and
    Raft orders the refusal first: the create is a duplicate, and the answer the refusal."""
    async with trio.open_nursery() as nursery:
        cluster, s1, _s2 = await active_cluster(nursery, brokers=(1, 2, 3))
        await fence(s1, cluster, 3)
        q1 = cluster.voters[1]
        real_propose = q1.propose
        held: list = []

        async def hold_refusal(command):
            if isinstance(command.records[0], NoOp):
                held.append(command)  # in Raft's hands, committed later
                await trio.sleep_forever()
            if held and command.request_id == held[0].request_id:
                await real_propose(held.pop())  # ordered before this one
            return await real_propose(command)

        q1.propose = hold_refusal  # type: ignore[method-assign]
        h = s1.handlers[ApiKey.CREATE_TOPICS]
        r = await h(create_body("t", rid="race", rf=3))
        assert r["error"] == ErrorCode.REQUEST_TIMED_OUT, r
        await unfence(s1, cluster, 1, 2, 3)  # (their sessions expired during the wait)
        r = await h(create_body("t", rid="race", rf=3))
        assert r["topics"][0]["error"] == ErrorCode.INVALID_REPLICATION_FACTOR, r
        assert "t" not in cluster.state_machine.image.topics.by_name
        q1.propose = real_propose  # type: ignore[method-assign]
        nursery.cancel_scope.cancel()


async def test_deleted_and_recreated_by_someone_else(autojump_clock):
    """Kafka-like idempotence: the retry of the original create still answers success (the
    create did happen), naming the topic as it is now, and creates nothing."""
    async with trio.open_nursery() as nursery:
        cluster, s1, _s2 = await active_cluster(nursery)
        h = s1.handlers
        r1 = await h[ApiKey.CREATE_TOPICS](create_body("t", rid="orig"))
        await h[ApiKey.DELETE_TOPICS]({"topics": ["t"], "timeout_ms": 1000, "request_id": "d1"})
        r = await h[ApiKey.CREATE_TOPICS](create_body("t", rid="orig"))
        assert r["topics"][0]["error"] == 0 and r["topics"][0]["topic_id"] is None
        assert "t" not in cluster.state_machine.image.topics.by_name  # not created again
        r2 = await h[ApiKey.CREATE_TOPICS](create_body("t", rid="someone-else"))
        assert r2["topics"][0]["error"] == 0
        r = await h[ApiKey.CREATE_TOPICS](create_body("t", rid="orig"))
        assert r["topics"][0]["error"] == 0
        assert r["topics"][0]["topic_id"] == r2["topics"][0]["topic_id"] != r1["topics"][0]["topic_id"]
        assert len(records(cluster, "Topic")) == 2
        # the delete's retry does not delete the new topic
        r = await h[ApiKey.DELETE_TOPICS]({"topics": ["t"], "timeout_ms": 1000, "request_id": "d1"})
        assert r["topics"][0]["error"] == 0
        assert "t" in cluster.state_machine.image.topics.by_name
        nursery.cancel_scope.cancel()


async def test_delete_partitions_configs_retries_answer_the_original_outcome(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster, s1, _s2 = await active_cluster(nursery)
        h = s1.handlers
        await h[ApiKey.CREATE_TOPICS](create_body("t", "u"))
        body = {"topics": [{"name": "t", "count": 3}], "timeout_ms": 1000, "request_id": "p1"}
        for _ in range(2):
            r = await h[ApiKey.CREATE_PARTITIONS](body)
            assert r["topics"][0]["error"] == 0, r
        r = await h[ApiKey.CREATE_PARTITIONS]({**body, "request_id": "p2"})
        assert r["topics"][0]["error"] == ErrorCode.INVALID_PARTITIONS
        assert len(cluster.state_machine.image.topics.by_name["t"].partitions) == 3

        # a retried alter must not undo a change made after the lost answer
        set1 = {"topics": [{"name": "t", "configs": {"retention.ms": "1000"}}], "request_id": "c1"}
        assert (await h[ApiKey.ALTER_CONFIGS](set1))["topics"][0]["error"] == 0
        set2 = {"topics": [{"name": "t", "configs": {"retention.ms": "2000"}}], "request_id": "c2"}
        assert (await h[ApiKey.ALTER_CONFIGS](set2))["topics"][0]["error"] == 0
        assert (await h[ApiKey.ALTER_CONFIGS](set1))["topics"][0]["error"] == 0
        assert cluster.state_machine.image.topics.by_name["t"].configs["retention.ms"] == "2000"

        body = {"topics": ["u"], "timeout_ms": 1000, "request_id": "d1"}
        for _ in range(2):
            r = await h[ApiKey.DELETE_TOPICS](body)
            assert r["topics"][0]["error"] == 0, r
        r = await h[ApiKey.DELETE_TOPICS]({**body, "request_id": "d2"})
        assert r["topics"][0]["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("rid", ["", "a:b", "x" * 129, "sp ace"])
async def test_malformed_request_id_is_refused(autojump_clock, rid):
    async with trio.open_nursery() as nursery:
        cluster, s1, _s2 = await active_cluster(nursery)
        r = await s1.handlers[ApiKey.CREATE_TOPICS](create_body("t", rid=rid))
        assert r["error"] == ErrorCode.INVALID_REQUEST
        assert "t" not in cluster.state_machine.image.topics.by_name
        nursery.cancel_scope.cancel()
