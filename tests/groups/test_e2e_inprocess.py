"""End to end in one process: a real broker (ReplicaManager, NodeApi, trio Server on loopback)
whose metadata comes from a ControllerService over the in-memory quorum, and real
AsyncConsumers in a group. Checks: 3 consumers on 6 partitions get 2 each; a crashed member's
partitions move within its session timeout; no record is skipped (at-least-once, record by
record); two groups each get every record; a stale member's commit is rejected."""

from __future__ import annotations

import contextlib
import random
from typing import Any

import trio
from rafka.broker.events import EventLog
from rafka.broker.handlers import NodeApi
from rafka.broker.metadata_listener import MetadataPublisher
from rafka.broker.replica_manager import ReplicaManager
from rafka.broker.server import Server
from rafka.client import AsyncConsumer, AsyncProducer, TopicPartition
from rafka.client.groups import describe_group
from rafka.kraft.memory import MemoryQuorumCluster
from rafka.kraft.service import ControllerService
from rafka.wire.errors import ErrorCode, error_for
from rafka.wire.protocol import ApiKey

from tests.broker.harness import node_config

N_RECORDS = 600
SESSION_MS = 1500


class DirectChannel:
    """A ControllerChannel that calls the in-process controller's handlers."""

    leader_hint = None

    def __init__(self, svc: ControllerService) -> None:
        self.svc = svc

    async def request(self, api_key: int, body: dict[str, Any], *,
                      attempt_timeout_s: float | None = None,
                      trace: list[Any] | None = None) -> dict[str, Any]:
        return await self.svc.handlers[api_key](dict(body))  # one in-process attempt

    async def request_any(self, api_key: int, body: dict[str, Any], *,
                          attempt_timeout_s: float | None = None) -> dict[str, Any]:
        return await self.request(api_key, body)


class MetadataGate:
    """Holds the broker's metadata image where it is while closed: a broker cut off from the
    controllers whose clients and followers still reach it (queue chaos seed 3, session 28)."""

    def __init__(self) -> None:
        self.opened = trio.Event()
        self.opened.set()

    def close(self) -> None:
        self.opened = trio.Event()

    def open(self) -> None:
        self.opened.set()


@contextlib.asynccontextmanager
async def cluster(tmp_path, gate: MetadataGate | None = None):
    q = MemoryQuorumCluster([1])
    svc = ControllerService(
        1,
        [(1, "127.0.0.1:1", "127.0.0.1:2")],
        None,
        tmp_path / "ctl",
        None,
        {"broker.session.timeout.ms": 5000, "group.consumer.heartbeat.interval.ms": 200},
        quorum=q.voters[1],
        rng=random.Random(1),
    )
    cfg = node_config(tmp_path)
    events = EventLog(cfg.data_dir / "events.jsonl", 1)
    rm = ReplicaManager(1, cfg.data_dir, dict(cfg.broker), cfg.topic_defaults(), events)
    pub = MetadataPublisher(1)
    pub.subscribe(rm.on_metadata)
    api = NodeApi(
        cluster_id="t",
        replica_manager=rm,
        publisher=pub,
        channel=DirectChannel(svc),  # type: ignore[arg-type]
        topic_defaults=cfg.topic_defaults(),
    )
    server = Server(api.dispatch, "127.0.0.1", 0)

    async def bridge() -> None:  # what MetadataListener does over the network
        nxt = 0
        while True:
            entries = q.voters[1].read(nxt, 1000)
            if entries:
                if gate is not None:
                    await gate.opened.wait()
                await pub.publish_records([(e.offset, e.epoch, e.record) for e in entries])
                nxt = entries[-1].offset + 1
            else:
                await q.voters[1].wait_for_offset(nxt)

    async def broker_heartbeats(epoch: int) -> None:
        while True:
            await svc.handlers[ApiKey.BROKER_HEARTBEAT](
                {
                    "broker_id": 1,
                    "broker_epoch": epoch,
                    "metadata_offset": pub.image.offset,
                    "want_fence": False,
                    "want_shutdown": False,
                }
            )
            await trio.sleep(0.5)

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(svc.run)
            q.elect(1)
            while not svc.is_active:
                await trio.sleep(0.01)
            await nursery.start(rm.run)
            port = await nursery.start(server.serve)
            nursery.start_soon(bridge)
            r = await svc.handlers[ApiKey.BROKER_REGISTRATION](
                {"broker_id": 1, "incarnation_id": "i", "host": "127.0.0.1", "port": port}
            )
            nursery.start_soon(broker_heartbeats, r["broker_epoch"])
            await pub.wait_for(
                lambda img: (
                    img.cluster.brokers.get(1) is not None and not img.cluster.brokers[1].fenced
                )
            )
            r = await svc.handlers[ApiKey.CREATE_TOPICS](
                {
                    "topics": [{"name": "t", "num_partitions": 6, "replication_factor": 1}],
                    "timeout_ms": 5000,
                }
            )
            assert r["topics"][0]["error"] == 0, r
            await pub.wait_for(lambda img: "t" in img.topics.by_name)
            yield f"127.0.0.1:{port}", svc, pub
            nursery.cancel_scope.cancel()
    finally:
        rm.close()
        events.close()


