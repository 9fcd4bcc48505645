"""Consumer leader-epoch fencing (KIP-320, kept small) against scripted brokers.

Two in-process ``broker.server.Server``s with scripted dispatchers play an old leader (node 1)
and a new leader (node 2) of ``t-0``; both answer METADATA from one shared view. They record
every FETCH and LIST_OFFSETS so the tests can check what the consumer sent.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import pytest
import trio
from rafka.broker.server import Reply, Server
from rafka.client.aio.consumer import AsyncConsumer
from rafka.client.types import TopicPartition
from rafka.log.batch import build_batch
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey, Request

TP = TopicPartition("t", 0)


class Cluster:
    def __init__(self) -> None:
        self.leader = 1
        self.leader_epoch = 5
        self.ports: dict[int, int] = {}
        self.fetches: list[tuple[int, dict[str, Any]]] = []  # (node, partition entry)
        self.list_offsets: list[int] = []
        # per node: called with the FETCH partition entry, returns an error code or None (data)
        self.fetch_error: dict[int, Any] = {1: lambda pd: None, 2: lambda pd: None}

    def metadata(self) -> dict[str, Any]:
        return {"cluster_id": "test", "controller_id": -1,
                "brokers": [{"node_id": n, "host": "127.0.0.1", "port": p, "rack": None}
                            for n, p in self.ports.items()],
                "topics": [{"name": "t", "error": 0, "topic_id": "id-t", "is_internal": False,
                            "partitions": [{"partition": 0, "error": 0, "leader": self.leader,
                                            "leader_epoch": self.leader_epoch,
                                            "replicas": [1, 2], "isr": [1, 2]}]}]}

    def dispatch_for(self, node: int) -> Any:
        async def dispatch(req: Request) -> Reply | dict[str, Any]:
            if req.api_key == ApiKey.METADATA:
                return self.metadata()
            if req.api_key == ApiKey.LIST_OFFSETS:
                self.list_offsets.append(node)
                return {"topics": [{"name": "t", "partitions": [
                    {"partition": 0, "error": 0, "offset": 0, "timestamp": -1,
                     "leader_epoch": self.leader_epoch}]}]}
            if req.api_key == ApiKey.FETCH:
                pd = req.body["topics"][0]["partitions"][0]
                self.fetches.append((node, dict(pd)))
                entry = {"partition": 0, "error": 0, "message": None, "high_watermark": 20,
                         "log_start_offset": 0, "log_end_offset": 20, "diverging_epoch": None,
                         "records_len": 0}
                code = self.fetch_error[node](pd)
                raw = b""
                if code:
                    entry.update(error=int(code), message=ErrorCode(code).name)
                else:
                    now = int(time.time() * 1000)
                    raw = build_batch([(None, b"v%d" % i, [], now) for i in range(3)],
                                      base_offset=pd["fetch_offset"])
                    entry["records_len"] = len(raw)
                return Reply({"topics": [{"name": "t", "partitions": [entry]}]}, [raw])
            return {"error": int(ErrorCode.UNKNOWN_API), "message": "not scripted"}
        return dispatch


async def run_consumer(cluster: Cluster, start: int, **kw: Any) -> list[int]:
    async with trio.open_nursery() as nursery:
        for node in (1, 2):
            cluster.ports[node] = await nursery.start(Server(cluster.dispatch_for(node)).serve)
        async with AsyncConsumer(bootstrap_servers=f"127.0.0.1:{cluster.ports[1]}",
                                 retry_backoff_ms=10, fetch_max_wait_ms=10, **kw) as c:
            c.assign([TP])
            c.seek(TP, start)
            offsets: list[int] = []
            with trio.fail_after(10):
                while not offsets:
                    recs = await c.poll(timeout_ms=200)
                    offsets = [r.offset for r in recs.get(TP, [])]
        nursery.cancel_scope.cancel()
    return offsets


def moved_after_first_answer(cluster: Cluster, code: ErrorCode) -> Any:
    """Node 1 answers ``code`` once, as a deposed leader would; leadership has moved to node 2."""
    def answer(pd: dict[str, Any]) -> ErrorCode:
        cluster.leader, cluster.leader_epoch = 2, 6
        return code
    return answer


def test_fetch_carries_leader_epoch_and_stale_out_of_range_does_not_reset() -> None:
    cluster = Cluster()
    cluster.fetch_error[1] = moved_after_first_answer(cluster, ErrorCode.OFFSET_OUT_OF_RANGE)
    offsets = trio.run(functools.partial(run_consumer, cluster, 10, auto_offset_reset="earliest"))
    assert offsets == [10, 11, 12]  # not reset to 0
    assert cluster.list_offsets == []
    assert cluster.fetches[0] == (1, {**cluster.fetches[0][1], "fetch_offset": 10, "current_leader_epoch": 5})
    sent = [(n, pd["fetch_offset"], pd.get("current_leader_epoch")) for n, pd in cluster.fetches]
    assert sent[:2] == [(1, 10, 5), (2, 10, 6)]
    # the next FETCH goes out as soon as an answer is buffered (prefetch), from the position after it
    assert all(f == (2, 13, 6) for f in sent[2:3]), sent


@pytest.mark.parametrize("code", [ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
                                  ErrorCode.NOT_LEADER_OR_FOLLOWER])
def test_fencing_errors_refresh_and_retry_without_reset(code: ErrorCode) -> None:
    cluster = Cluster()
    cluster.fetch_error[1] = moved_after_first_answer(cluster, code)
    offsets = trio.run(functools.partial(run_consumer, cluster, 10, auto_offset_reset="earliest"))
    assert offsets == [10, 11, 12]
    assert cluster.list_offsets == []
    sent = [(n, pd["fetch_offset"], pd.get("current_leader_epoch")) for n, pd in cluster.fetches]
    # retried at the same position on the new leader (later ones are the prefetch from 13)
    assert next(f for f in sent if f[0] == 2) == (2, 10, 6), sent


def test_out_of_range_confirmed_by_current_leader_resets() -> None:
    cluster = Cluster()
    answered: list[int] = []

    def answer(pd: dict[str, Any]) -> ErrorCode | None:
        if pd["fetch_offset"] == 10:
            answered.append(10)
            return ErrorCode.OFFSET_OUT_OF_RANGE  # same leader, same epoch: a real out-of-range
        return None
    cluster.fetch_error[1] = answer
    offsets = trio.run(functools.partial(run_consumer, cluster, 10, auto_offset_reset="earliest"))
    assert answered == [10]
    assert cluster.list_offsets == [1]
    assert offsets == [0, 1, 2]


def test_stale_broker_metadata_does_not_roll_back_leader_epoch() -> None:
    """Chaos txn seed 10 (nonmonotonic-poll): the consumer read t-0 up to 12 from node 2, leader
    in epoch 6; node 2 crashed, and node 1 — the leader of epoch 5, cut off from the controller
    and still believing it leads — answered the metadata refresh with its stale view (leader 1,
    epoch 5). The consumer took it, fetched 13 from node 1 in epoch 5, got OFFSET_OUT_OF_RANGE
    (node 1's log ends at 8), the out-of-range validation asked node 1 again, saw 'same leader,
    same epoch' and reset to earliest: positions 13 -> 0. A partition's leader epoch in the
    client's metadata must never go back (Kafka's Metadata keeps the newer entry); the consumer
    waits for metadata of epoch >= 6 and resumes at 13."""
    views = {1: (1, 5), 2: (2, 6)}  # per node: (leader, epoch) it reports for t-0
    ports: dict[int, int] = {}
    fetches: list[tuple[int, int, int]] = []  # (node, fetch_offset, current_leader_epoch)
    list_offsets: list[int] = []

    def dispatch_for(node: int) -> Any:
        async def dispatch(req: Request) -> Reply | dict[str, Any]:
            leader, epoch = views[node]
            if req.api_key == ApiKey.METADATA:
                return {"cluster_id": "test", "controller_id": -1,
                        "brokers": [{"node_id": n, "host": "127.0.0.1", "port": p, "rack": None}
                                    for n, p in ports.items()],
                        "topics": [{"name": "t", "error": 0, "topic_id": "id-t", "is_internal": False,
                                    "partitions": [{"partition": 0, "error": 0, "leader": leader,
                                                    "leader_epoch": epoch, "replicas": [1, 2],
                                                    "isr": [leader]}]}]}
            if req.api_key == ApiKey.LIST_OFFSETS:
                list_offsets.append(node)
                return {"topics": [{"name": "t", "partitions": [
                    {"partition": 0, "error": 0, "offset": 0, "timestamp": -1, "leader_epoch": epoch}]}]}
            if req.api_key == ApiKey.FETCH:
                pd = req.body["topics"][0]["partitions"][0]
                off, cle = pd["fetch_offset"], pd.get("current_leader_epoch", -1)
                fetches.append((node, off, cle))
                end = 8 if epoch == 5 else 20  # node 1's log (epoch 5) ends at 8
                entry: dict[str, Any] = {"partition": 0, "error": 0, "message": None, "high_watermark": end,
                         "log_start_offset": 0, "log_end_offset": end, "diverging_epoch": None,
                         "records_len": 0}
                code = None
                if cle is not None and 0 <= cle != epoch:
                    code = ErrorCode.FENCED_LEADER_EPOCH if cle < epoch else ErrorCode.UNKNOWN_LEADER_EPOCH
                elif off > end:
                    code = ErrorCode.OFFSET_OUT_OF_RANGE
                raw = b""
                if code:
                    entry.update(error=int(code), message=code.name)
                elif off < end:
                    now = int(time.time() * 1000)
                    raw = build_batch([(None, b"v%d" % i, [], now) for i in range(min(3, end - off))],
                                      base_offset=off)
                    entry["records_len"] = len(raw)
                return Reply({"topics": [{"name": "t", "partitions": [entry]}]}, [raw])
            return {"error": int(ErrorCode.UNKNOWN_API), "message": "not scripted"}
        return dispatch

    async def serve(node: int, scope: list[trio.CancelScope], *,
                    task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as cs:
            scope.append(cs)
            await Server(dispatch_for(node)).serve(task_status=task_status)

    async def main() -> list[int]:
        node2: list[trio.CancelScope] = []
        async with trio.open_nursery() as nursery:
            ports[1] = await nursery.start(serve, 1, [])
            ports[2] = await nursery.start(serve, 2, node2)
            async with AsyncConsumer(bootstrap_servers=f"127.0.0.1:{ports[2]}", retry_backoff_ms=10,
                                     fetch_max_wait_ms=10, request_timeout_ms=2000,
                                     auto_offset_reset="earliest") as c:
                c.assign([TP])
                c.seek(TP, 10)
                seen: list[int] = []
                with trio.fail_after(10):
                    while not seen:
                        seen = [r.offset for r in (await c.poll(timeout_ms=200)).get(TP, [])]
                assert seen == [10, 11, 12]
                node2[0].cancel()  # node 2 crashes; node 1 still answers with its stale view
                with trio.move_on_after(1.5):
                    while True:
                        seen += [r.offset for r in (await c.poll(timeout_ms=100)).get(TP, [])]
                # node 1 is elected in epoch 7 (its log now reaches past 13)
                views[1] = (1, 7)
                with trio.fail_after(10):
                    while len(seen) == 3:
                        seen += [r.offset for r in (await c.poll(timeout_ms=200)).get(TP, [])]
            nursery.cancel_scope.cancel()
        return seen

    seen = trio.run(main)
    assert seen[:6] == [10, 11, 12, 13, 14, 15], seen  # not reset to 0 by the stale broker
    assert list_offsets == []
    assert not any(off == 13 and cle == 5 for _, off, cle in fetches), fetches
