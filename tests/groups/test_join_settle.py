"""How fast a group settles, counted in heartbeats (never in time): real ``GroupMembership``
clients (client/groups.py) heartbeating to a real ``ControllerService`` over the in-memory
quorum, on trio's mock clock, with the default heartbeat interval (5 s) and session (45 s).

* three members starting at once reach 2 + 2 + 2 on 6 partitions within a handful of
  heartbeats, and no partition is ever held by two members (checked in the controller's image
  after every decision and in the clients' rebalance callbacks);
* once settled, each member heartbeats once per configured interval, as before (the settling
  hint must not raise the steady-state rate);
* the controller's interval sequence after a change: short, doubling back to the configured one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest
import rafka.client.groups  # noqa: F401  (registers the group coordinator of AsyncConsumer)
import trio
import trio.testing
from rafka.client.aio.consumer import AsyncConsumer
from rafka.client.groups import GroupMembership
from rafka.client.types import TopicPartition
from rafka.kraft.groups.coordinator import (
    MIN_HEARTBEAT_MS,
    RECONCILE_HEARTBEAT_MS,
    check_invariants,
    settling_interval,
)
from rafka.kraft.groups.service import GroupsController
from rafka.kraft.memory import MemoryQuorumCluster
from rafka.kraft.service import ControllerService
from rafka.wire.protocol import ApiKey, validate_request

INTERVAL_MS = 5000  # the controller default (group.consumer.heartbeat.interval.ms)


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


@dataclass
class _Response:
    body: dict[str, Any]


class DirectCore:
    """What ``GroupMembership`` needs of a ``ClientCore``: heartbeats go straight to the
    controller's handler (as a broker forwards them); every answer is checked and counted."""

    client_id = "test"
    retry_backoff_ms = 100

    def __init__(self, svc: ControllerService, cluster: MemoryQuorumCluster) -> None:
        self.svc = svc
        self.cluster = cluster
        self.heartbeats = 0

    async def request_any(self, api_key: ApiKey, body: dict[str, Any]) -> _Response:
        assert api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT
        validate_request(api_key, body)
        self.heartbeats += 1
        resp = await self.svc.handlers[api_key](dict(body))
        g = self.cluster.state_machine.image.groups.get("g")
        if g is not None:
            check_invariants(g)  # no partition held by two members, epochs ordered
        return _Response(resp)


async def _controller(nursery: trio.Nursery) -> tuple[ControllerService, MemoryQuorumCluster]:
    cluster = MemoryQuorumCluster([1])
    svc = ControllerService(
        1,
        [(1, "127.0.0.1:19001", "127.0.0.1:9001")],
        None,
        "/nonexistent",
        None,
        {"broker.session.timeout.ms": 600_000},
        quorum=cluster.voters[1],
        rng=random.Random(3),
    )
    await nursery.start(svc.run)
    cluster.elect(1)
    while not svc.is_active:
        await trio.sleep(0.01)
    r = await svc.handlers[ApiKey.BROKER_REGISTRATION](
        {"broker_id": 1, "incarnation_id": "i", "host": "h", "port": 9001}
    )
    await svc.handlers[ApiKey.BROKER_HEARTBEAT](
        {
            "broker_id": 1,
            "broker_epoch": r["broker_epoch"],
            "want_fence": False,
            "want_shutdown": False,
            "metadata_offset": cluster.state_machine.image.offset,
        }
    )
    r = await svc.handlers[ApiKey.CREATE_TOPICS](
        {"topics": [{"name": "t", "num_partitions": 6, "replication_factor": 1}], "timeout_ms": 1000}
    )
    assert r["topics"][0]["error"] == 0, r
    return svc, cluster