async def consume(
    bootstrap, group, seen: dict, stop: trio.Event, out: list, scope: trio.CancelScope
):
    with scope:
        async with AsyncConsumer(
            "t",
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            fetch_max_wait_ms=100,
        ) as c:
            c.cancel_scope = scope  # to "kill" this very consumer
            out.append(c)
            await _loop(c, seen, stop)


async def _loop(c, seen, stop):
    if True:
        while not stop.is_set():
            got = await c.poll(timeout_ms=100)
            for tp, recs in got.items():
                for r in recs:
                    seen.setdefault((tp.partition, r.offset), r.value)
            if got:
                with contextlib.suppress(Exception):  # a commit may race a rebalance: at-least-once
                    await c.commit()


async def wait_until(pred, timeout_s, what):
    with trio.move_on_after(timeout_s):
        while not pred():
            await trio.sleep(0.05)
        return
    raise AssertionError(f"timed out waiting for {what}")


async def test_groups_end_to_end(tmp_path):
    async with cluster(tmp_path) as (bootstrap, svc, pub):
        async with AsyncProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=1) as p:
            for i in range(N_RECORDS):
                await p.send("t", value=b"%d" % i, partition=i % 6)
            await p.flush()
        expected_per_partition = N_RECORDS // 6

        seen: dict = {}
        other: dict = {}
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            scopes = [trio.CancelScope() for _ in range(4)]
            consumers: list = []
            for i in range(3):
                nursery.start_soon(consume, bootstrap, "g", seen, stop, consumers, scopes[i])
            others: list = []
            nursery.start_soon(consume, bootstrap, "h", other, stop, others, scopes[3])
            await wait_until(lambda: len(consumers) == 3 and others, 10, "consumers to start")

            def sizes():
                return sorted(len(c.assignment()) for c in consumers)

            await wait_until(lambda: sizes() == [2, 2, 2], 20, "3 members with 2 partitions each")
            assert set().union(*(c.assignment() for c in consumers)) == {
                TopicPartition("t", i) for i in range(6)
            }

            # "kill -9" one member: its nursery dies without leaving the group
            victim = consumers[2]
            victim_parts = victim.assignment()
            victim._coordinator.close = _crash  # no commit, no leave heartbeat
            victim.cancel_scope.cancel()
            survivors = consumers[:2]
            t0 = trio.current_time()
            try:
                await wait_until(
                    lambda: sorted(len(c.assignment()) for c in survivors) == [3, 3],
                    20,
                    "the dead member's partitions to move",
                )
            except AssertionError:
                print("GROUP", pub.image.groups.get("g"))
                print(
                    "SURVIVORS",
                    [
                        (c._coordinator.member_id, c._coordinator.member_epoch, c.assignment())
                        for c in survivors
                    ],
                )
                raise
            moved_after = trio.current_time() - t0
            assert moved_after < SESSION_MS / 1000 + 3, moved_after
            assert victim_parts <= set().union(*(c.assignment() for c in survivors))

            await wait_until(
                lambda: len(seen) == N_RECORDS and len(other) == N_RECORDS, 30, "every record"
            )
            # at-least-once, record by record: every offset of every partition, right value
            for part in range(6):
                for off in range(expected_per_partition):
                    assert seen[(part, off)] == b"%d" % (off * 6 + part)
                    assert other[(part, off)] == seen[(part, off)]

            # a commit with an epoch that is neither the member's nor its previous one is
            # rejected (forged: the previous epoch is accepted, see broker/groups/offsets.py)
            m = survivors[0]._coordinator
            real = m.member_epoch
            m.member_epoch = real + 7
            tp = next(iter(survivors[0].assignment()))
            try:
                await m.commit({tp: 0})
                raise AssertionError("stale commit accepted")
            except Exception as exc:
                assert getattr(exc, "code", None) == ErrorCode.FENCED_MEMBER_EPOCH, exc
            finally:
                m.member_epoch = real

            # describe shows the 2 members, committed offsets and zero lag once all is committed
            for c in survivors:
                await c.commit()
            d = await describe_group(survivors[0]._core, "g")
            assert len(d["members"]) == 2
            assert {(r["partition"], r["lag"]) for r in d["partitions"]} == {
                (i, 0) for i in range(6)
            }
            stop.set()


