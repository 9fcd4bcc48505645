"""ControllerService over the in-memory quorum, under trio's mock clock."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing
from rafka.kraft.memory import MemoryQuorumCluster
from rafka.kraft.quorum import not_controller
from rafka.kraft.service import ControllerService
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

VOTERS = [(1, "127.0.0.1:19001", "127.0.0.1:9001"), (2, "127.0.0.1:19002", "127.0.0.1:9002")]


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


async def start(nursery, cluster, node_id=1, **settings):
    svc = ControllerService(
        node_id, VOTERS, None, "/nonexistent", None,
        {"broker.session.timeout.ms": 3000, **settings},
        quorum=cluster.voters[node_id], rng=random.Random(7),
    )
    await nursery.start(svc.run)
    return svc


async def wait_active(svc):
    while not svc.is_active:
        await trio.sleep(0.01)


async def register(svc, bid):
    r = await svc.handlers[ApiKey.BROKER_REGISTRATION](
        {"broker_id": bid, "incarnation_id": f"inc-{bid}", "host": "h", "port": 9000 + bid}
    )
    assert r["error"] == 0, r
    return r["broker_epoch"]


async def heartbeat(svc, bid, epoch, offset, **kw):
    body = {"broker_id": bid, "broker_epoch": epoch, "metadata_offset": offset,
            "want_fence": False, "want_shutdown": False, **kw}
    return await svc.handlers[ApiKey.BROKER_HEARTBEAT](body)


async def test_register_unfence_create_fence_failover(autojump_clock):
    cluster = MemoryQuorumCluster([1, 2])
    async with trio.open_nursery() as nursery:
        s1 = await start(nursery, cluster, 1)
        s2 = await start(nursery, cluster, 2)
        r = await s1.handlers[ApiKey.CREATE_TOPICS]({"topics": [], "timeout_ms": 1000})
        assert r["error"] == ErrorCode.NOT_CONTROLLER
        cluster.elect(1)
        await wait_active(s1)
        r = await s2.handlers[ApiKey.BROKER_HEARTBEAT](
            {"broker_id": 1, "broker_epoch": 1, "metadata_offset": 0, "want_fence": False, "want_shutdown": False}
        )
        assert r["error"] == ErrorCode.NOT_CONTROLLER
        assert (r["leader_id"], r["leader_host"], r["leader_port"]) == (1, "127.0.0.1", 9001)

        epochs = {b: await register(s1, b) for b in (1, 2, 3)}
        assert await register(s1, 2) == epochs[2]  # idempotent
        img = cluster.state_machine.image
        assert all(img.cluster.brokers[b].fenced for b in (1, 2, 3))
        for b in (1, 2, 3):
            hb = await heartbeat(s1, b, epochs[b], img.offset)
            assert hb["error"] == 0 and hb["is_caught_up"] and not hb["is_fenced"]
        assert cluster.state_machine.image.cluster.unfenced_ids() == [1, 2, 3]

        r = await s1.handlers[ApiKey.CREATE_TOPICS](
            {"topics": [{"name": "t", "num_partitions": 3, "replication_factor": 3},
                        {"name": "bad name", "num_partitions": 1, "replication_factor": 1},
                        {"name": "u", "num_partitions": 1, "replication_factor": 4}],
             "timeout_ms": 1000}
        )
        errs = [t["error"] for t in r["topics"]]
        assert errs == [0, ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.INVALID_REPLICATION_FACTOR]
        t = cluster.state_machine.image.topics.by_name["t"]
        assert {p.leader for p in t.partitions.values()} == {1, 2, 3}  # leaders spread
        r = await s1.handlers[ApiKey.CREATE_TOPICS](
            {"topics": [{"name": "t", "num_partitions": 3, "replication_factor": 3}], "timeout_ms": 1}
        )
        assert r["topics"][0]["error"] == ErrorCode.TOPIC_ALREADY_EXISTS

        # broker 3 stops heartbeating: fenced after the session timeout, leadership moves
        for _ in range(20):
            await trio.sleep(0.25)
            for b in (1, 2):
                await heartbeat(s1, b, epochs[b], cluster.state_machine.image.offset)
        img = cluster.state_machine.image
        assert img.cluster.brokers[3].fenced
        for reg in img.topics.by_name["t"].partitions.values():
            assert reg.leader in (1, 2) and 3 not in reg.isr

        # failover: node 2 becomes active once its LeaderChange applies; node 1 is deposed
        cluster.elect(2)
        await wait_active(s2)
        assert not s1.is_active
        assert cluster.state_machine.image.quorum.leader_id == 2
        r = await s2.handlers[ApiKey.INIT_PRODUCER_ID]({})
        r2 = await s2.handlers[ApiKey.INIT_PRODUCER_ID]({})
        assert (r["producer_id"], r["producer_epoch"], r2["producer_id"]) == (0, 0, 1)
        assert cluster.state_machine.image.producer_ids.next_producer_id == 1000

        # metadata fetch from any voter, and from below the log start (snapshot)
        f = await s1.handlers[ApiKey.METADATA_FETCH](
            {"from_offset": 0, "max_records": 5, "max_wait_ms": 0}
        )
        assert f["error"] == 0 and [e[0] for e in f["entries"]] == [0, 1, 2, 3, 4]
        cluster.snapshot()
        f = await s1.handlers[ApiKey.METADATA_FETCH](
            {"from_offset": 0, "max_records": 5, "max_wait_ms": 0}
        )
        assert f["snapshot"]["offset"] == cluster.state_machine.image.offset

        # long poll wakes up on a new record
        async def later():
            await trio.sleep(1)
            await s2.handlers[ApiKey.DELETE_TOPICS]({"topics": ["t"], "timeout_ms": 1})

        nursery.start_soon(later)
        nxt = cluster.state_machine.image.offset + 1
        f = await s1.handlers[ApiKey.METADATA_FETCH](
            {"from_offset": nxt, "max_records": 5, "max_wait_ms": 5000}
        )
        assert [e[2]["type"] for e in f["entries"]] == ["RemoveTopic"]
        nursery.cancel_scope.cancel()


async def test_admin_answers_carry_the_metadata_offset_to_wait_for(autojump_clock):
    """CREATE_TOPICS / CREATE_PARTITIONS / ALTER_CONFIGS / DELETE_TOPICS / ELECT_LEADERS answer
    with ``metadata_offset``: every record the request wrote is at or below it, so a forwarding
    broker waits for exactly that offset (no extra METADATA_FETCH)."""
    cluster = MemoryQuorumCluster([1, 2])
    async with trio.open_nursery() as nursery:
        s1 = await start(nursery, cluster, 1)
        cluster.elect(1)
        await wait_active(s1)
        epoch = await register(s1, 1)
        await heartbeat(s1, 1, epoch, cluster.state_machine.image.offset)

        def offset_of(pred):
            return max(e.offset for e in cluster.voters[1].read(0, 10_000) if pred(e.record))

        h = s1.handlers
        r = await h[ApiKey.CREATE_TOPICS]({"topics": [{"name": "t", "num_partitions": 1,
                                                       "replication_factor": 1}], "timeout_ms": 1000})
        assert r["topics"][0]["error"] == 0
        assert r["metadata_offset"] == offset_of(lambda rec: rec.record_type == "Partition")
        r = await h[ApiKey.CREATE_PARTITIONS]({"topics": [{"name": "t", "count": 3}], "timeout_ms": 1000})
        assert r["topics"][0]["error"] == 0
        assert r["metadata_offset"] == cluster.state_machine.image.offset
        assert len(cluster.state_machine.image.topics.by_name["t"].partitions) == 3
        r = await h[ApiKey.ALTER_CONFIGS]({"topics": [{"name": "t", "configs": {"retention.ms": "1000"}}]})
        assert r["topics"][0]["error"] == 0
        assert r["metadata_offset"] == offset_of(lambda rec: rec.record_type == "ConfigRecord")
        r = await h[ApiKey.ELECT_LEADERS]({"election_type": 0, "topics": None})
        assert r["metadata_offset"] == cluster.state_machine.image.offset
        before = cluster.state_machine.image.offset
        r = await h[ApiKey.DELETE_TOPICS]({"topics": ["t", "missing"], "timeout_ms": 1000})
        assert [t["error"] for t in r["topics"]] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        assert r["metadata_offset"] == offset_of(lambda rec: rec.record_type == "RemoveTopic") > before
        nursery.cancel_scope.cancel()


async def active_with_brokers(nursery, cluster, *brokers):
    """Voter 1 started (no liveness probes: the brokers here have no listener) and active,
    ``brokers`` registered and unfenced; returns (service, {broker: epoch})."""
    s1 = await start(nursery, cluster, 1, **{"broker.liveness.probe.enable": False})
    cluster.elect(1)
    await wait_active(s1)
    epochs = {b: await register(s1, b) for b in brokers}
    for b in brokers:
        await heartbeat(s1, b, epochs[b], cluster.state_machine.image.offset)
    return s1, epochs


async def test_brokers_late_for_a_new_controller_lead_again_without_the_paused_one(autojump_clock):
    """The stale-coordinator sighting (docs/chaos-results.md): node 3 — active controller AND a
    broker — is paused; node 2 takes over; brokers 1 and 2 are still timing out their heartbeats
    at node 3 when node 2's activation grace ends, so it fences all three. Fenced one at a time
    that left every ISR {3}: unfencing 1 and 2 elected nobody, and every partition stayed
    leaderless until node 3 resumed. Fenced together, the first live broker back leads."""
    cluster = MemoryQuorumCluster([1, 2])
    async with trio.open_nursery() as nursery:
        s2 = await start(nursery, cluster, 2, **{"broker.liveness.probe.enable": False})
        s1, epochs = await active_with_brokers(nursery, cluster, 1, 2, 3)
        r = await s1.handlers[ApiKey.CREATE_TOPICS](
            {"topics": [{"name": "t", "num_partitions": 3, "replication_factor": 3}], "timeout_ms": 1000})
        assert r["topics"][0]["error"] == 0

        cluster.elect(2)  # the old active controller is paused: nobody heartbeats the new one
        await wait_active(s2)
        await trio.sleep(3.5)  # its grace (one session) ends
        img = cluster.state_machine.image
        assert all(img.cluster.brokers[b].fenced for b in (1, 2, 3))
        assert {p.leader for p in img.topics.by_name["t"].partitions.values()} == {-1}

        hb = await heartbeat(s2, 2, epochs[2], img.offset)  # broker 2 finds the new controller
        assert hb["error"] == 0 and not hb["is_fenced"]
        parts = cluster.state_machine.image.topics.by_name["t"].partitions.values()
        assert [(p.leader, p.isr) for p in parts] == [(2, (2,))] * 3
        nursery.cancel_scope.cancel()


async def test_a_quorum_that_commits_nothing_does_not_hold_the_decision_lock(autojump_clock):
    """The periodic work's proposals are bounded like every decision: while the quorum commits
    nothing, its stuck fence gives the lock up after half of ``controller.propose.timeout.ms``
    and the heartbeats that need no decision are answered in between (they refresh the
    brokers' sessions); once the quorum commits again, the silent broker is fenced."""
    cluster = MemoryQuorumCluster([1, 2])
    async with trio.open_nursery() as nursery:
        s1, epochs = await active_with_brokers(nursery, cluster, 1, 2, 3)
        cluster.stall()  # broker 3 falls silent; its fence cannot commit
        answered = []
        start_s = trio.current_time()
        while trio.current_time() - start_s < 40:
            hb = await heartbeat(s1, 1, epochs[1], cluster.state_machine.image.offset)
            answered.append((trio.current_time() - start_s, hb["error"]))
            await trio.sleep(0.25)
        assert [err for _t, err in answered] == [0] * len(answered)  # none stuck behind the fence
        assert answered[-1][0] > 35  # (each waited less than a request's bound)
        cluster.resume()
        for _ in range(40):
            await trio.sleep(0.25)
            for b in (1, 2):
                await heartbeat(s1, b, epochs[b], cluster.state_machine.image.offset)
        assert cluster.state_machine.image.cluster.unfenced_ids() == [1, 2]
        nursery.cancel_scope.cancel()


async def test_a_controller_deposed_by_a_refusal_is_active_again_while_it_still_leads(autojump_clock):
    # A proposal answered NOT_CONTROLLER deactivates the controller ("deposed"). When the
    # engine still names it leader in the same term, no leadership event follows; it used to
    # stay inactive for good with a healthy Raft leader (session 23's fresh-clone stall: no
    # active controller for 120 s). It must activate again by itself.
    cluster = MemoryQuorumCluster([1, 2])
    async with trio.open_nursery() as nursery:
        s1 = await start(nursery, cluster, 1)
        cluster.elect(1)
        await wait_active(s1)
        quorum = cluster.voters[1]
        real_propose = quorum.propose
        refusals = [1]

        async def refuse_once(command):
            if refusals:
                refusals.pop()
                raise not_controller(1, "a refusal while this node still leads")
            return await real_propose(command)

        quorum.propose = refuse_once
        r = await s1.handlers[ApiKey.BROKER_REGISTRATION](
            {"broker_id": 4, "incarnation_id": "inc-4", "host": "h", "port": 9004})
        assert r["error"] == ErrorCode.NOT_CONTROLLER
        assert not s1.is_active and cluster.voters[1].leader_id() == 1  # deposed, still leader
        with trio.fail_after(5):
            await wait_active(s1)
        assert await register(s1, 4) >= 1  # and it decides again
        nursery.cancel_scope.cancel()
