"""Produce requests waiting for their acks wake only once decided (broker/partition.py, module
docstring, "The produce waiters"): a real partition leader on a real log, no server.

The observable is how often a waiter re-evaluates its outcome (``produce_outcome``): with one
shared event every flush round and every follower position made every waiter look again.
Deadlines (``broker/produce_wait.py``): one timer task settles the waits that outlive their
``timeout_ms``, with no cancel scope per wait.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import trio
import trio.testing
from rafka.broker.events import EventLog
from rafka.broker.partition import Partition
from rafka.broker.produce_wait import ProduceDeadlines
from rafka.log.batch import build_batch
from rafka.log.config import LogConfig
from rafka.log.partition_log import PartitionLog
from rafka.metadata.image import PartitionRegistration
from rafka.wire.errors import ErrorCode

REG = PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=3,
                            partition_epoch=5)


class CountingPartition(Partition):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.looks: Counter[int] = Counter()  # produce_outcome calls, by last offset

    def produce_outcome(self, last_offset: int, acks: int,
                        leader_epoch: int | None = None) -> ErrorCode | None:
        self.looks[last_offset] += 1
        return super().produce_outcome(last_offset, acks, leader_epoch)


def _leader(d: Path, deadlines: ProduceDeadlines | None = None) -> CountingPartition:
    p = CountingPartition("t", 0, PartitionLog.open(d, LogConfig()), 1, EventLog(None, 1),
                          fsync_acks=True, min_insync_replicas=1, deadlines=deadlines)
    p.apply_registration(REG)
    return p


def _append(p: Partition, n: int) -> list[int]:
    """n single-record appends; their last offsets."""
    return [p.append_as_leader(build_batch([(None, b"v%d" % i, [], 1000)]), acks=-1).last_offset
            for i in range(n)]


def _leader_with(d: Path, n: int) -> tuple[CountingPartition, list[int], dict[int, ErrorCode]]:
    """A leader holding ``n`` appended records, their offsets, and a map for waiters' answers."""
    p = _leader(d)
    return p, _append(p, n), {}


async def _waiters(nursery: trio.Nursery, p: Partition, offsets: list[int], acks: int,
                   out: dict[int, ErrorCode]) -> None:
    for off in offsets:
        async def wait(off: int = off) -> None:
            out[off] = await p.wait_produce(off, acks, p.leader_epoch)
        nursery.start_soon(wait)
    await trio.testing.wait_all_tasks_blocked()


async def test_waiters_wake_only_once_their_offsets_are_decided(tmp_path: Path) -> None:
    p, offsets, done = _leader_with(tmp_path, 10)
    async with trio.open_nursery() as nursery:
        await _waiters(nursery, p, offsets, -1, done)
        looks = p.looks.copy()
        p.on_flushed(p.log.flush())  # durable, but the follower has nothing yet
        await trio.testing.wait_all_tasks_blocked()
        assert not done
        # the wake-up looks at the lowest waiter only; nobody else looks again
        assert p.looks - looks == Counter({0: 1}), "undecided waiters looked again at a flush"
        p.on_follower_fetch(2, 4)  # the follower holds 0..3: the HW covers four of them
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(done) == [0, 1, 2, 3] and set(done.values()) == {ErrorCode.NONE}
        looks = p.looks.copy()
        p.on_follower_fetch(2, 4)  # the same position again: nothing moved, nobody looks
        await trio.testing.wait_all_tasks_blocked()
        assert p.looks == looks
        p.on_follower_fetch(2, 7)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(done) == list(range(7))
        moved = p.looks - looks
        # 4..6: the wake-up's look only (it hands the waiter its outcome); 7: the wake-up's
        # look that stops; 8, 9: none
        assert moved == Counter({4: 1, 5: 1, 6: 1, 7: 1}), moved
        p.on_follower_fetch(2, 10)
    assert sorted(done) == offsets


async def test_an_acks1_waiter_is_not_held_behind_an_acks_all_one(tmp_path: Path) -> None:
    p, (first, second), done = _leader_with(tmp_path, 2)
    async with trio.open_nursery() as nursery:
        await _waiters(nursery, p, [first], -1, done)
        await _waiters(nursery, p, [second], 1, done)
        p.on_flushed(p.log.flush())
        await trio.testing.wait_all_tasks_blocked()
        assert done == {second: ErrorCode.NONE}, "acks=1 is decided by the fsync alone"
        p.on_follower_fetch(2, 2)
    assert done == {first: ErrorCode.NONE, second: ErrorCode.NONE}


async def test_a_new_leader_epoch_wakes_every_waiter(tmp_path: Path) -> None:
    p, offsets, done = _leader_with(tmp_path, 5)
    async with trio.open_nursery() as nursery:
        await _waiters(nursery, p, offsets, -1, done)
        p.apply_registration(PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=2,
                                                   leader_epoch=4, partition_epoch=6))
    assert done == dict.fromkeys(offsets, ErrorCode.NOT_LEADER_OR_FOLLOWER)


