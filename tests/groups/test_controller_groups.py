"""CONSUMER_GROUP_HEARTBEAT through ControllerService over the in-memory quorum (mock clock):
join, session timeout on the active controller, group state surviving a failover."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing
from rafka.kraft.memory import MemoryQuorumCluster
from rafka.kraft.service import ControllerService
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey, validate_request

VOTERS = [(1, "127.0.0.1:19001", "127.0.0.1:9001"), (2, "127.0.0.1:19002", "127.0.0.1:9002")]


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


async def start(nursery, cluster, node_id):
    svc = ControllerService(
        node_id,
        VOTERS,
        None,
        "/nonexistent",
        None,
        {"broker.session.timeout.ms": 3000, "group.consumer.heartbeat.interval.ms": 500},
        quorum=cluster.voters[node_id],
        rng=random.Random(7),
    )
    await nursery.start(svc.run)
    return svc


async def wait_active(svc):
    while not svc.is_active:
        await trio.sleep(0.01)


async def hb(svc, member_id="", epoch=0, subs=("t",), owned=None, session_timeout_ms=2000):
    body = {
        "group_id": "g",
        "member_id": member_id,
        "member_epoch": epoch,
        "subscribed_topics": list(subs) if subs is not None else None,
        "owned_partitions": owned,
        "session_timeout_ms": session_timeout_ms,
    }
    validate_request(ApiKey.CONSUMER_GROUP_HEARTBEAT, body)
    return await svc.handlers[ApiKey.CONSUMER_GROUP_HEARTBEAT](body)


async def test_heartbeat_timeout_and_failover(autojump_clock):
    cluster = MemoryQuorumCluster([1, 2])
    async with trio.open_nursery() as nursery:
        s1 = await start(nursery, cluster, 1)
        s2 = await start(nursery, cluster, 2)
        cluster.elect(1)
        await wait_active(s1)
        for b in (1, 2):
            r = await s1.handlers[ApiKey.BROKER_REGISTRATION](
                {"broker_id": b, "incarnation_id": f"i{b}", "host": "h", "port": 9000 + b}
            )
            await s1.handlers[ApiKey.BROKER_HEARTBEAT](
                {
                    "broker_id": b,
                    "broker_epoch": r["broker_epoch"],
                    "want_fence": False,
                    "want_shutdown": False,
                    "metadata_offset": cluster.state_machine.image.offset,
                }
            )
        r = await s1.handlers[ApiKey.CREATE_TOPICS](
            {
                "topics": [{"name": "t", "num_partitions": 4, "replication_factor": 1}],
                "timeout_ms": 1000,
            }
        )
        assert r["topics"][0]["error"] == 0

        a = await hb(s1)
        assert (
            a["error"] == 0
            and a["member_epoch"] == 1
            and len(a["assignment"][0]["partitions"]) == 4
        )
        assert a["metadata_offset"] == cluster.state_machine.image.offset
        b = await hb(s1)
        assert b["assignment"] == []  # a must revoke first
        owned_a = a["assignment"]
        a = await hb(s1, a["member_id"], a["member_epoch"], None, owned_a)
        assert len(a["assignment"][0]["partitions"]) == 2  # two pending revocation
        a = await hb(s1, a["member_id"], a["member_epoch"], None, a["assignment"])  # ack
        b = await hb(s1, b["member_id"], b["member_epoch"], None, [])
        assert len(b["assignment"][0]["partitions"]) == 2 and b["member_epoch"] == 2

        # b stops heartbeating: removed after its 2 s session; a then gets everything
        for _ in range(12):
            await trio.sleep(0.25)
            a = await hb(s1, a["member_id"], a["member_epoch"], None, a["assignment"])
        g = cluster.state_machine.image.groups.get("g")
        assert set(g.members) == {a["member_id"]}
        assert len(a["assignment"][0]["partitions"]) == 4

        # failover: the group survives in the image; the new controller gives a fresh session
        cluster.elect(2)
        await wait_active(s2)
        r = await hb(s1, a["member_id"], a["member_epoch"], None, a["assignment"])
        assert r["error"] == ErrorCode.NOT_CONTROLLER
        a = await hb(s2, a["member_id"], a["member_epoch"], None, a["assignment"])
        assert a["error"] == 0 and len(a["assignment"][0]["partitions"]) == 4
        # leave: the last member's departure deletes the group
        r = await hb(s2, a["member_id"], -1, None)
        assert r["error"] == 0 and cluster.state_machine.image.groups.get("g") is None
        nursery.cancel_scope.cancel()