async def _crash() -> None:
    raise error_for(ErrorCode.NETWORK_EXCEPTION, "crashed")


async def test_a_removed_member_rejoins_under_a_new_id_so_its_old_commits_are_refused(tmp_path):
    """Txn chaos seed 9 at f147594 (an exactly-once transform processed two inputs twice): the
    group's only member is removed (as a missed session does) while its application still
    holds ``group_metadata()`` for a transaction. The group is deleted with it and starts over
    at epoch 1, so rejoining under the same id gave the member the very (id, epoch) it had and
    the old transaction's offset commit went through — after the consumer had re-read the
    committed offsets. The member now rejoins under a new id; a commit with the old identity
    gets UNKNOWN_MEMBER_ID."""
    from rafka.wire.connection import connect

    async with cluster(tmp_path) as (bootstrap, svc, pub):
        async with AsyncConsumer(bootstrap_servers=bootstrap, group_id="solo",
                                 enable_auto_commit=False) as c:
            await c.subscribe(["t"])
            await wait_until(lambda: len(c.assignment()) == 6, 20, "the assignment")
            old = c.group_metadata()
            assert old.member_epoch == 1
            removed = await svc.handlers[ApiKey.CONSUMER_GROUP_HEARTBEAT](
                {"group_id": "solo", "member_id": old.member_id, "member_epoch": -1})
            assert removed["error"] == 0, removed
            with trio.fail_after(20):  # its only member gone, the group is deleted...
                await pub.wait_for(lambda img: img.groups.get("solo") is None)
                # ... and the consumer, told at its next heartbeat, joins it again
                await pub.wait_for(lambda img: img.groups.get("solo") is not None)
            await wait_until(lambda: c.group_metadata().member_epoch > 0
                             and len(c.assignment()) == 6, 20, "the rejoin")
            new = c.group_metadata()
            assert new.member_epoch == old.member_epoch == 1  # the epoch alone can't tell them apart
            host, port = bootstrap.split(":")
            async with connect(host, int(port)) as conn:
                body = {"group_id": "solo", "member_id": old.member_id,
                        "member_epoch": old.member_epoch,
                        "min_metadata_offset": old.min_metadata_offset,
                        "topics": [{"name": "t", "partitions": [{"partition": 0, "offset": 7}]}]}
                stale = (await conn.request(ApiKey.OFFSET_COMMIT, body)).body
                assert stale.get("error") == ErrorCode.UNKNOWN_MEMBER_ID, stale
                assert new.member_id != old.member_id
                fresh = (await conn.request(ApiKey.OFFSET_COMMIT, {
                    **body, "member_id": new.member_id, "member_epoch": new.member_epoch,
                    "min_metadata_offset": new.min_metadata_offset})).body
                assert fresh.get("error", 0) == 0, fresh


