"""Delayed produce and delayed fetch: trio waiters woken by the leader's effects, never polled.

Theory of operation
-------------------
One ``PartitionWaiters`` per partition *leadership* (a ``LeaderReplica`` owns it). The pure
``LeaderState`` reports what changed as effects; the owner passes them to ``apply_effects``,
which wakes exactly the waiters that may now complete:

* **Delayed produce** (``acks=all``): ``wait_produce(last_offset, outcome)`` parks the caller on an
  event filed in a heap by ``last_offset``. ``HighWatermarkAdvanced(new)`` pops and wakes every
  waiter with ``last_offset < new``; ``IsrChanged(under_min_isr=True)`` wakes them all (they fail
  ``NOT_ENOUGH_REPLICAS_AFTER_APPEND``); ``close(code)`` (leadership lost) wakes them all with
  ``code``. A woken waiter asks ``outcome(last_offset)`` (``LeaderState.produce_outcome``) and
  either returns the answer or parks again. The timeout is the caller's: ``await_acks_all``
  wraps the wait in ``trio.move_on_after(timeout_ms)`` and answers ``REQUEST_TIMED_OUT``.
* **Delayed fetch**: a fetch with nothing (or less than ``min_bytes``) to return waits for any of
  its partitions to change. Two generation counters per partition: ``data_generation`` moves
  when the log end offset or the high watermark moves (follower fetches), ``hw_generation`` only
  with the high watermark (consumers see nothing above it). ``delayed_fetch`` snapshots the
  generations, reads, and if the result is not ready waits — on one event registered with every
  partition it reads — until a generation moves or ``max_wait_ms`` passes, then reads again.
  Snapshot-before-read means a change between the read and the wait is never missed.

Everything is bounded: at most ``max_waiters`` parked produces and as many fetch watchers per
partition; beyond that a produce answers ``REQUEST_TIMED_OUT`` at once and a fetch returns what it
has (both retriable, both what the client would have got after its timeout). Cancelled waiters
are removed at once (the heap is compacted lazily).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import trio

from broker.errors import ErrorCode
from broker.replication.state import Effect, HighWatermarkAdvanced, IsrChanged

__all__ = ["PartitionWaiters", "await_acks_all", "delayed_fetch", "wait_any_change"]

T = TypeVar("T")
DEFAULT_MAX_WAITERS = 4096


class PartitionWaiters:
    """Parked produces and fetch watchers of one partition leadership."""

    def __init__(self, max_waiters: int = DEFAULT_MAX_WAITERS) -> None:
        self.max_waiters = max_waiters
        self._heap: list[tuple[int, int, trio.Event]] = []
        self._live: dict[int, trio.Event] = {}  # seq -> event of waiters still parked
        self._seq = itertools.count()
        self._data_watchers: set[trio.Event] = set()
        self._hw_watchers: set[trio.Event] = set()
        self.data_generation = 0
        self.hw_generation = 0
        self.closed: ErrorCode | None = None

    # -- notifications (from the owner, on effects) ------------------------------------------

    def apply_effects(self, effects: Iterable[Effect]) -> None:
        for e in effects:
            if isinstance(e, HighWatermarkAdvanced):
                self.notify_high_watermark(e.new)
            elif isinstance(e, IsrChanged) and e.under_min_isr:
                self._wake_all_produces()

    def notify_high_watermark(self, hw: int) -> None:
        while self._heap and self._heap[0][0] < hw:
            _, seq, ev = heapq.heappop(self._heap)
            if self._live.pop(seq, None) is not None:
                ev.set()
        self.hw_generation += 1
        self._wake(self._hw_watchers)
        self.notify_data()

    def notify_data(self) -> None:
        """The log end offset moved (new data for followers)."""
        self.data_generation += 1
        self._wake(self._data_watchers)

    def close(self, code: ErrorCode = ErrorCode.NOT_LEADER_OR_FOLLOWER) -> None:
        """Leadership is over: parked produces answer ``code``; fetches re-read and find out."""
        if self.closed is None:
            self.closed = code
        self._wake_all_produces()
        self.hw_generation += 1
        self.notify_data()
        self._wake(self._hw_watchers)

    def _wake_all_produces(self) -> None:
        for ev in self._live.values():
            ev.set()
        self._live.clear()
        self._heap.clear()

    @staticmethod
    def _wake(watchers: set[trio.Event]) -> None:
        for ev in watchers:
            ev.set()
        watchers.clear()

    # -- produce -----------------------------------------------------------------------------

    async def wait_produce(self, last_offset: int,
                           outcome: Callable[[int], ErrorCode | None]) -> ErrorCode:
        """Wait until ``outcome(last_offset)`` is decided (or leadership ends)."""
        while True:
            if self.closed is not None:
                return self.closed
            result = outcome(last_offset)
            if result is not None:
                return result
            if len(self._live) >= self.max_waiters:
                return ErrorCode.REQUEST_TIMED_OUT
            seq = next(self._seq)
            ev = trio.Event()
            self._live[seq] = ev
            heapq.heappush(self._heap, (last_offset, seq, ev))
            try:
                await ev.wait()
            finally:
                if self._live.pop(seq, None) is not None and len(self._heap) > 2 * len(self._live) + 64:
                    self._heap = [x for x in self._heap if x[1] in self._live]
                    heapq.heapify(self._heap)

    def statistics(self) -> dict[str, int]:
        return {"produces": len(self._live), "heap": len(self._heap),
                "fetch_watchers": len(self._data_watchers) + len(self._hw_watchers),
                "data_generation": self.data_generation, "hw_generation": self.hw_generation}

    # -- fetch -------------------------------------------------------------------------------

    def generation(self, follower: bool) -> int:
        return self.data_generation if follower else self.hw_generation

    def _watch(self, ev: trio.Event, follower: bool) -> bool:
        watchers = self._data_watchers if follower else self._hw_watchers
        if len(watchers) >= self.max_waiters:
            return False
        watchers.add(ev)
        return True

    def _unwatch(self, ev: trio.Event) -> None:
        self._data_watchers.discard(ev)
        self._hw_watchers.discard(ev)


async def wait_any_change(watch: Sequence[tuple[PartitionWaiters, bool]],
                          generations: Sequence[int]) -> bool:
    """Wait until any partition's generation differs from ``generations`` (same order).

    ``watch`` pairs each partition's waiters with "is this a follower fetch". True when a
    generation moved (maybe before the call); False, at once, when waiting is pointless: a
    partition's leadership is closed or it cannot take another watcher.
    """
    for (w, follower), gen in zip(watch, generations, strict=True):
        if w.generation(follower) != gen:
            return True
        if w.closed is not None:
            return False
    ev = trio.Event()
    registered: list[PartitionWaiters] = []
    try:
        for w, follower in watch:
            if not w._watch(ev, follower):
                return False
            registered.append(w)
        await ev.wait()
        return True
    finally:
        for w in registered:
            w._unwatch(ev)


async def await_acks_all(waiters: PartitionWaiters, last_offset: int,
                         outcome: Callable[[int], ErrorCode | None], timeout_ms: int) -> ErrorCode:
    """The ``acks=all`` wait of a produce handler: the outcome, or ``REQUEST_TIMED_OUT``."""
    with trio.move_on_after(max(0, timeout_ms) / 1000):
        return await waiters.wait_produce(last_offset, outcome)
    return ErrorCode.REQUEST_TIMED_OUT


async def delayed_fetch(read: Callable[[], T], ready: Callable[[T], bool],
                        watch: Sequence[tuple[PartitionWaiters, bool]], max_wait_ms: int,
                        discard: Callable[[T], None] | None = None) -> T:
    """Read; while not ``ready`` and within ``max_wait_ms``, wait for a change and read again.

    ``read`` must not await (it runs between a generation snapshot and the wait). ``discard``
    releases a result that is replaced by a newer read (e.g. closes its ``FetchSlice`` fds).
    """
    deadline = trio.current_time() + max(0, max_wait_ms) / 1000
    while True:
        gens = [w.generation(f) for w, f in watch]
        result = read()
        if ready(result) or not watch or trio.current_time() >= deadline:
            return result
        changed = False
        with trio.move_on_at(deadline):
            changed = await wait_any_change(watch, gens)
        if not changed:  # timed out, or waiting is pointless: answer with what we have
            return result
        if discard is not None:
            discard(result)