async def test_waiters_that_gave_up_do_not_pile_up(tmp_path: Path) -> None:
    p = _leader(tmp_path)
    offsets = _append(p, 1)
    for _ in range(500):  # e.g. producers retrying while a follower stalls: each times out
        with trio.move_on_after(0):
            await p.wait_produce(offsets[0], -1, p.leader_epoch)
    pending = len(p._acks1_waiters) + len(p._acks_all_waiters)
    assert pending <= 130, f"{pending} dead waiter entries kept"
    p.on_flushed(p.log.flush())
    p.on_follower_fetch(2, 1)
    assert not p._acks_all_waiters


async def test_deadlines_time_out_only_the_undecided_waits(tmp_path: Path,
                                                           autojump_clock: Any) -> None:
    """The shared timer settles a wait at its deadline with REQUEST_TIMED_OUT; waits decided
    before theirs answer their outcome and the timer never touches them; an idle timer (empty
    heap) sleeps without a deadline."""
    deadlines = ProduceDeadlines()
    p = _leader(tmp_path, deadlines)
    offsets = _append(p, 3)
    done: dict[int, ErrorCode] = {}
    async with trio.open_nursery() as timer:
        await timer.start(deadlines.run)
        async with trio.open_nursery() as nursery:
            for off, timeout in zip(offsets, (5.0, 10.0, 1.0), strict=True):
                async def wait(off: int = off, timeout: float = timeout) -> None:
                    done[off] = await p.wait_produce(off, -1, p.leader_epoch,
                                                     deadline=trio.current_time() + timeout)
                nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(2)  # offset 2's 1 s deadline passed
            assert done == {offsets[2]: ErrorCode.REQUEST_TIMED_OUT}
            p.on_flushed(p.log.flush())
            p.on_follower_fetch(2, 1)  # offset 0 is decided before its 5 s
            await trio.testing.wait_all_tasks_blocked()
            assert done[offsets[0]] == ErrorCode.NONE
        assert done[offsets[1]] == ErrorCode.REQUEST_TIMED_OUT  # 1 was never replicated
        assert deadlines.timed_out == 2
        await trio.sleep(60)
        assert len(deadlines) == 0 and deadlines._wake_at == float("inf")
        timer.cancel_scope.cancel()


async def test_an_earlier_deadline_moves_the_timer(tmp_path: Path, autojump_clock: Any) -> None:
    """A wait with a shorter timeout than every parked one still ends at its own deadline."""
    deadlines = ProduceDeadlines()
    p = _leader(tmp_path, deadlines)
    first, second = _append(p, 2)
    ended: dict[int, float] = {}
    async with trio.open_nursery() as timer:
        await timer.start(deadlines.run)
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for off, timeout in ((first, 30.0), (second, 0.5)):
                async def wait(off: int = off, timeout: float = timeout) -> None:
                    code = await p.wait_produce(off, -1, p.leader_epoch,
                                                deadline=trio.current_time() + timeout)
                    assert code == ErrorCode.REQUEST_TIMED_OUT
                    ended[off] = trio.current_time() - start
                nursery.start_soon(wait)
                await trio.testing.wait_all_tasks_blocked()
        assert ended == {second: 0.5, first: 30.0}
        timer.cancel_scope.cancel()


async def test_a_cancelled_wait_leaves_a_settled_entry(tmp_path: Path) -> None:
    """A request cancelled while parked (its connection closed) is not woken again later, and
    its entries are dropped as the partition and the timer pass them."""
    deadlines = ProduceDeadlines()
    p = _leader(tmp_path, deadlines)
    (off,) = _append(p, 1)
    async with trio.open_nursery() as timer:
        await timer.start(deadlines.run)
        with trio.move_on_after(0.01):
            await p.wait_produce(off, -1, p.leader_epoch, deadline=trio.current_time() + 30)
        assert len(p._acks_all_waiters) == 1 and p._acks_all_waiters[0][4].settled
        p.on_flushed(p.log.flush())
        p.on_follower_fetch(2, 1)  # would reschedule a live waiter: must skip the settled one
        assert not p._acks_all_waiters
        assert deadlines.timed_out == 0
        timer.cancel_scope.cancel()


async def test_a_partition_without_the_timer_still_times_out(tmp_path: Path) -> None:
    p = _leader(tmp_path)  # deadlines=None: a cancel scope of its own
    (off,) = _append(p, 1)
    code = await p.wait_produce(off, -1, p.leader_epoch, deadline=trio.current_time() + 0.01)
    assert code == ErrorCode.REQUEST_TIMED_OUT


async def test_the_deadline_heap_stays_bounded(tmp_path: Path) -> None:
    """Waits decided long before their deadlines do not pile up in the timer's heap (it never
    fires here: every deadline is a minute away)."""
    deadlines = ProduceDeadlines()
    p = _leader(tmp_path, deadlines)
    async with trio.open_nursery() as timer:
        await timer.start(deadlines.run)
        for _ in range(5000):
            (off,) = _append(p, 1)
            async with trio.open_nursery() as nursery:
                async def wait(off: int = off) -> None:
                    code = await p.wait_produce(off, -1, p.leader_epoch,
                                                deadline=trio.current_time() + 60)
                    assert code == ErrorCode.NONE
                nursery.start_soon(wait)
                await trio.testing.wait_all_tasks_blocked()
                p.on_flushed(p.log.flush())
                p.on_follower_fetch(2, off + 1)
        assert len(deadlines) <= 1100, len(deadlines)
        assert deadlines.timed_out == 0
        timer.cancel_scope.cancel()
