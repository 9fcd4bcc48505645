"""The replica fetcher between two real PartitionLogs over the wire protocol (in memory).

The leader side here is a minimal FETCH server written against the same pieces the broker's
handler uses (``find_divergence``, ``validate_leader_epoch``, ``LeaderState``), speaking the real
codec over a trio memory stream, so the follower's requests and the leader's raw-batch
responses go through ``encode_*``/``decode_*`` and ``wire.connection.Connection``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from rafka.broker.replication.epochs import find_divergence
from rafka.broker.replication.fetcher import ReplicaFetcherManager
from rafka.broker.replication.state import AlterPartitionRequest, LeaderState, validate_leader_epoch
from rafka.log.batch import build_batch
from rafka.log.config import LogConfig
from rafka.log.partition_log import PartitionLog
from rafka.wire.connection import Connection
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import (
    NEED_DATA,
    ApiKey,
    FrameDecoder,
    decode_request,
    encode_response_head,
)

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

    async def get(self, host: str, port: int) -> Connection:
        if self.conn is None:
            client, server = trio.testing.memory_stream_pair()
            self.conn = Connection(client)
            await self.nursery.start(self.conn.run)
            self.nursery.start_soon(self.leader.serve, server)
        return self.conn

    def discard(self, host: str, port: int) -> None:
        self.conn = None


async def replicate(leader: MiniLeader, follower_log: PartitionLog, leader_epoch: int,
                    until: Any, *, sync_appended: Any = None, needs_sync: Any = None,
                    ) -> tuple[ReplicaFetcherManager, list[tuple[Any, ...]]]:
    truncations: list[tuple[Any, ...]] = []
    async with trio.open_nursery() as nursery:
        pool = MemPool(nursery, leader)
        mgr = ReplicaFetcherManager(2, pool, lambda b: ("leader", 1) if b == 1 else None,
                                    broker_epoch=7, max_wait_ms=10,
                                    on_truncate=lambda *a: truncations.append(a))
        mgr.sync_appended, mgr.needs_sync = sync_appended, needs_sync
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


@pytest.mark.parametrize("needs", [True, False])
async def test_a_follower_reports_what_it_appended_after_the_sync_its_rule_asks_for(
        tmp_path: Path, needs: bool) -> None:
    """``needs_sync`` (the partition's flush rule, broker/flush_rule.py): True, what a fetch
    answer appended is synced before a fetch names the new end; False, it is named at once and
    ``sync_appended`` is never called."""
    lead = MiniLeader(open_log(tmp_path / "leader"), 1, isr=(1, 2))
    lead.append(batch(b"a", b"b", b"c"))
    flog = open_log(tmp_path / "follower")
    syncs: list[tuple[list[Any], int]] = []  # (partitions, fetches the leader had seen by then)

    async def sync_appended(tps: list[Any]) -> set[Any]:
        syncs.append((list(tps), len(lead.requests)))
        return set(tps)

    await replicate(lead, flog, 1, lambda m: lead.state.high_watermark == 3,
                    sync_appended=sync_appended, needs_sync=lambda tp: needs)
    offsets = [r["topics"][0]["partitions"][0]["fetch_offset"] for r in lead.requests]
    first_at_3 = offsets.index(3)
    if needs:
        assert syncs and syncs[0][0] == [TP] and syncs[0][1] <= first_at_3
    else:
        assert syncs == [] and first_at_3 == 1  # the very next fetch


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


# -- leader changes: short retries and no waiting out a long poll (trio time, MockClock) ---------


class PollLeader:
    """Leader 1 of several partitions, answering FETCH the way the broker does: each request in
    its own task, a long poll (``max_wait_ms``) while there is nothing to return, per partition
    ``refuse[tp]`` errors before any data (the new leader that has not applied its election
    yet). Records ``(trio time, {tp: partition entry})`` of every request it receives."""

    def __init__(self, logs: dict[tuple[str, int], PartitionLog], leader_epoch: int = 1) -> None:
        self.logs = logs
        self.leader_epoch = leader_epoch
        for plog in logs.values():
            plog.epochs.assign(leader_epoch, plog.log_end_offset)
        self.refuse: dict[tuple[str, int], list[ErrorCode]] = {}
        self.requests: list[tuple[float, dict[tuple[str, int], dict[str, Any]]]] = []
        self.changed = trio.Event()

    def append(self, tp: tuple[str, int], records: bytes) -> None:
        self.logs[tp].append(records, self.leader_epoch)
        self.changed.set()
        self.changed = trio.Event()

    def times(self, tp: tuple[str, int]) -> list[float]:
        return [t for t, parts in self.requests if tp in parts]

    def _read(self, body: dict[str, Any], refusals: dict[Any, ErrorCode]
              ) -> tuple[dict[str, Any], bytes, bool]:
        raws: list[bytes] = []
        topics, ready = [], False
        for t in body["topics"]:
            parts = []
            for pd in t["partitions"]:
                tp = (t["name"], pd["partition"])
                e: dict[str, Any] = {"partition": pd["partition"], "error": 0,
                                     "diverging_epoch": None, "records_len": 0}
                code = refusals.get(tp) or validate_leader_epoch(
                    pd.get("current_leader_epoch"), self.leader_epoch)
                plog = self.logs[tp]
                if code:
                    e["error"], ready = int(code), True
                else:
                    data = plog.read_bytes(pd["fetch_offset"], pd["partition_max_bytes"])
                    e["records_len"] = len(data)
                    raws.append(data)
                    ready = ready or bool(data)
                e.update(high_watermark=plog.log_end_offset, log_start_offset=0,
                         log_end_offset=plog.log_end_offset)
                parts.append(e)
            topics.append({"name": t["name"], "partitions": parts})
        return {"topics": topics}, b"".join(raws), ready

    async def _answer(self, stream: trio.abc.Stream, lock: trio.Lock, req: Any) -> None:
        body = req.body
        asked = {(t["name"], pd["partition"]): pd for t in body["topics"] for pd in t["partitions"]}
        self.requests.append((trio.current_time(), asked))
        refusals = {tp: self.refuse[tp].pop(0) for tp in asked if self.refuse.get(tp)}
        deadline = trio.current_time() + body["max_wait_ms"] / 1000
        while True:
            out, raw, ready = self._read(body, refusals)
            if ready or trio.current_time() >= deadline:
                break
            with trio.move_on_at(deadline):
                await self.changed.wait()
        async with lock:
            await stream.send_all(encode_response_head(req.correlation_id, out, len(raw)) + raw)

    async def serve(self, stream: trio.abc.Stream) -> None:
        dec, lock = FrameDecoder(), trio.Lock()
        async with trio.open_nursery() as nursery:
            while data := await stream.receive_some(65536):
                dec.receive_data(data)
                while (frame := dec.next_frame()) is not NEED_DATA:
                    nursery.start_soon(self._answer, stream, lock, decode_request(frame))  # type: ignore[arg-type]


async def wait_until(cond: Any, timeout: float = 30) -> None:
    with trio.fail_after(timeout):
        while not cond():
            await trio.sleep(0.001)


@pytest.mark.parametrize("code", [ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                  ErrorCode.UNKNOWN_LEADER_EPOCH], ids=lambda c: c.name)
async def test_leader_not_ready_yet_is_retried_after_a_short_backoff(
        tmp_path: Path, autojump_clock: trio.testing.MockClock, code: ErrorCode) -> None:
    # The new leader has not applied the metadata that makes it leader: it refuses 7 fetches.
    # The follower retries after backoff_ms (100), doubling, capped at max_backoff_ms (2 s), not
    # after a flat 2 s each time (it waited ~2 s per refusal; acks=all waited with it).
    lead = PollLeader({TP: open_log(tmp_path / "leader")})
    lead.append(TP, batch(b"x"))
    lead.refuse[TP] = [code] * 7
    flog = open_log(tmp_path / "follower")
    async with trio.open_nursery() as nursery:
        mgr = ReplicaFetcherManager(2, MemPool(nursery, lead), lambda b: ("leader", 1))
        assert (mgr.backoff_ms, mgr.max_backoff_ms) == (100, 2_000)  # the broker's settings
        await nursery.start(mgr.run)
        t0 = trio.current_time()
        mgr.add_partitions({TP: (1, 1, flog)})
        await wait_until(lambda: flog.log_end_offset == 1)
        nursery.cancel_scope.cancel()
    times = lead.times(TP)[:8]  # 7 refusals, then the fetch that got the record
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert gaps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0], abs=0.01)
    assert times[0] == pytest.approx(t0, abs=0.01)


async def test_new_leader_epoch_wakes_a_backed_off_partition_at_once(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    lead = PollLeader({TP: open_log(tmp_path / "leader")}, leader_epoch=3)
    lead.append(TP, batch(b"x"))
    flog = open_log(tmp_path / "follower")
    async with trio.open_nursery() as nursery:
        mgr = ReplicaFetcherManager(2, MemPool(nursery, lead), lambda b: ("leader", 1),
                                    backoff_ms=1_000)
        await nursery.start(mgr.run)
        mgr.add_partitions({TP: (1, 2, flog)})  # our metadata is behind: fenced, backs off 1 s
        await wait_until(lambda: len(lead.requests) == 1)
        await trio.sleep(0.05)
        t1 = trio.current_time()
        mgr.add_partitions({TP: (1, 3, flog)})  # the image moves: fetch now, not at +1 s
        await wait_until(lambda: flog.log_end_offset == 1)
        nursery.cancel_scope.cancel()
    assert lead.times(TP)[1] == pytest.approx(t1, abs=0.001)


async def test_partition_added_during_a_long_poll_is_fetched_at_once(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    # Broker 1 already leads t/0 for us (nothing new: a 500 ms long poll is in flight) and
    # becomes leader of t/1, which has data. The follower must not wait out that poll.
    tp1 = ("t", 1)
    lead = PollLeader({TP: open_log(tmp_path / "l0"), tp1: open_log(tmp_path / "l1")})
    lead.append(tp1, batch(b"x"))
    f0, f1 = open_log(tmp_path / "f0"), open_log(tmp_path / "f1")
    async with trio.open_nursery() as nursery:
        mgr = ReplicaFetcherManager(2, MemPool(nursery, lead), lambda b: ("leader", 1), max_wait_ms=500)
        await nursery.start(mgr.run)
        mgr.add_partitions({TP: (1, 1, f0)})
        await wait_until(lambda: len(lead.requests) == 1)
        await trio.sleep(0.1)
        t1 = trio.current_time()
        mgr.add_partitions({tp1: (1, 1, f1)})
        await wait_until(lambda: f1.log_end_offset == 1)
        done = trio.current_time()
        assert mgr.high_watermark(tp1) == 1
        # and t/0 is still followed: a record for it arrives through the next poll
        lead.append(TP, batch(b"y"))
        await wait_until(lambda: f0.log_end_offset == 1)
        nursery.cancel_scope.cancel()
    assert done - t1 < 0.01  # not t1 + 0.4 (the end of the poll in flight)
    assert set(lead.requests[1][1]) == {TP, tp1}  # one fetch for both
    assert mgr.stats["interrupted"] == 1


async def test_changed_epoch_of_a_backed_off_partition_interrupts_the_long_poll(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    # t/0 is long polling; t/1 (same leader) was fenced and backs off. The image moves t/1 to
    # the leader's epoch: it is fetched at once, not when t/0's poll returns.
    tp1 = ("t", 1)
    lead = PollLeader({TP: open_log(tmp_path / "l0"), tp1: open_log(tmp_path / "l1")},
                      leader_epoch=3)
    lead.append(tp1, batch(b"x"))
    f0, f1 = open_log(tmp_path / "f0"), open_log(tmp_path / "f1")
    async with trio.open_nursery() as nursery:
        mgr = ReplicaFetcherManager(2, MemPool(nursery, lead), lambda b: ("leader", 1),
                                    max_wait_ms=500, backoff_ms=1_000)
        await nursery.start(mgr.run)
        mgr.add_partitions({TP: (1, 3, f0), tp1: (1, 2, f1)})
        await wait_until(lambda: len(lead.requests) >= 2 and set(lead.requests[-1][1]) == {TP})
        await trio.sleep(0.05)  # t/0 alone in a long poll, t/1 backing off
        t1 = trio.current_time()
        mgr.add_partitions({tp1: (1, 3, f1)})
        await wait_until(lambda: f1.log_end_offset == 1)
        nursery.cancel_scope.cancel()
    assert lead.times(tp1)[-1] == pytest.approx(t1, abs=0.001)


async def test_removed_partition_drops_the_late_answer_of_its_long_poll(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    # Removing a partition does not cut the poll short; its answer is still not applied.
    lead = PollLeader({TP: open_log(tmp_path / "leader")})
    flog = open_log(tmp_path / "follower")
    async with trio.open_nursery() as nursery:
        mgr = ReplicaFetcherManager(2, MemPool(nursery, lead), lambda b: ("leader", 1),
                                    max_wait_ms=500)
        await nursery.start(mgr.run)
        mgr.add_partitions({TP: (1, 1, flog)})
        await wait_until(lambda: len(lead.requests) == 1)
        await trio.sleep(0.1)
        mgr.remove_partitions([TP])  # we lead it now
        lead.append(TP, batch(b"late"))  # the poll answers with it
        await trio.sleep(1)
        assert flog.log_end_offset == 0 and mgr.statistics()["links"] == 0
        nursery.cancel_scope.cancel()