class Owners:
    """The clients' view: which member's callbacks say it holds each partition."""

    def __init__(self) -> None:
        self.owner: dict[TopicPartition, int] = {}

    def callbacks(self, i: int) -> dict[str, Any]:
        def assigned(tps: set[TopicPartition]) -> None:
            for tp in tps:
                assert tp not in self.owner, f"{tp} assigned to {i} while {self.owner[tp]} holds it"
                self.owner[tp] = i

        def released(tps: set[TopicPartition]) -> None:
            for tp in tps:
                assert self.owner.pop(tp) == i

        return {"on_partitions_assigned": assigned, "on_partitions_revoked": released}


def _member(svc: ControllerService, cluster: MemoryQuorumCluster, owners: Owners, i: int
            ) -> tuple[GroupMembership, DirectCore]:
    consumer = AsyncConsumer("t", group_id="g", enable_auto_commit=False, **owners.callbacks(i))
    m = GroupMembership(consumer)
    core = DirectCore(svc, cluster)
    m.core = core  # type: ignore[assignment]
    return m, core


async def _settle(starts_s: list[float]) -> tuple[list[int], list[int]]:
    """Members starting at ``starts_s``: (heartbeats each sent from the last one's start until
    2 + 2 + 2, heartbeats each sent in 60 s of steady state, 30 s after that)."""
    owners = Owners()
    async with trio.open_nursery() as nursery:
        svc, cluster = await _controller(nursery)
        ms = [_member(svc, cluster, owners, i) for i in range(len(starts_s))]
        t0 = trio.current_time()
        for (m, _), start in zip(ms, starts_s, strict=True):
            await trio.sleep_until(t0 + start)
            await nursery.start(m.run)
            await m.subscribe(["t"])
        at_last_start = [core.heartbeats for _, core in ms]
        while sorted(len(m.owned) for m, _ in ms) != [2, 2, 2]:
            await trio.sleep(0.001)
        to_settle = [core.heartbeats - n for (_, core), n in zip(ms, at_last_start, strict=True)]
        assert set(owners.owner) == {TopicPartition("t", p) for p in range(6)}
        await trio.sleep(30)
        before = [core.heartbeats for _, core in ms]
        await trio.sleep(60)
        steady = [core.heartbeats - b for (_, core), b in zip(ms, before, strict=True)]
        assert sorted(len(m.owned) for m, _ in ms) == [2, 2, 2]  # nothing moved meanwhile
        nursery.cancel_scope.cancel()
    return to_settle, steady


