"""Read barrier: a coordinator answers a read from memory only after proving it still leads.

Theory of operation
-------------------
A group coordinator (``broker/groups/offsets.py``) and a transaction coordinator
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

Any append proves it, not only a tombstone: nothing above is specific to the barrier record. So
a read notes the partition's log end offset ``L`` when it arrives and is answered once the HW
passes ``L`` in the leader epoch it arrived in — the record at ``L`` was appended by this leader
after the read arrived, whoever appended it. When the owner writes (the transaction
coordinator's state records, the group coordinator's offset commits), a read arriving meanwhile
rides the next write and appends nothing of its own; writes are not held back for it (each
append leaves at once, and followers fetch whatever is there: concurrent appends already share
follower fetches and fsyncs).

Cost: only a read that finds nothing appended since it arrived appends a barrier, and barriers
are coalesced per partition: one is in flight at a time, a read that arrives while one is in
flight waits for it to end and then uses whatever was appended since it arrived (a write, or
the barrier another waiting read appended first), so under load many reads share one round.
With one replica (or ``min.insync.replicas`` reached by the leader alone and no other ISR
member) the append is acknowledged at once, as no other broker could be elected anyway.

Any failure (not the leader, not enough replicas, timed out) raises ``NOT_COORDINATOR``: the
client's retriable answer that makes it look the coordinator up again. :meth:`ReadBarrier.write`
is the owner's ``acks=all`` append of its own records (one batch) with the named error of a
failed one (``NOT_LEADER_OR_FOLLOWER`` when the leader epoch changed, ``REQUEST_TIMED_OUT``, the
append's refusal); it installs its value only after that.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import trio
from rafka.broker.error_map import wire_error
from rafka.log.batch import build_batch
from rafka.wire.errors import ErrorCode, RafkaError, error_for

__all__ = ["ReadBarrier", "ReadBarrierStatistics"]

log = logging.getLogger("rafka.read_barrier")

_ACKS_ALL: Final = -1

Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class ReadBarrierStatistics:
    """A snapshot of one :class:`ReadBarrier` (``statistics()``)."""

    rounds: int  # barrier records appended since start
    confirmed: int  # reads confirmed since start (by a barrier or by another append)
    in_flight: int  # partitions with a barrier appended and not acknowledged yet


class ReadBarrier:
    """``await confirm(partition)``: returns once a record appended after the call (by anyone:
    a write, or a barrier tombstone of ``key``) was acknowledged with ``acks=all`` on
    ``partition`` in its current leader epoch; else ``NOT_COORDINATOR``.
    ``await write(partition, records)``: the owner's ``acks=all`` append of ``records``.

    ``replica_manager`` needs ``append(partition, batch, acks)``; the partition ``topic``,
    ``partition``, ``leader_epoch``, ``log.log_end_offset`` and
    ``wait_produce(last_offset, acks, leader_epoch)``."""

    def __init__(self, replica_manager: Any, key: bytes, *, timeout_s: float = 5.0,
                 wall_clock_ms: Callable[[], int] | None = None) -> None:
        self.rm = replica_manager
        self.key = key
        self.timeout_s = timeout_s
        self._wall_ms = wall_clock_ms or (lambda: int(time.time() * 1000))
        self._running: dict[tuple[str, int], trio.Event] = {}  # partition -> its barrier's end
        self.rounds = 0  # barriers appended (statistics, tests)
        self.confirmed = 0  # reads confirmed (by a barrier or by another append)

    async def confirm(self, p: Any) -> None:
        epoch, arrived = p.leader_epoch, p.log.log_end_offset
        where = f"{p.topic}/{p.partition}"
        code, why = ErrorCode.REQUEST_TIMED_OUT, f"not replicated within {self.timeout_s:g} s"
        with trio.move_on_after(self.timeout_s):
            code, why = await self._confirm(p, epoch, arrived)
        if code:
            raise _not_coordinator(where, why)
        self.confirmed += 1

    async def _confirm(self, p: Any, epoch: int, arrived: int) -> tuple[ErrorCode, str]:
        key = (p.topic, p.partition)
        while p.log.log_end_offset <= arrived:  # nothing appended since the read arrived
            running = self._running.get(key)
            if running is not None:  # coalesce: wait for the barrier in flight, then look again
                await running.wait()
                continue
            done = self._running[key] = trio.Event()
            try:
                self.rounds += 1
                code, why = self._append(p, [(self.key, None)])[:2]
                if code:
                    return code, why
                return await self._acked(p, arrived, epoch)
            finally:
                del self._running[key]
                done.set()
        return await self._acked(p, arrived, epoch)

    async def write(self, p: Any, records: Sequence[Record]) -> None:
        """Append ``records`` as one batch and wait for ``acks=all`` in the current leader epoch;
        raises the named error otherwise (``REQUEST_TIMED_OUT`` after ``timeout_s``)."""
        if not records:
            raise ValueError("write() needs at least one record")
        epoch, where = p.leader_epoch, f"{p.topic}/{p.partition}"
        code, why, last = self._append(p, records)
        if not code:
            code, why = ErrorCode.REQUEST_TIMED_OUT, f"not replicated within {self.timeout_s:g} s"
            with trio.move_on_after(self.timeout_s):
                code, why = await self._acked(p, last, epoch)
        if code:
            raise error_for(code, f"{where}: {why}")

    def _append(self, p: Any, records: Sequence[Record]) -> tuple[ErrorCode, str, int]:
        now = self._wall_ms()
        try:
            info = self.rm.append(p, build_batch([(k, v, [], now) for k, v in records]), _ACKS_ALL)
        except RafkaError as exc:
            return exc.code, exc.message, -1
        except Exception as exc:  # noqa: BLE001 - a log error (disk full, ...) as its wire error
            return (*wire_error(exc), -1)
        return ErrorCode.NONE, "", info.last_offset

    @staticmethod
    async def _acked(p: Any, offset: int, epoch: int) -> tuple[ErrorCode, str]:
        code = await p.wait_produce(offset, _ACKS_ALL, leader_epoch=epoch)
        return code, code.name

    def statistics(self) -> ReadBarrierStatistics:
        return ReadBarrierStatistics(self.rounds, self.confirmed, len(self._running))


def _not_coordinator(where: str, why: str) -> RafkaError:
    log.info("read barrier on %s failed (%s): answering NOT_COORDINATOR", where, why)
    return error_for(ErrorCode.NOT_COORDINATOR,
                     f"cannot confirm leadership of {where} ({why}): look the coordinator up again")
