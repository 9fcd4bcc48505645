"""Read barrier: a coordinator answers a read from memory only after proving it still leads.

Theory of operation
-------------------
A group coordinator (``kraft/groups/offsets.py``) and a transaction coordinator
(``broker/txn/coordinator.py``) answer reads — OFFSET_FETCH, a KIP-890 ``verify_only``,
DESCRIBE_TRANSACTIONS — from an in-memory cache of the internal partition they lead. A broker that
was paused or cut off while it led that partition still believes it leads until its metadata
says otherwise; meanwhile the controller may have fenced it and a successor may have accepted
newer writes. Answering from the cache then returns a value older than a write that completed
before the read was sent (txn chaos seed 25: a stale OFFSET_FETCH made a transform re-process ten
inputs).

:meth:`ReadBarrier.confirm` closes that gap without a timing assumption: it appends a *barrier*
record to the partition with ``acks=all`` — a tombstone (value ``None``) of a key its owner
chose so that its loader folds it as a no-op (a compacted topic needs a key on every record;
compaction keeps the last one and drops it after the tombstone horizon) and returns once it is acknowledged; a read answered after that is linearizable.
The argument, with ``t`` = the moment the barrier is appended (after the read arrived):

* ``acks=all`` completes when the HW passes the barrier, i.e. every member of this leader's
  *maximal* ISR (committed ISR ∪ pending proposal, ``broker/replication/state.py``) has fetched
  above it: each of them sent a fetch to this broker, as its follower, after ``t``;
* the controller elects a successor only from the ISR of its latest partition record, and it
  adds a replica to an ISR only on the leader's own AlterPartition (an expansion, counted in the
  maximal ISR from the moment it is sent); its own changes (fencing, reassignment) only remove
  replicas. So the successor is a member of this broker's maximal ISR (unclean leader election,
  off by default, gives this up as it gives up acknowledged writes);
* a replica stops fetching from the old leader once it learns that it leads, and accepts writes
  only after that. Its fetch after ``t`` shows it learned after ``t``: every write it
  acknowledged finished after ``t``, after the read arrived. Every write acknowledged before
  ``t`` went through this broker (or a predecessor, whose log it loaded) and is in its cache.

A deposed leader therefore cannot pass the barrier: the new leader no longer fetches from it, so
its HW stays put until the append times out (or the metadata names the new leader, which fails
the wait at once). This is the same property the transaction coordinator's END_TXN already
relies on (``_confirm``: "a deposed leader cannot complete an acks=all append").

Why not a lease (stop answering once the controller has not acknowledged a heartbeat for less
than the session timeout): it needs the broker's and the controller's clocks to run at the same
rate and a heartbeat answer to come from the *current* active controller (a deposed controller
that does not know it yet also answers), and it does not cover leadership moves without fencing
(reassignment, preferred-leader election, controlled shutdown). The barrier covers every way a
leader is replaced, at the price of one replication round per read.

Cost: reads are coalesced per partition. One barrier is in flight per partition at a time; a
read waits for the first barrier *appended after it arrived* (an earlier one proves nothing
about it), so under load many reads share one round. With one replica (or
``min.insync.replicas`` reached by the leader alone and no other ISR member) the append is
acknowledged at once, as no other broker could be elected anyway.

Any failure (not the leader, not enough replicas, timed out) raises ``NOT_COORDINATOR``: the
client's retriable answer that makes it look the coordinator up again.

Group commit of the owner's writes (``write``)
----------------------------------------------
The owner's own state records go through the same rounds: :meth:`ReadBarrier.write` adds its
records to the partition's *next* round, and a round appends everything queued for it as ONE
batch with ``acks=all`` — so the writes of many ids that arrive while a round is in flight
share one append, one fsync per replica and one follower fetch round (the transaction
coordinator's Ongoing / Prepare* / Complete* records of concurrent transactions). A round that
carries records needs no tombstone: any ``acks=all`` append made after a read arrived proves
leadership as well as a barrier does (the argument above holds for every append, not only a
tombstone), so a read that arrives while writes flow rides them and costs no round of its own.
The tombstone is appended only when a round has readers and no records.

A writer learns the outcome of its round: ``None`` once acknowledged in the leader epoch it
joined, else the round's named error (the append's refusal, ``NOT_LEADER_OR_FOLLOWER`` when the
leader changed, ``REQUEST_TIMED_OUT``); it installs its value only after that (the owner's
"durable, then installed" rule). A writer cancelled before its round left takes its records out
of the queue; once the round left they are in the log as if the write had been acknowledged
late (as a single append whose wait was cancelled). Rounds are keyed by (topic, partition,
leader epoch), one in flight per key, so records reach the log in the order they were queued.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import trio
from rafka.broker.error_map import wire_error
from rafka.broker.errors import ErrorCode, RafkaError, error_for
from rafka.log.batch import build_batch

__all__ = ["ReadBarrier"]

log = logging.getLogger("rafka.read_barrier")

_ACKS_ALL: Final = -1

Record = tuple[bytes, bytes | None]


class _Round:
    __slots__ = ("done", "code", "why", "chunks", "waiters")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.code = ErrorCode.NONE
        self.why = ""
        self.chunks: list[list[Record]] = []  # each writer's records, in the order they queued
        self.waiters = 0


class _Slot:
    __slots__ = ("next", "running")

    def __init__(self) -> None:
        self.running: _Round | None = None  # the round appended now
        self.next: _Round | None = None  # reads and writes that arrived after it was appended


class ReadBarrier:
    """``await confirm(partition)``: returns once an ``acks=all`` append made after the call was
    acknowledged on ``partition`` in its current leader epoch; else ``NOT_COORDINATOR``.
    ``await write(partition, records)``: the records appended (group-committed) with ``acks=all``
    in that epoch; else the named error.

    ``replica_manager`` needs ``append(partition, batch, acks)``; the partition ``topic``,
    ``partition``, ``leader_epoch`` and ``wait_produce(last_offset, acks, leader_epoch)``."""

    def __init__(self, replica_manager: Any, key: bytes, *, timeout_s: float = 5.0,
                 wall_clock_ms: Callable[[], int] | None = None) -> None:
        self.rm = replica_manager
        self.key = key
        self.timeout_s = timeout_s
        self._wall_ms = wall_clock_ms or (lambda: int(time.time() * 1000))
        self._slots: dict[tuple[str, int, int], _Slot] = {}
        self.rounds = 0  # appends made (statistics, tests)
        self.barriers = 0  # of them, tombstone-only rounds (readers and no writer)
        self.writes = 0  # records written through write()

    async def confirm(self, p: Any) -> None:
        rnd = await self._join(p, ())
        if rnd.code:
            raise _not_coordinator(f"{p.topic}/{p.partition}", rnd.why)

    async def write(self, p: Any, records: Sequence[Record]) -> None:
        """Append ``records`` in the partition's next round (one batch for every writer of the
        round) and wait for ``acks=all``; raises the round's error with its own code."""
        if not records:
            raise ValueError("write() needs at least one record")
        rnd = await self._join(p, records)
        if rnd.code:
            raise error_for(rnd.code, f"{p.topic}/{p.partition}: {rnd.why}")

    async def _join(self, p: Any, records: Sequence[Record]) -> _Round:
        key = (p.topic, p.partition, p.leader_epoch)
        slot = self._slots.setdefault(key, _Slot())
        mine = slot.next
        if mine is None:
            mine = slot.next = _Round()
        chunk = list(records)
        if chunk:
            mine.chunks.append(chunk)
        mine.waiters += 1
        try:
            while not mine.done.is_set():
                if slot.running is None:  # the first waiter of this round appends it
                    slot.running, slot.next = mine, None
                    try:
                        # shielded (bounded by timeout_s): the other waiters of the round depend on it
                        with trio.CancelScope(shield=True):
                            mine.code, mine.why = await self._round(
                                p, key[2], [r for c in mine.chunks for r in c])
                    finally:
                        slot.running = None
                        mine.done.set()
                else:
                    await slot.running.done.wait()
        finally:
            mine.waiters -= 1
            if not mine.done.is_set() and slot.next is mine:  # cancelled before the round left
                if chunk:
                    mine.chunks = [c for c in mine.chunks if c is not chunk]
                if mine.waiters == 0:
                    slot.next = None
            if slot.running is None and slot.next is None and self._slots.get(key) is slot:
                del self._slots[key]
        return mine

    async def _round(self, p: Any, epoch: int, records: list[Record]) -> tuple[ErrorCode, str]:
        self.rounds += 1
        if records:
            self.writes += len(records)
        else:
            self.barriers += 1
        now = self._wall_ms()
        batch = build_batch([(k, v, [], now) for k, v in records or [(self.key, None)]])
        try:
            info = self.rm.append(p, batch, _ACKS_ALL)
        except RafkaError as exc:
            return exc.code, exc.message
        except Exception as exc:  # noqa: BLE001 - a log error (disk full, ...) as its wire error
            return wire_error(exc)
        with trio.move_on_after(self.timeout_s):
            code = await p.wait_produce(info.last_offset, _ACKS_ALL, leader_epoch=epoch)
            return code, code.name
        return ErrorCode.REQUEST_TIMED_OUT, f"not replicated within {self.timeout_s:g} s"

    def statistics(self) -> dict[str, int]:
        return {"rounds": self.rounds, "barriers": self.barriers, "writes": self.writes,
                "partitions": len(self._slots)}


def _not_coordinator(where: str, why: str) -> RafkaError:
    log.info("read barrier on %s failed (%s): answering NOT_COORDINATOR", where, why)
    return error_for(ErrorCode.NOT_COORDINATOR,
                     f"cannot confirm leadership of {where} ({why}): look the coordinator up again")