async def test_an_expired_member_cannot_commit_after_its_successor_read_the_offsets(tmp_path):
    """Queue chaos seed 3 at 9f9f5a441b6a (session 28): the controller expired member A while
    the offsets coordinator's image lagged (the broker was cut off from the controllers, not
    from its clients). B was given A's partitions and read the committed offsets; A, not
    knowing it was gone, went on committing, and the coordinator — validating against its old
    image — accepted A's higher offsets. B's next commit then moved the committed offset back.

    Now B's OFFSET_FETCH carries its member epoch and metadata offset: the coordinator answers
    only once its image has B's assignment (so A's expiry too), and after every commit it
    accepted before. A's commits before that point are read by B; after it, refused."""
    from rafka.wire.connection import connect

    gate = MetadataGate()
    async with cluster(tmp_path, gate) as (bootstrap, svc, pub):
        from rafka.broker.groups.offsets_cache import OFFSETS_TOPIC, offsets_topic_spec

        created = await svc.handlers[ApiKey.CREATE_TOPICS](
            {"topics": [offsets_topic_spec(1)], "timeout_ms": 5000})
        assert created["topics"][0]["error"] == 0, created
        await pub.wait_for(lambda img: OFFSETS_TOPIC in img.topics.by_name)
        heartbeat = svc.handlers[ApiKey.CONSUMER_GROUP_HEARTBEAT]

        async def join(session_ms: int) -> dict[str, Any]:
            r = await heartbeat({"group_id": "z", "member_id": "", "member_epoch": 0,
                                 "subscribed_topics": ["t"], "session_timeout_ms": session_ms})
            assert r["error"] == 0, r
            return r

        async def owning_all(r: dict[str, Any]) -> dict[str, Any]:
            """Heartbeat as ``r``'s member until it owns the six partitions of ``t``."""
            with trio.fail_after(20):
                while sum(len(t["partitions"]) for t in r.get("assignment") or ()) < 6:
                    await trio.sleep(0.05)
                    r = {**r, **await heartbeat({"group_id": "z", "member_id": r["member_id"],
                                                 "member_epoch": r["member_epoch"]})}
                    assert r["error"] == 0, r
            return r

        def as_member(r: dict[str, Any]) -> dict[str, Any]:
            return {"group_id": "z", "member_id": r["member_id"], "member_epoch": r["member_epoch"],
                    "min_metadata_offset": r["metadata_offset"]}

        host, port = bootstrap.split(":")
        async with connect(host, int(port)) as conn:

            async def commit(member: dict[str, Any], offset: int) -> int:
                body = {**member, "topics": [{"name": "t", "partitions": [
                    {"partition": 0, "offset": offset}]}]}
                r = (await conn.request(ApiKey.OFFSET_COMMIT, body)).body
                return r.get("error") or r["topics"][0]["partitions"][0]["error"]

            a = await owning_all(await join(1000))
            member_a = as_member(a)
            await pub.wait_for_offset(a["metadata_offset"])
            assert await commit(member_a, 10) == 0

            gate.close()  # the broker's image stops here: A owns every partition in it
            b = await join(30_000)  # A stops heartbeating: expired after 1 s, B takes over
            b = await owning_all(b)
            assert await commit(member_a, 20) == 0  # the broker cannot know yet: accepted

            fetched: list[dict[str, Any]] = []

            async def fetch() -> None:
                body = {**as_member(b), "topics": [{"name": "t", "partitions": [0]}]}
                fetched.append((await conn.request(ApiKey.OFFSET_FETCH, body)).body)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(fetch)
                await trio.sleep(0.3)
                # B's read waits for an image with its assignment: it has not been answered,
                # and a commit A makes meanwhile is still ordered before it
                assert not fetched
                assert await commit(member_a, 25) == 0
                gate.open()
            assert fetched[0].get("error", 0) == 0, fetched
            assert fetched[0]["topics"][0]["partitions"][0]["offset"] == 25
            # from here on the broker knows A is gone: its commits are refused, B's go on
            assert await commit(member_a, 30) == ErrorCode.UNKNOWN_MEMBER_ID
            assert await commit(as_member(b), 26) == 0
            r = (await conn.request(ApiKey.OFFSET_FETCH, {
                **as_member(b), "topics": [{"name": "t", "partitions": [0]}]})).body
            assert r["topics"][0]["partitions"][0]["offset"] == 26
