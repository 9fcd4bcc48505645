"""A deposed group coordinator must not answer OFFSET_FETCH from memory — on real processes.

Txn chaos seed 25 (docs/chaos-results.md): a broker paused while it led a ``__consumer_offsets``
partition answered a new transform member's OFFSET_FETCH from its in-memory cache right after it
resumed, before its metadata told it that it had been deposed; the member re-read old offsets and
duplicated ten outputs. Here, with 3 nodes and RF 3: the leader O of the group's offsets partition
is SIGSTOPped; the controller fences it after the session timeout and moves leadership to an
in-sync follower N; a newer offset is committed through N; an OFFSET_FETCH (``require_stable``, as a
read_committed member sends it) is written to O's socket *while O is stopped*, and O is resumed,
so reading that request is among the first things it does — before its metadata catches up.
O must not answer with the offset N has since overwritten: its read barrier
(``broker/read_barrier.py``) fails, and it answers ``NOT_COORDINATOR``; a client then finds N.
"""

from __future__ import annotations

import os
import signal
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
from rafka.client.sync import Admin, Consumer
from rafka.client.types import TopicPartition
from rafka.wire.connection import ConnectionPool
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

from .conftest import LocalCluster

pytestmark = pytest.mark.timeout(300)

OFFSETS_TOPIC = "__consumer_offsets"
TXN_STATE_TOPIC = "__transaction_state"
GROUP = "stale-g"
TID = "stale-tx"
TP = TopicPartition("stale-in", 0)
BOUND_S = 60  # a bound on each wait, not a timing assertion
RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.CONCURRENT_TRANSACTIONS,
             ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}


def commit_body(offset: int) -> dict[str, Any]:
    return {"group_id": GROUP, "member_epoch": -1,  # from outside the (empty) group
            "topics": [{"name": TP.topic, "partitions": [{"partition": TP.partition, "offset": offset}]}]}


FETCH = {"group_id": GROUP, "require_stable": True,
         "topics": [{"name": TP.topic, "partitions": [TP.partition]}]}


