"""The read barrier's logic (``broker/read_barrier.py``), pure, under trio's mock clock.

The partition here is a small model of a leader: an append gets the next offset, and the HW
moves only when the test says the followers fetched (``replicate``); a deposed leader's HW never
moves, and a new leader epoch fails the wait as ``Partition.wait_produce`` does. Reads ride any
append made after they arrived (the owner's writes): those tests are at the end.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from rafka.broker.read_barrier import ReadBarrier
from rafka.log.batch import decode_records, iter_batches
from rafka.wire.errors import ErrorCode, RafkaError, error_for

KEY = b"\x93\xa0\xa0\xff"


class Leader:
    topic, partition = "__consumer_offsets", 3

    def __init__(self) -> None:
        self.leader_epoch = 4
        self.appended: list[bytes] = []
        self.high_watermark = 0
        self.refuse: ErrorCode | None = None
        self.changed = trio.Event()
        self.log = self  # Partition.log.log_end_offset

    @property
    def log_end_offset(self) -> int:
        return len(self.appended)

    def replicate(self, upto: int | None = None) -> None:
        """Every ISR follower fetched up to the log end (or ``upto``): the HW follows."""
        self.high_watermark = self.log_end_offset if upto is None else upto
        self.changed.set()
        self.changed = trio.Event()

    def new_epoch(self) -> None:
        self.leader_epoch += 1
        self.changed.set()
        self.changed = trio.Event()

    async def wait_produce(self, last_offset: int, acks: int, leader_epoch: int | None = None) -> ErrorCode:
        assert acks == -1
        while True:
            if leader_epoch is not None and leader_epoch != self.leader_epoch:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            if last_offset < self.high_watermark:
                return ErrorCode.NONE
            await self.changed.wait()


class RM:
    def append(self, p: Leader, batch: bytes, acks: int) -> Any:
        if p.refuse is not None:
            raise error_for(p.refuse, "refused")
        p.appended.append(batch)

        class Info:
            last_offset = base_offset = p.log_end_offset - 1
        return Info()


async def start_reads(nursery: trio.Nursery, barrier: ReadBarrier, p: Leader, n: int,
                      out: list[Any]) -> None:
    async def read(i: int) -> None:
        try:
            await barrier.confirm(p)
            out.append(i)
        except RafkaError as exc:
            out.append(exc.code)

    for i in range(n):
        nursery.start_soon(read, i)
    await trio.testing.wait_all_tasks_blocked()


async def test_the_barrier_is_an_acks_all_tombstone_of_the_owners_key() -> None:
    p, barrier = Leader(), ReadBarrier(RM(), KEY, wall_clock_ms=lambda: 1234)
    async with trio.open_nursery() as nursery:
        done: list[Any] = []
        await start_reads(nursery, barrier, p, 1, done)
        assert not done  # waits for the followers
        p.replicate()
    assert done == [0]
    [(pos, h)] = list(iter_batches(p.appended[0]))
    [rec] = decode_records(p.appended[0], pos)
    assert (rec.key, rec.value, h.first_timestamp) == (KEY, None, 1234)


async def test_a_read_waits_for_a_barrier_appended_after_it_arrived_and_reads_share_one() -> None:
    p, barrier = Leader(), ReadBarrier(RM(), KEY)
    first: list[Any] = []
    later: list[Any] = []
    async with trio.open_nursery() as nursery:
        await start_reads(nursery, barrier, p, 1, first)
        assert len(p.appended) == 1
        # these arrive while barrier 1 is in flight: it proves nothing about them
        await start_reads(nursery, barrier, p, 5, later)
        assert len(p.appended) == 1  # one in flight per partition
        p.replicate()  # barrier 1 acknowledged
        await trio.testing.wait_all_tasks_blocked()
        assert first == [0] and later == []
        assert len(p.appended) == 2  # the five share barrier 2
        p.replicate()
    assert sorted(later) == [0, 1, 2, 3, 4]
    assert barrier.rounds == 2


async def test_a_deposed_leader_cannot_pass_and_answers_not_coordinator(
        autojump_clock: trio.testing.MockClock) -> None:
    p, barrier = Leader(), ReadBarrier(RM(), KEY, timeout_s=5.0)
    out: list[Any] = []
    async with trio.open_nursery() as nursery:
        await start_reads(nursery, barrier, p, 3, out)
    # the new leader fetches elsewhere: the HW never passes the barrier; the wait is bounded
    assert out == [ErrorCode.NOT_COORDINATOR] * 3
    assert trio.current_time() >= 5.0
    # a failed round does not poison the next one
    async with trio.open_nursery() as nursery:
        await start_reads(nursery, barrier, p, 1, out)
        p.replicate()
    assert out[-1] == 0


@pytest.mark.parametrize("how", ["new_epoch", "refused"])
async def test_a_leader_change_or_a_refused_append_is_not_coordinator(
        how: str, autojump_clock: trio.testing.MockClock) -> None:
    p, barrier = Leader(), ReadBarrier(RM(), KEY)
    out: list[Any] = []
    async with trio.open_nursery() as nursery:
        if how == "refused":
            p.refuse = ErrorCode.NOT_ENOUGH_REPLICAS  # too few followers fetching
        await start_reads(nursery, barrier, p, 2, out)
        if how == "new_epoch":
            p.new_epoch()  # the metadata named another leader meanwhile
    assert out == [ErrorCode.NOT_COORDINATOR] * 2


async def test_a_cancelled_reader_does_not_strand_the_others_waiting(
        autojump_clock: trio.testing.MockClock) -> None:
    p, barrier = Leader(), ReadBarrier(RM(), KEY)
    out: list[Any] = []
    gone = trio.CancelScope()

    async def cancelled_reader() -> None:  # e.g. its client disconnected
        with gone:
            await barrier.confirm(p)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancelled_reader)  # appends barrier 1
        await trio.testing.wait_all_tasks_blocked()
        await start_reads(nursery, barrier, p, 1, out)  # arrived after it: waits, then needs one more
        gone.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert len(p.appended) == 2  # the waiting read appended its own barrier at once
        p.replicate()
    assert out == [0]
    assert trio.current_time() == 0  # nobody waited for the timeout


# -- reads ride the owner's writes; ReadBarrier.write ---------------------------------------


def records_of(batch: bytes) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key, r.value) for pos, _ in iter_batches(batch) for r in decode_records(batch, pos)]


async def start_writes(nursery: trio.Nursery, barrier: ReadBarrier, p: Leader,
                       writes: list[list[tuple[bytes, bytes | None]]], out: list[Any]) -> None:
    async def write(i: int, records: list[tuple[bytes, bytes | None]]) -> None:
        try:
            await barrier.write(p, records)
            out.append(i)
        except RafkaError as exc:
            out.append(exc.code)

    for i, records in enumerate(writes):
        nursery.start_soon(write, i, records)
        await trio.testing.wait_all_tasks_blocked()  # appended in this order


async def test_a_write_is_one_batch_appended_at_once_and_acknowledged_with_acks_all() -> None:
    p, barrier = Leader(), ReadBarrier(RM(), KEY)
    out: list[Any] = []
    async with trio.open_nursery() as nursery:
        await start_writes(nursery, barrier, p, [[(b"a", b"1"), (b"b", None)], [(b"c", b"2")]], out)
        assert len(p.appended) == 2 and out == []  # not held back behind each other
        assert records_of(p.appended[0]) == [(b"a", b"1"), (b"b", None)]
        p.replicate()
    assert sorted(out) == [0, 1]
    assert barrier.rounds == 0  # no barrier appended


async def test_a_read_rides_a_write_appended_after_it_arrived() -> None:
    p, barrier = Leader(), ReadBarrier(RM(), KEY)
    reads: list[Any] = []
    writes: list[Any] = []
    async with trio.open_nursery() as nursery:
        await start_reads(nursery, barrier, p, 1, reads)  # barrier 1
        await start_reads(nursery, barrier, p, 2, reads)  # arrive while it is in flight
        await start_writes(nursery, barrier, p, [[(b"x", b"1")]], writes)  # after them
        p.replicate()
    # the write, appended after the two reads arrived, proves them: no second barrier
    assert [records_of(b) for b in p.appended] == [[(KEY, None)], [(b"x", b"1")]]
    assert sorted(reads) == [0, 0, 1] and writes == [0]
    assert (barrier.rounds, barrier.confirmed) == (1, 3)


async def test_a_read_does_not_ride_a_write_appended_before_it_arrived() -> None:
    p, barrier = Leader(), ReadBarrier(RM(), KEY)
    reads: list[Any] = []
    writes: list[Any] = []
    async with trio.open_nursery() as nursery:
        await start_writes(nursery, barrier, p, [[(b"x", b"1")]], writes)  # in flight
        await start_reads(nursery, barrier, p, 1, reads)
        # the write proves nothing about the later read: it appended a barrier of its own
        assert records_of(p.appended[1]) == [(KEY, None)]
        p.replicate(upto=1)  # only the write replicated so far
        await trio.testing.wait_all_tasks_blocked()
        assert writes == [0] and reads == []
        p.replicate()
    assert reads == [0]


@pytest.mark.parametrize(("how", "code"), [("refused", ErrorCode.NOT_ENOUGH_REPLICAS),
                                           ("new_epoch", ErrorCode.NOT_LEADER_OR_FOLLOWER),
                                           ("deposed", ErrorCode.REQUEST_TIMED_OUT)])
async def test_a_failed_write_has_its_named_error_and_the_read_riding_it_not_coordinator(
        how: str, code: ErrorCode, autojump_clock: trio.testing.MockClock) -> None:
    p, barrier = Leader(), ReadBarrier(RM(), KEY, timeout_s=5.0)
    reads: list[Any] = []
    writes: list[Any] = []
    async with trio.open_nursery() as nursery:
        if how == "refused":
            p.refuse = code
        await start_reads(nursery, barrier, p, 1, reads)
        await start_writes(nursery, barrier, p, [[(b"x", b"1")]], writes)
        if how == "new_epoch":
            p.new_epoch()
    assert writes == [code]
    assert reads == [ErrorCode.NOT_COORDINATOR]


async def test_an_empty_write_is_a_caller_error() -> None:
    with pytest.raises(ValueError):
        await ReadBarrier(RM(), KEY).write(Leader(), [])