async def test_three_members_at_once_settle_in_a_few_heartbeats(autojump_clock):
    to_settle, steady = await _settle([0, 0, 0])
    # the first member joins, gets all 6, revokes 4 on its next heartbeat and acknowledges at
    # once; the other two take 2 each on their next one: [2, 1, 2] since the last one started.
    # With the interval the first member got at its join (5 s) and the others polling every
    # 300 ms meanwhile, it was [2, 17, 18].
    assert sum(to_settle) <= 8, to_settle
    assert max(to_settle) <= 3, to_settle
    # steady state: one heartbeat per configured interval, as without the settling hint
    assert all(60_000 // INTERVAL_MS - 1 <= n <= 60_000 // INTERVAL_MS + 1 for n in steady), steady


async def test_staggered_members_settle_within_a_few_heartbeats(autojump_clock):
    # members a second apart: when the last one joins, the first ones' intervals have grown
    # back to about a second, not to 5 s; it is asked back when they are due, not every 300 ms
    to_settle, steady = await _settle([0, 1.0, 2.0])
    assert sum(to_settle) <= 10, to_settle  # [2, 4, 3]; it was [2, 11, 12]
    assert all(60_000 // INTERVAL_MS - 1 <= n <= 60_000 // INTERVAL_MS + 1 for n in steady), steady


def test_settling_interval():
    assert settling_interval(5000, None) == 5000  # not known to have changed
    assert settling_interval(5000, 0) == RECONCILE_HEARTBEAT_MS
    assert settling_interval(5000, 1200) == 1200
    assert settling_interval(5000, 60_000) == 5000
    assert settling_interval(200, 0) == 200  # a shorter configured interval is kept
    assert settling_interval(0, 0) == 0  # a leave


async def test_controller_interval_doubles_back_after_a_change(autojump_clock):
    async with trio.open_nursery() as nursery:
        svc, cluster = await _controller(nursery)
        hb = svc.handlers[ApiKey.CONSUMER_GROUP_HEARTBEAT]
        resp = await hb({"group_id": "g", "member_id": "", "member_epoch": 0,
                         "subscribed_topics": ["t"], "owned_partitions": None})
        assert resp["heartbeat_interval_ms"] == RECONCILE_HEARTBEAT_MS  # the group just changed
        owned, seen = resp["assignment"], []
        body = {"group_id": "g", "member_id": resp["member_id"], "owned_partitions": owned}
        for _ in range(12):
            await trio.sleep(resp["heartbeat_interval_ms"] / 1000)
            resp = await hb({**body, "member_epoch": resp["member_epoch"]})
            seen.append(resp["heartbeat_interval_ms"])
        # as long as the group has been still (300 ms, doubling), then the configured interval
        assert seen[:6] == [300, 600, 1200, 2400, 4800, 5000], seen
        assert set(seen[6:]) == {INTERVAL_MS}
        # a new controller (failover) does not know when the group last changed: no hint
        image = cluster.state_machine.image
        fresh = GroupsController()
        fresh.activate(image, 0)
        r, _ = fresh.heartbeat(image, {**body, "member_epoch": resp["member_epoch"]}, now_ms=10)
        assert r["heartbeat_interval_ms"] == INTERVAL_MS
        nursery.cancel_scope.cancel()


async def test_a_waiting_member_is_timed_by_the_holders_release(autojump_clock):
    async with trio.open_nursery() as nursery:
        svc, _ = await _controller(nursery)
        hb = svc.handlers[ApiKey.CONSUMER_GROUP_HEARTBEAT]
        join = {"member_id": "", "member_epoch": 0, "subscribed_topics": ["t"],
                "owned_partitions": None}
        a = await hb({"group_id": "g", **join})
        for _ in range(3):  # a alone: 300, 600, 1200 ms
            await trio.sleep(a["heartbeat_interval_ms"] / 1000)
            a = await hb({"group_id": "g", "member_id": a["member_id"],
                          "member_epoch": a["member_epoch"], "owned_partitions": a["assignment"]})
        assert a["heartbeat_interval_ms"] == 1200
        a_due = trio.current_time() + 1.2
        await trio.sleep(0.1)
        b = await hb({"group_id": "g", **join})
        assert b["assignment"] == []  # a holds its 3 until it revokes at its next heartbeat
        # b is asked back just after a's next heartbeat is due, not every 300 ms until then
        back = trio.current_time() + b["heartbeat_interval_ms"] / 1000
        assert a_due < back <= a_due + 0.051, (a_due, back)
        await trio.sleep_until(a_due)
        a = await hb({"group_id": "g", "member_id": a["member_id"],
                      "member_epoch": a["member_epoch"], "owned_partitions": a["assignment"]})
        assert len(a["assignment"][0]["partitions"]) == 3  # told to revoke 3
        # b arriving before a acknowledges is asked back at once (a acks without waiting)
        b = await hb({"group_id": "g", "member_id": b["member_id"],
                      "member_epoch": b["member_epoch"], "owned_partitions": []})
        assert b["assignment"] == [] and b["heartbeat_interval_ms"] == MIN_HEARTBEAT_MS
        a = await hb({"group_id": "g", "member_id": a["member_id"],
                      "member_epoch": a["member_epoch"], "owned_partitions": a["assignment"]})
        await trio.sleep(b["heartbeat_interval_ms"] / 1000)
        b = await hb({"group_id": "g", "member_id": b["member_id"],
                      "member_epoch": b["member_epoch"], "owned_partitions": []})
        assert len(b["assignment"][0]["partitions"]) == 3
        nursery.cancel_scope.cancel()
