"""The reassignment throttle of the follower fetcher (kraft/reassign.py, ``set_throttle``):
a throttled partition fetches at most its byte rate, an unthrottled one at once. Runs on
trio's mock clock (autojump) against the long-polling leader of test_fetcher.py, so the rate
is checked in virtual time, never wall-clock."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing
from rafka.broker.replication.fetcher import ReplicaFetcherManager
from rafka.log.partition_log import PartitionLog

from tests.replication.test_fetcher import (
    TP,
    MemPool,
    PollLeader,
    all_bytes,
    batch,
    open_log,
    wait_until,
)

RATE = 2_000  # bytes/s


def leader_with_data(path: Path) -> PollLeader:
    lead = PollLeader({TP: open_log(path)})
    for i in range(20):
        lead.append(TP, batch(b"x" * 900 + b"%d" % i))
    return lead


async def follow(lead: PollLeader, flog: PartitionLog, throttle: int) -> float:
    """Virtual seconds until ``flog`` holds the leader's log, fetched with ``throttle``."""
    async with trio.open_nursery() as nursery:
        mgr = ReplicaFetcherManager(2, MemPool(nursery, lead), lambda b: ("leader", 1))
        await nursery.start(mgr.run)
        start = trio.current_time()
        mgr.add_partitions({TP: (1, 1, flog)})
        mgr.set_throttle(TP, throttle)
        await wait_until(lambda: flog.log_end_offset == lead.logs[TP].log_end_offset, 600)
        nursery.cancel_scope.cancel()
    assert all_bytes(flog) == all_bytes(lead.logs[TP])
    return trio.current_time() - start


def asked_max_bytes(lead: PollLeader) -> list[int]:
    return [parts[TP]["partition_max_bytes"] for _, parts in lead.requests if TP in parts]


async def test_throttled_catch_up_keeps_to_the_rate_and_unthrottled_does_not_wait(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    lead = leader_with_data(tmp_path / "l1")
    size = len(all_bytes(lead.logs[TP]))
    took = await follow(lead, open_log(tmp_path / "f1"), RATE)
    # at most one second's worth up front (the bucket) plus one batch, the rest at the rate
    assert took >= (size - RATE - 1000) / RATE, (took, size)
    assert max(asked_max_bytes(lead)) <= RATE
    lead = leader_with_data(tmp_path / "l2")
    fast = await follow(lead, open_log(tmp_path / "f2"), 0)
    assert fast < took / 4, (fast, took)
    assert max(asked_max_bytes(lead)) > RATE


async def test_lifting_the_throttle_fetches_the_rest_at_once(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    lead = leader_with_data(tmp_path / "leader")
    flog = open_log(tmp_path / "follower")
    async with trio.open_nursery() as nursery:
        mgr = ReplicaFetcherManager(2, MemPool(nursery, lead), lambda b: ("leader", 1))
        await nursery.start(mgr.run)
        mgr.add_partitions({TP: (1, 1, flog)})
        mgr.set_throttle(TP, 100)  # 100 B/s: minutes for the ~18 KB
        await wait_until(lambda: mgr.stats["throttled"] > 0)
        assert flog.log_end_offset < lead.logs[TP].log_end_offset
        start = trio.current_time()
        mgr.set_throttle(TP, 0)
        await wait_until(lambda: flog.log_end_offset == lead.logs[TP].log_end_offset)
        assert trio.current_time() - start < 1
        nursery.cancel_scope.cancel()