class Nodes:
    def __init__(self, cluster: LocalCluster, pool: ConnectionPool) -> None:
        self.cluster = cluster
        self.pool = pool
        self.addr = {i + 1: a for i, a in enumerate(cluster.addresses())}

    async def req(self, node: int, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        return (await self.pool.request(*self.addr[node], api_key, body)).body

    async def ok(self, node: int, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        """``body``'s answer once it has no error (retriable ones are retried, bounded)."""
        with trio.fail_after(BOUND_S):
            while True:
                answer = await self.req(node, api_key, body)
                errs = {answer.get("error", 0)} | {
                    p["error"] for t in answer.get("topics") or [] for p in t["partitions"]
                    if isinstance(p, dict) and "error" in p}
                if errs == {0}:
                    return answer
                assert errs - {0} <= RETRIABLE, answer
                await trio.sleep(0.1)

    async def partition_of(self, asked: int, topic: str, key: str, count: int) -> dict[str, Any]:
        """The partition ``crc32(key) % count`` of an internal topic as ``asked`` sees it (a
        METADATA naming ``__consumer_offsets`` makes the broker create it)."""
        body = await self.req(asked, ApiKey.METADATA, {"topics": [topic]})
        parts = body["topics"][0]["partitions"]
        if len(parts) < count:
            return {"leader": -1, "isr": [], "leader_epoch": -1}
        return parts[zlib.crc32(key.encode()) % len(parts)]

    async def in_sync_leader(self, topic: str, key: str, count: int) -> int:
        with trio.fail_after(BOUND_S):
            while len((reg := await self.partition_of(1, topic, key, count))["isr"]) < 3 \
                    or reg["leader"] < 0:
                await trio.sleep(0.1)
        return int(reg["leader"])

    async def ask_deposed(self, nursery: trio.Nursery, old: int, topic: str, key: str, count: int,
                          on_new_leader: Callable[[int], Awaitable[None]], api_key: int,
                          body: dict[str, Any]) -> dict[str, Any]:
        """SIGSTOP ``old``; once another broker names a new leader (the controller fenced
        ``old``), run ``on_new_leader(new)``; write ``body`` to ``old`` while it is still
        stopped, SIGCONT it, and return its answer."""
        other = next(n for n in self.addr if n != old)
        pid = self.cluster.pids()[old]
        assert pid
        answers: list[dict[str, Any]] = []

        async def ask() -> None:
            answers.append(await self.req(old, api_key, body))

        os.kill(pid, signal.SIGSTOP)
        try:
            with trio.fail_after(BOUND_S):
                while (reg := await self.partition_of(other, topic, key, count))["leader"] in (old, -1):
                    await trio.sleep(0.1)
            await on_new_leader(int(reg["leader"]))
            nursery.start_soon(ask)
            await trio.sleep(0.3)  # the request sits in the stopped node's socket buffer
        finally:
            os.kill(pid, signal.SIGCONT)
        with trio.fail_after(BOUND_S):
            while not answers:
                await trio.sleep(0.01)
        return answers[0]


def create_input(bootstrap: str) -> None:
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topic(TP.topic, partitions=1, replication_factor=3)


def committed(bootstrap: str) -> int | None:
    with Consumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False) as c:
        return c.committed(TP)


async def test_a_paused_offsets_leader_does_not_answer_offset_fetch_from_memory(
        cluster3: LocalCluster) -> None:
    await trio.to_thread.run_sync(create_input, cluster3.bootstrap)  # the sync client: a thread
    async with trio.open_nursery() as nursery:
        nodes = Nodes(cluster3, ConnectionPool(nursery))
        await nodes.req(1, ApiKey.METADATA, {"topics": [OFFSETS_TOPIC]})  # creates it
        old = await nodes.in_sync_leader(OFFSETS_TOPIC, GROUP, 1)
        await nodes.ok(old, ApiKey.OFFSET_COMMIT, commit_body(5))
        answer = await nodes.req(old, ApiKey.OFFSET_FETCH, FETCH)  # also opens the connection
        assert answer["topics"][0]["partitions"][0]["offset"] == 5, answer

        async def commit_at(new: int) -> None:
            await nodes.ok(new, ApiKey.OFFSET_COMMIT, commit_body(9))
            fetched = await nodes.req(new, ApiKey.OFFSET_FETCH, FETCH)
            assert fetched["topics"][0]["partitions"][0]["offset"] == 9, fetched

        body = await nodes.ask_deposed(nursery, old, OFFSETS_TOPIC, GROUP, 1, commit_at,
                                       ApiKey.OFFSET_FETCH, FETCH)
        entry = (body.get("topics") or [{"partitions": [{}]}])[0]["partitions"][0]
        assert not (body["error"] == 0 and entry.get("offset") == 5), \
            f"the deposed coordinator {old} answered its stale cache: {body}"
        assert body["error"] == ErrorCode.NOT_COORDINATOR, body
        nursery.cancel_scope.cancel()
    # the retriable answer sends a client to the new coordinator
    assert await trio.to_thread.run_sync(committed, cluster3.bootstrap) == 9


async def test_a_paused_txn_coordinator_does_not_verify_from_memory(cluster3: LocalCluster) -> None:
    """KIP-890 ``verify_only`` at a deposed transaction coordinator: it still holds the
    transaction as Ongoing, but its successor has fenced and aborted it (a new incarnation's
    INIT_PRODUCER_ID). Answering NONE would let a late batch of the old incarnation open a
    transaction on the partition that no coordinator will ever end (a hanging LSO)."""
    await trio.to_thread.run_sync(create_input, cluster3.bootstrap)
    async with trio.open_nursery() as nursery:
        nodes = Nodes(cluster3, ConnectionPool(nursery))
        init = {"transactional_id": TID, "transaction_timeout_ms": 60_000}
        with trio.fail_after(BOUND_S):  # the first INIT_PRODUCER_ID creates __transaction_state
            while (await nodes.req(1, ApiKey.INIT_PRODUCER_ID, init))["error"] not in \
                    (0, ErrorCode.NOT_COORDINATOR):
                await trio.sleep(0.1)
        old = await nodes.in_sync_leader(TXN_STATE_TOPIC, TID, 5)
        first = await nodes.ok(old, ApiKey.INIT_PRODUCER_ID, init)
        add = {"transactional_id": TID, "producer_id": first["producer_id"],
               "producer_epoch": first["producer_epoch"],
               "topics": [{"name": TP.topic, "partitions": [TP.partition]}]}
        await nodes.ok(old, ApiKey.ADD_PARTITIONS_TO_TXN, add)  # Ongoing, holds stale-in/0
        verify = {**add, "verify_only": True}
        assert (await nodes.ok(old, ApiKey.ADD_PARTITIONS_TO_TXN, verify))["error"] == 0

        async def fence_at(new: int) -> None:  # a new incarnation: epoch bump, the old aborted
            second = await nodes.ok(new, ApiKey.INIT_PRODUCER_ID, init)
            assert second["producer_epoch"] > first["producer_epoch"], second
            refused = await nodes.req(new, ApiKey.ADD_PARTITIONS_TO_TXN, verify)
            assert refused["topics"][0]["partitions"][0]["error"] == ErrorCode.INVALID_TXN_STATE

        body = await nodes.ask_deposed(nursery, old, TXN_STATE_TOPIC, TID, 5, fence_at,
                                       ApiKey.ADD_PARTITIONS_TO_TXN, verify)
        codes = {p["error"] for t in body.get("topics") or [] for p in t["partitions"]}
        assert not (body["error"] == 0 and codes == {0}), \
            f"the deposed coordinator {old} verified a transaction its successor aborted: {body}"
        assert body["error"] == ErrorCode.NOT_COORDINATOR, body
        nursery.cancel_scope.cancel()
