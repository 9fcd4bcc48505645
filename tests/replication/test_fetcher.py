"""The replica fetcher between two real PartitionLogs over the wire protocol (in memory).

The leader side here is a minimal FETCH server written against the same pieces the broker's
handler uses (``find_divergence``, ``validate_leader_epoch``, ``LeaderState``), speaking the real
codec over a trio memory stream, so the follower's requests and the leader's raw-batch
responses go through ``encode_*``/``decode_*`` and ``client.connection.Connection``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing

from broker.errors import ErrorCode
from broker.protocol import (
    NEED_DATA,
    ApiKey,
    FrameDecoder,
    decode_request,
    encode_response_head,
)
from broker.replication.epochs import find_divergence
from broker.replication.fetcher import ReplicaFetcherManager
from broker.replication.state import AlterPartitionRequest, LeaderState, validate_leader_epoch
from client.connection import Connection
from log.batch import build_batch
from log.config import LogConfig
from log.partition_log import PartitionLog

TP = ("t", 0)


def batch(*values: bytes) -> bytes:
    return build_batch([(None, v, [], 1_000) for v in values])


def open_log(path: Path) -> PartitionLog:
    return PartitionLog.open(path, LogConfig())


def all_bytes(plog: PartitionLog) -> bytes:
    return plog.read_bytes(plog.log_start_offset, 1 << 30) if plog.log_end_offset else b""


class MiniLeader:
    """Leader 1 of TP: answers FETCH (replica 2) from ``plog`` and commits ISR changes at once."""

    def __init__(self, plog: PartitionLog, leader_epoch: int, isr: tuple[int, ...]) -> None:
        self.log = plog
        plog.epochs.assign(leader_epoch, plog.log_end_offset)  # as the broker does on election
        self.state = LeaderState(TP, leader_id=1, leader_epoch=leader_epoch, partition_epoch=1,
                                 replicas=(1, 2), isr=isr, log_end_offset=plog.log_end_offset,
                                 high_watermark=0, min_insync_replicas=1)
        self.requests: list[dict[str, Any]] = []

    def append(self, records: bytes) -> None:
        self.log.append(records, self.state.leader_epoch)
        self._effects(self.state.on_append(self.log.log_end_offset))

    def _effects(self, effects: list[Any]) -> None:
        for e in effects:
            if isinstance(e, AlterPartitionRequest):  # the controller says yes at once
                self.state.on_alter_partition_response(
                    {"error": 0, "leader_epoch": e.leader_epoch,
                     "partition_epoch": e.partition_epoch + 1, "isr": list(e.new_isr)}, 0)

    def fetch(self, body: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        self.requests.append(body)
        raws: list[bytes] = []
        topics = []
        for t in body["topics"]:
            parts = []
            for pd in t["partitions"]:
                e: dict[str, Any] = {"partition": pd["partition"], "error": 0,
                                     "diverging_epoch": None, "records_len": 0}
                code = validate_leader_epoch(pd.get("current_leader_epoch"),
                                             self.state.leader_epoch)
                off = pd["fetch_offset"]
                if code:
                    e["error"] = int(code)
                else:
                    div = find_divergence(self.log.epochs, self.log.log_end_offset, off,
                                          pd.get("last_fetched_epoch"))
                    if div is not None:
                        e["diverging_epoch"] = div.to_dict()
                    elif off > self.log.log_end_offset:
                        e["error"] = int(ErrorCode.OFFSET_OUT_OF_RANGE)
                    else:
                        self._effects(self.state.on_follower_fetch(body["replica_id"], off, 0))
                        data = self.log.read_bytes(off, pd["partition_max_bytes"])
                        e["records_len"] = len(data)
                        raws.append(data)
                e.update(high_watermark=self.state.high_watermark,
                         log_start_offset=self.log.log_start_offset,
                         log_end_offset=self.log.log_end_offset)
                parts.append(e)
            topics.append({"name": t["name"], "partitions": parts})
        return {"topics": topics}, b"".join(raws)

    async def serve(self, stream: trio.abc.Stream) -> None:
        dec = FrameDecoder()
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            dec.receive_data(data)
            while (frame := dec.next_frame()) is not NEED_DATA:
                req = decode_request(frame)  # type: ignore[arg-type]
                assert req.api_key == ApiKey.FETCH
                body, raw = self.fetch(req.body)
                await stream.send_all(encode_response_head(req.correlation_id, body, len(raw)) + raw)


class MemPool:
    """A ConnectionPool stand-in: one in-memory connection to the MiniLeader."""

    def __init__(self, nursery: trio.Nursery, leader: MiniLeader) -> None:
        self.nursery = nursery
        self.leader = leader
        self.conn: Connection | None = None

    async def request(self, host: str, port: int, api_key: int, body: dict[str, Any]) -> Any:
        if self.conn is None:
            client, server = trio.testing.memory_stream_pair()
            self.conn = Connection(client)
            await self.nursery.start(self.conn.run)
            self.nursery.start_soon(self.leader.serve, server)
        return await self.conn.request(api_key, body)

    def discard(self, host: str, port: int) -> None:
        self.conn = None


async def replicate(leader: MiniLeader, follower_log: PartitionLog, leader_epoch: int,
                    until: Any) -> tuple[ReplicaFetcherManager, list[tuple[Any, ...]]]:
    truncations: list[tuple[Any, ...]] = []
    async with trio.open_nursery() as nursery:
        pool = MemPool(nursery, leader)
        mgr = ReplicaFetcherManager(2, pool, lambda b: ("leader", 1) if b == 1 else None,
                                    broker_epoch=7, max_wait_ms=10,
                                    on_truncate=lambda *a: truncations.append(a))
        await nursery.start(mgr.run)
        mgr.add_partitions({TP: (1, leader_epoch, follower_log)})
        with trio.fail_after(10):
            while not until(mgr):
                await trio.sleep(0.005)
        nursery.cancel_scope.cancel()
    return mgr, truncations


async def test_follower_catches_up_and_tracks_hw(tmp_path: Path) -> None:
    lead = MiniLeader(open_log(tmp_path / "leader"), 1, isr=(1,))
    for i in range(5):
        lead.append(batch(b"a%d" % i, b"b%d" % i))
    flog = open_log(tmp_path / "follower")
    mgr, truncs = await replicate(
        lead, flog, 1, lambda m: m.high_watermark(TP) == 10 and lead.state.isr == (1, 2))
    assert flog.log_end_offset == 10 and all_bytes(flog) == all_bytes(lead.log)
    assert lead.state.isr == (1, 2)  # the follower caught up and joined
    assert flog.epochs.entries == [(1, 0)]
    assert truncs == []
    req = lead.requests[0]
    assert req["replica_id"] == 2 and req["broker_epoch"] == 7
    assert req["topics"][0]["partitions"][0]["current_leader_epoch"] == 1


async def test_old_leader_truncates_its_unreplicated_tail(tmp_path: Path) -> None:
    # Epoch 1: broker 2 led and wrote 3 batches that broker 1 copied, then 2 batches more that
    # never left broker 2. Broker 1 becomes leader in epoch 2 and writes one batch.
    old = open_log(tmp_path / "old-leader")
    new = open_log(tmp_path / "new-leader")
    for i in range(3):
        old.append(batch(b"common%d" % i), 1)
    new.append_as_follower(all_bytes(old))
    old.append(batch(b"lost1"), 1)
    old.append(batch(b"lost2"), 1)
    lead = MiniLeader(new, 2, isr=(1,))
    lead.append(batch(b"epoch2"))
    assert (old.log_end_offset, new.log_end_offset) == (5, 4)
    mgr, truncs = await replicate(lead, old, 2, lambda m: m.high_watermark(TP) == 4)
    assert truncs == [(TP, 5, 3, 2)]  # to the divergence point 3 (not to any HW)
    assert all_bytes(old) == all_bytes(new)
    assert old.epochs.entries == [(1, 0), (2, 3)]


async def test_fenced_follower_backs_off_until_metadata_moves_it(tmp_path: Path) -> None:
    lead = MiniLeader(open_log(tmp_path / "leader"), 3, isr=(1,))
    lead.append(batch(b"x"))
    flog = open_log(tmp_path / "follower")
    async with trio.open_nursery() as nursery:
        pool = MemPool(nursery, lead)
        mgr = ReplicaFetcherManager(2, pool, lambda b: ("leader", 1), max_wait_ms=10,
                                    backoff_ms=5, max_backoff_ms=20)
        await nursery.start(mgr.run)
        mgr.add_partitions({TP: (1, 2, flog)})  # our metadata says epoch 2: we are fenced
        with trio.fail_after(10):
            while len(lead.requests) < 2:
                await trio.sleep(0.005)
        assert flog.log_end_offset == 0
        mgr.add_partitions({TP: (1, 3, flog)})  # the new image arrives
        with trio.fail_after(10):
            while flog.log_end_offset < 1:
                await trio.sleep(0.005)
        mgr.remove_partitions([TP])
        assert mgr.partitions == {}
        nursery.cancel_scope.cancel()
