"""One partition replica on this broker: its log, its role, its high watermark, its waiters.

Theory of operation
-------------------
A ``Partition`` wraps a ``log.PartitionLog`` and the registration this broker last applied from
the metadata image (leader, leader epoch, partition epoch, replicas, ISR).

* As **leader** it owns a ``broker.replication.state.LeaderState`` (the replication engineer's
  pure state machine) fed with the log end offset after each append and with follower fetch
  positions; the state computes the replicated high watermark. Durability is layered on top:
  under a flush rule with ``fsync_acks`` (``broker/flush_rule.py``: the node's ``batch`` policy,
  or the topic's ``flush.messages=1``) a record is exposed only once fsynced, so the partition's
  high watermark is ``min(state.high_watermark, durable_end)`` where ``durable_end`` is the log
  end offset the last group-commit flush covered (for other rules ``durable_end`` is the log end
  offset at once). Both terms never decrease within a leader epoch, so neither does the HW.
  A rule changed by a topic config (``set_flush_rule``) keeps that: turned on, the durable end
  goes back to what is fsynced but the HW stays where it was (what it exposed was acknowledged
  under the old rule) until the group commit passes it.
  With a single replica the HW is simply the durable log end offset.
* **HW checkpoint** (as Kafka's ``replication-offset-checkpoint``): the replica manager writes
  ``high-watermark-checkpoint`` in the partition directory (tmp + fsync + rename) about once a
  second and on clean close, so it may lag the HW but never lead it. On open the HW is
  ``min(checkpoint, log end offset)`` (no checkpoint: 0) — never the recovery point: a broker
  that restarts and leads the same epoch again must not expose records no follower ever had;
  its HW moves on only as followers fetch.
* As **follower** it serves nobody; the replica fetcher (``broker/replication``) appends with
  ``append_as_follower`` and sets the HW the leader reports. Under ``batch`` the fetcher has the
  replica manager fsync what a response appended before its next fetch reports it.
* **Transactions** (docs/transactions.md, "Partition leader"): the *last stable offset* is
  ``min(high watermark, first unstable offset)``; a transaction stays unstable until its marker
  is below the HW (as Kafka's ``unreplicatedTxns``): the log's producer state closes it when the
  marker is appended, so ``append_marker`` remembers ``(marker offset, first offset)`` until the
  HW passes the marker. The LSO therefore moves only when the HW moves (or a truncation/role
  change), and ``hw_changed`` wakes the parked read_committed fetches too.
  ``txn_verified`` holds one ``VerificationGuard`` per producer id whose opening of a
  transaction here was (or is being) verified with its coordinator (KIP-890 part 1): a marker
  for that producer removes it, so a late batch of an ended transaction can never open a new
  one; every role change clears the table (followers serve no produce requests).
* ``unsafe_ack_before_replication`` (TEST ONLY, broker setting ``unsafe.ack.before.replication``)
  answers ``acks=all`` like ``acks=1``; see docs/durability.md.

Waiting is event driven, never polled (the fetches' signals: ``broker/fetch_wait.py``; the
others: one ``trio.Event`` per kind of waiter, set and replaced when it fires):

* produce requests waiting for their ``acks`` — not one shared event but one per waiter, in two
  heaps ordered by the waiter's last offset (``acks=1``: decided once the durable end passes
  it; ``acks=all``: once the HW passes it too). When the durable end or the HW moves, only the
  waiters that are now decided are woken, lowest offset first; a role change, a deletion or an
  offline log (``notify``) wakes them all, and an undecided one registers again;
* ``data_changed`` — follower fetches: the log end offset moved (a follower fetch answers only
  with records, so nothing else can complete it — except a log start moved by DeleteRecords,
  which a follower reporting an older one is answered at once: ``delete_records_before``);
* ``hw_changed`` — consumer fetches: the HW moved (consumers are served below it only);
* ``starts_changed`` — DeleteRecords waiting for the in-sync followers' log start offsets
  (``low_watermark``): a follower fetch reported a log start that moved.

``notify()`` (role, deletion, an offline log) sets all four. With one shared event every
parked fetch re-read on every append, flush and follower position. Counted at 10k records/s
(RF 3, linger 5 ms): per produce request, consumer fetch reads went from 3.8 to 1.9 and follower
fetch reads from 5.2 to 3.8. Those are the minimum: the read on arrival and the read on the
change that completes the fetch. The leader's CPU did not move measurably; the spurious reads
were cheap.

The produce waiters were one shared event too, until 32 single-record produces in flight showed
its cost (issue 26): every flush round and every follower position woke all of them, and each
wake resumes a request's whole chain of coroutines (server, metrics, quotas, dispatch, handler)
only to park it again — 4.1 resumes per produce request where 2 decide it. The heaps wake a
waiter once its outcome is decided (``produce_outcome`` is not None), which is monotone in the
offset within one heap while the leadership stays the same; everything that breaks that (a new
leader epoch, a deletion, an offline log) goes through ``notify``. A waiter that gives up
(deadline, cancelled connection) leaves its entry behind, marked settled; such entries are
dropped when they reach the top or when they outnumber the live ones. A waiter is a
``broker.produce_wait.ParkedProduce``, not an event in a cancel scope: the wake hands it the
outcome decided, and its deadline is kept by the replica manager's one ``ProduceDeadlines``
timer (that module's docstring).
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from pathlib import Path
from typing import Any

import trio
from rafka.broker.detached import to_task
from rafka.broker.events import EventLog
from rafka.broker.fetch_wait import Signal
from rafka.broker.flush_rule import FlushRule
from rafka.broker.produce_wait import ParkedProduce, ProduceDeadlines
from rafka.broker.replication.state import (
    HighWatermarkAdvanced,
    IsrChanged,
    LeaderState,
    validate_leader_epoch,
)
from rafka.log.batch import build_control_batch
from rafka.log.index import write_file_atomic
from rafka.log.partition_log import AppendInfo, FetchSlice, PartitionLog
from rafka.metadata.image import PartitionRegistration
from rafka.wire.errors import ErrorCode, error_for

__all__ = ["Partition", "VerificationGuard", "HW_CHECKPOINT_FILE", "read_hw_checkpoint",
           "write_hw_checkpoint"]

log = logging.getLogger("rafka.partition")


HW_CHECKPOINT_FILE = "high-watermark-checkpoint"


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class VerificationGuard:
    """A producer's (pending or done) verification with its transaction coordinator that it
    may open a transaction on this partition with ``epoch``. Compared by identity: the answer
    of a verification counts only if this very guard is still in ``Partition.txn_verified``."""

    __slots__ = ("epoch", "verified", "txn_seq")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.verified = False
        self.txn_seq = -1  # the verified transaction's number (-1: the coordinator did not say)

    def __repr__(self) -> str:
        return (f"VerificationGuard(epoch={self.epoch}, verified={self.verified}, "
                f"txn_seq={self.txn_seq})")


def read_hw_checkpoint(directory: Path) -> int:
    """The checkpointed high watermark of the partition in ``directory`` (0 if none/unreadable)."""
    try:
        return max(0, int((directory / HW_CHECKPOINT_FILE).read_text().strip()))
    except (OSError, ValueError):
        return 0


def write_hw_checkpoint(directory: Path, hw: int) -> None:
    """Atomically (tmp + fsync + rename + directory fsync) record ``hw``; raises OSError."""
    write_file_atomic(directory / HW_CHECKPOINT_FILE, f"{hw}\n".encode(), fsync=True, sync_dir=True)


class Partition:
    def __init__(self, topic: str, partition: int, plog: PartitionLog, broker_id: int,
                 events: EventLog, *, fsync_acks: bool, min_insync_replicas: int = 1,
                 replica_lag_time_max_ms: int = 30_000,
                 unsafe_ack_before_replication: bool = False,
                 deadlines: ProduceDeadlines | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.log = plog
        self.broker_id = broker_id
        self.events = events
        # the rule the replica manager flushes this partition by (``fsync_acks``: expose only
        # fsynced records), and its state for the ``every_messages`` / ``every_ms`` rules:
        # records appended since the last flush, and when that flush was taken (trio clock)
        self.flush_rule = FlushRule(fsync_acks)
        self.unflushed_records = 0
        self.flushed_at = 0.0
        self.flush_due = False  # an every_messages / every_ms rule came due: the next round takes it
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        # TEST ONLY (chaos): answer acks=all like acks=1, before the followers have the records
        self.unsafe_ack_before_replication = unsafe_ack_before_replication
        self.registration: PartitionRegistration | None = None
        self.leader_state: LeaderState | None = None
        self.durable_end = plog.recovery_point if fsync_acks else plog.log_end_offset
        # The checkpointed HW (lags the real one, never leads it), not the recovery point: local
        # records above it may never have reached a follower (docs/chaos-results.md #1).
        self.checkpointed_hw = read_hw_checkpoint(plog.directory)
        self.high_watermark = max(plog.log_start_offset,
                                  min(self.checkpointed_hw, plog.log_end_offset))
        self.follower_hw = self.high_watermark
        events.hw(topic, partition, self.high_watermark, -1)
        # produce waiters (module docstring): heaps of (last offset, seq, acks, epoch, parked)
        self._acks1_waiters: list[tuple[int, int, int, int | None, ParkedProduce]] = []
        self._acks_all_waiters: list[tuple[int, int, int, int | None, ParkedProduce]] = []
        self.deadlines = deadlines
        self._waiter_seq = 0
        self._abandoned_waiters = 0
        self.data_changed = Signal()  # follower fetches (broker/fetch_wait.py)
        self.hw_changed = Signal()  # consumer fetches
        self.starts_changed = trio.Event()  # DeleteRecords waiting for followers' log starts
        self.pending_flush = False
        self.pending_alter: Any = None  # an AlterPartitionRequest for the replication glue
        self.alter_poke: Any = None  # called when pending_alter is set (wakes the sender)
        self.deleted = False
        # transactions (module docstring): verified openings, and closed transactions whose
        # marker is not yet below the HW: (marker offset, first offset of the transaction)
        self.txn_verified: dict[int, VerificationGuard] = {}
        self._closing_txns: list[tuple[int, int]] = []

    # -- role ---------------------------------------------------------------------------------

    @property
    def fsync_acks(self) -> bool:
        """Only fsynced records count (acknowledgements, the HW): the flush rule's own flag."""
        return self.flush_rule.fsync_acks

    @property
    def is_leader(self) -> bool:
        return self.leader_state is not None

    @property
    def leader_id(self) -> int:
        return -1 if self.registration is None else self.registration.leader

    @property
    def leader_epoch(self) -> int:
        return -1 if self.registration is None else self.registration.leader_epoch

    @property
    def name(self) -> str:
        return f"{self.topic}/{self.partition}"

    def apply_registration(self, reg: PartitionRegistration) -> None:
        """Become leader or follower as ``reg`` says (idempotent for the same epochs)."""
        old = self.registration
        self.registration = reg
        self.events.partition(self.topic, self.partition, reg.leader, reg.leader_epoch,
                              reg.partition_epoch, list(reg.replicas), list(reg.isr))
        if reg.leader == self.broker_id:
            st = self.leader_state
            if st is not None and st.leader_epoch == reg.leader_epoch:
                self._apply_effects(st.on_metadata_registration(reg))
            else:
                self._become_leader(reg)
        else:
            if old is None or old.leader == self.broker_id or old.leader_epoch != reg.leader_epoch:
                log.info("%s: follower of %d in epoch %d", self.name, reg.leader, reg.leader_epoch)
            self.leader_state = None
            self.pending_alter = None
            self.txn_verified.clear()
        self.notify()

    def set_min_insync_replicas(self, value: int) -> None:
        """A changed topic config: applies to produce requests from now on."""
        self.min_insync_replicas = value
        if self.leader_state is not None:
            self.leader_state.min_insync_replicas = value

    def _become_leader(self, reg: PartitionRegistration) -> None:
        leo = self.log.log_end_offset
        self.log.epochs.assign(reg.leader_epoch, leo)
        hw = min(self.high_watermark, leo)
        self.leader_state = LeaderState(
            partition=(self.topic, self.partition), leader_id=self.broker_id,
            leader_epoch=reg.leader_epoch, partition_epoch=reg.partition_epoch,
            replicas=reg.replicas, isr=reg.isr, log_end_offset=leo, high_watermark=hw,
            min_insync_replicas=self.min_insync_replicas,
            replica_lag_time_max_ms=self.replica_lag_time_max_ms, now_ms=_now_ms())
        log.info("%s: leader in epoch %d at log end offset %d", self.name, reg.leader_epoch, leo)
        self.txn_verified.clear()
        self._apply_effects(self.leader_state.on_append(leo))
        self._update_hw()

    def check_leader(self, current_leader_epoch: int | None = None) -> LeaderState:
        st = self.leader_state
        if st is None:
            raise error_for(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                            f"broker {self.broker_id} is not the leader of {self.name} "
                            f"(leader is {self.leader_id})", leader_id=self.leader_id)
        code = validate_leader_epoch(current_leader_epoch, st.leader_epoch)
        if code:
            raise error_for(code, f"{self.name}: request epoch {current_leader_epoch}, "
                                  f"leader epoch {st.leader_epoch}")
        return st

    # -- appends and durability ---------------------------------------------------------------

    def _check_appendable(self, acks: int, current_leader_epoch: int | None = None) -> LeaderState:
        st = self.check_leader(current_leader_epoch)
        # the test-only unsafe mode acknowledges acks=all like acks=1, min.insync.replicas included
        code = st.check_produce(1 if self.unsafe_ack_before_replication else acks, _now_ms())
        if code:
            raise error_for(code, f"{self.name}: in-sync replicas {list(st.fetching_isr(_now_ms()))} "
                                  f"of ISR {list(st.isr)} are fewer than "
                                  f"min.insync.replicas={self.min_insync_replicas}")
        return st

    def append_as_leader(self, records: bytes, acks: int,
                         current_leader_epoch: int | None = None, *,
                         from_coordinator: bool = False) -> AppendInfo:
        st = self._check_appendable(acks, current_leader_epoch)
        info = self.log.append(records, st.leader_epoch, from_coordinator=from_coordinator)
        if not info.duplicate:
            self.after_append()
        return info

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, txn_seq: int = -1) -> AppendInfo:
        """Append a COMMIT/ABORT control batch (WRITE_TXN_MARKERS, always ``acks=all``).

        Clears the producer's verification guard; the transaction it closes stays unstable
        (holds the LSO) until the HW passes the marker. Raises like ``append_as_leader``
        (an older producer epoch than the log's is ``InvalidProducerEpochError``), and
        ``INVALID_TXN_STATE`` for a marker of transaction ``txn_seq`` when the producer's
        transaction open here was verified as a later one (a late marker of an ended
        transaction: ``broker/handlers/txn_data.py``)."""
        st = self._check_appendable(-1)
        guard = self.txn_verified.get(producer_id)
        if txn_seq >= 0 and guard is not None and guard.verified and guard.txn_seq > txn_seq:
            raise error_for(ErrorCode.INVALID_TXN_STATE,
                            f"{self.name}: marker of transaction {txn_seq} of producer "
                            f"{producer_id}, whose transaction {guard.txn_seq} is open here: "
                            "a late marker of an ended transaction")
        entry = self.log.producer_state.producers.get(producer_id)
        first = entry.txn_first_offset if entry is not None else -1
        batch = build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                    time.time_ns() // 1_000_000)
        info = self.log.append(batch, st.leader_epoch, from_coordinator=True)
        self.txn_verified.pop(producer_id, None)
        if first >= 0:
            self._closing_txns.append((info.last_offset, first))
        self.after_append()
        return info

    def set_flush_rule(self, rule: FlushRule) -> None:
        """Follow ``rule`` from now on (a topic config changed). ``fsync_acks`` turned on: only
        fsynced records count, so the durable end is what is fsynced, and the tail is left
        ``pending_flush`` for the group commit. Turned off: everything appended counts."""
        was, self.flush_rule = self.fsync_acks, rule
        on = rule.fsync_acks
        if on == was:
            return
        if on:
            self.durable_end = min(self.durable_end, self.log.recovery_point)
            self.pending_flush = self.log.log_end_offset > self.durable_end
        else:
            self.durable_end = self.log.log_end_offset
            self.refresh_hw(durable_moved=True)

    def after_append(self) -> None:
        leo = self.log.log_end_offset
        if not self.fsync_acks:
            self.durable_end = leo
        if self.leader_state is not None:
            self._apply_effects(self.leader_state.on_append(leo))
        self.pending_flush = True
        self.refresh_hw(durable_moved=not self.fsync_acks)
        self._wake_data()

    def on_flushed(self, end_offset: int) -> None:
        # never above the log's recovery point now: a flush result that raced a truncation
        # (a failed append rolled back, a follower truncation) must not vouch for offsets
        # that were cut and may since hold other, unflushed records
        end_offset = min(end_offset, self.log.recovery_point)
        if end_offset > self.durable_end:
            self.durable_end = end_offset
            self.refresh_hw(durable_moved=True)

    def _apply_effects(self, effects: list[Any]) -> None:
        for eff in effects:
            if isinstance(eff, IsrChanged):
                st = self.leader_state
                if st is not None:
                    self.events.isr(self.topic, self.partition, st.leader_epoch,
                                    eff.partition_epoch, eff.new_isr)
                continue  # _update_hw / notify below cover the rest
            if isinstance(eff, HighWatermarkAdvanced):
                continue
            # AlterPartitionRequest: the replica manager sends it for this very state
            self.pending_alter = (self.leader_state, eff)
            if self.alter_poke is not None:
                self.alter_poke()

    def take_alter_request(self) -> tuple[LeaderState, Any] | None:
        """``(state, request)`` to send now, or None (ISR shrink checks run here, periodically)."""
        st = self.leader_state
        if st is None:
            self.pending_alter = None
            return None
        self._apply_effects(st.maybe_shrink_isr(_now_ms()))
        taken, self.pending_alter = self.pending_alter, None
        if taken is not None and taken[0] is not st:
            return None  # asked for by an earlier leadership: its fate no longer matters
        return taken

    def on_alter_result(self, body: dict[str, Any] | None, code: ErrorCode,
                        st: LeaderState | None = None, req: Any = None) -> None:
        """The fate of ``req`` sent for ``st``: fed to the state once, and only if ``st`` is
        still this partition's leader state and ``req`` still its pending request."""
        cur = self.leader_state
        if cur is None or (st is not None and cur is not st):
            return
        if req is not None and (cur.pending is None or cur.pending.request is not req):
            return
        if body is not None and not code:
            self._apply_effects(cur.on_alter_partition_response(body, _now_ms()))
        else:
            self._apply_effects(cur.on_alter_partition_error(code, _now_ms()))
        self.refresh_hw()

    def refresh_hw(self, durable_moved: bool = False) -> None:
        """Recompute the HW; wake the produce waiters if it or the durable end moved and the
        consumer fetches if it moved."""
        before = self.high_watermark
        self._update_hw()
        if self.high_watermark != before:
            self._wake_hw()
            self._wake_produce()
        elif durable_moved:
            self._wake_produce()

    def on_truncated(self, to_offset: int) -> None:
        """A follower truncation (diverging epoch): durable end and HW cannot exceed it."""
        self.durable_end = min(self.durable_end, to_offset)
        self.follower_hw = min(self.follower_hw, to_offset)
        self._closing_txns = [(m, f) for m, f in self._closing_txns if m < to_offset]
        self.refresh_hw()

    def _update_hw(self) -> None:
        st = self.leader_state
        if st is None:
            new = self.follower_hw
        else:
            new = min(st.high_watermark, self.durable_end)
        new = min(new, self.log.log_end_offset)
        if new > self.high_watermark or (st is None and new != self.high_watermark):
            self.high_watermark = new
            self.events.hw(self.topic, self.partition, new, self.leader_epoch,
                           None if st is None else st.maximal_isr)

    def checkpoint_hw(self) -> bool:
        """Write the HW checkpoint if the HW moved since the last one (synchronously)."""
        hw = self.high_watermark
        if hw == self.checkpointed_hw or self.deleted:
            return False
        write_hw_checkpoint(self.log.directory, hw)
        self.checkpointed_hw = hw
        return True

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, broker_epoch: int = -1,
                          isr_eligible: bool = True, log_start_offset: int = -1) -> None:
        """A consistent follower fetch; ``isr_eligible`` False (fenced, unknown or re-registered
        broker) still counts its position for the HW but never proposes it into the ISR.
        ``log_start_offset``: the follower's own (−1: not reported)."""
        st = self.leader_state
        if st is None or replica_id not in st.followers:
            return
        if 0 <= log_start_offset != st.followers[replica_id].log_start_offset:
            self._wake_starts()
        # ``fetch_offset`` was verified against the log (``verify_follower_fetch``), so it is at
        # most the log's end; the state may not have heard of the newest append yet, and
        # counting less than the follower has is always safe. (Clamping an *unverified* offset
        # was the hazard issue 28 asked about: that never reaches here.)
        self._apply_effects(st.on_follower_fetch(replica_id, min(fetch_offset, st.log_end_offset),
                                                 _now_ms(), broker_epoch=broker_epoch,
                                                 isr_eligible=isr_eligible,
                                                 log_start_offset=log_start_offset))
        self.refresh_hw()

    def produce_outcome(self, last_offset: int, acks: int,
                        leader_epoch: int | None = None) -> ErrorCode | None:
        """None while an appended produce must still wait; else its final error code.

        ``leader_epoch`` is the epoch the records were appended in: once this broker no longer
        leads in that epoch, the offsets may hold other records (it may have been a follower
        and truncated in between), so an answer not yet decided is ``NOT_LEADER_OR_FOLLOWER``.
        """
        if acks == 0:
            return ErrorCode.NONE
        if self.deleted:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        st = self.leader_state
        if st is None or (leader_epoch is not None and st.leader_epoch != leader_epoch):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if last_offset >= self.durable_end and self.log.offline is not None:
            return ErrorCode.KAFKA_STORAGE_ERROR  # its fsync failed: never durable now
        if acks == 1 or self.unsafe_ack_before_replication:
            return ErrorCode.NONE if last_offset < self.durable_end else None
        if last_offset >= self.durable_end:
            return None
        if last_offset < self.high_watermark:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND if st.under_min_isr else ErrorCode.NONE
        return st.produce_outcome(last_offset)

    async def wait_produce(self, last_offset: int, acks: int, leader_epoch: int | None = None,
                           deadline: float = math.inf) -> ErrorCode:
        """The final outcome of an appended produce, waiting for it while undecided;
        ``REQUEST_TIMED_OUT`` once the trio time ``deadline`` passes first."""
        while True:
            out = self.produce_outcome(last_offset, acks, leader_epoch)
            if out is not None:
                return out
            parked = ParkedProduce()
            self._waiter_seq += 1
            heap = self._acks1_waiters if acks == 1 or self.unsafe_ack_before_replication \
                else self._acks_all_waiters
            heapq.heappush(heap, (last_offset, self._waiter_seq, acks, leader_epoch, parked))
            try:
                if deadline == math.inf:
                    out = await parked.park()
                elif self.deadlines is not None:
                    if deadline <= trio.current_time():
                        parked.settled = True
                        out = ErrorCode.REQUEST_TIMED_OUT
                    else:
                        self.deadlines.add(deadline, parked)
                        out = await parked.park()
                else:  # a partition outside a replica manager: no shared timer
                    out = ErrorCode.REQUEST_TIMED_OUT
                    await to_task()  # a cancel scope needs a task (broker/detached.py)
                    with trio.move_on_at(deadline):
                        out = await parked.park()
            except BaseException:  # cancelled: the abort marked its entry settled
                self._note_abandoned()
                raise
            if out is ErrorCode.REQUEST_TIMED_OUT:
                self._note_abandoned()  # its entry is still in the heap, settled
            if out is not None:
                return out
            # None: woken by notify() (role, log or partition changed): look again

    def _note_abandoned(self) -> None:
        self._abandoned_waiters += 1
        if self._abandoned_waiters > 64 and self._abandoned_waiters * 2 > \
                len(self._acks1_waiters) + len(self._acks_all_waiters):
            for heap in (self._acks1_waiters, self._acks_all_waiters):
                heap[:] = [w for w in heap if not w[4].settled]
                heapq.heapify(heap)
            self._abandoned_waiters = 0

    # -- reads --------------------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """``min(HW, first unstable offset)``: read_committed consumers are served below it."""
        hw = self.high_watermark
        lso = hw
        first = self.log.first_unstable_offset()
        if first is not None and first < lso:
            lso = first
        if self._closing_txns:
            self._closing_txns = closing = [(m, f) for m, f in self._closing_txns if m >= hw]
            for _, f in closing:
                lso = min(lso, f)
        return lso

    def read(self, fetch_offset: int, max_bytes: int, *, consumer: bool,
             committed: bool = False, inline_max_bytes: int = 0) -> FetchSlice | None:
        """Whole batches from ``fetch_offset``: below the log end offset for followers, the HW
        for consumers, the LSO for read_committed consumers (``committed``). Up to
        ``inline_max_bytes`` the slice holds the bytes (``PartitionLog.read``)."""
        if not consumer:
            limit = self.log.log_end_offset
        else:
            limit = self.last_stable_offset if committed else self.high_watermark
        return self.log.read(fetch_offset, max_bytes, limit, inline_max_bytes=inline_max_bytes)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords on the leader: the log start moves to ``offset`` (never back) and the
        parked follower fetches are woken, so each answers at once with the new log start
        (``handlers/data.py``) rather than at the end of its long poll. The new log start."""
        start = self.log.delete_records_before(offset)
        self._wake_data()
        return start

    def low_watermark(self) -> int:
        """The smallest log start offset of this leader and its in-sync followers (−1 while
        one has not reported it in this leader epoch); a non-leader: its own log start."""
        st = self.leader_state
        if st is None:
            return self.log.log_start_offset
        return st.low_watermark(self.log.log_start_offset)

    def notify(self) -> None:
        """Wake every waiter: the role, the log's state or the partition itself changed."""
        for heap in (self._acks1_waiters, self._acks_all_waiters):
            for w in heap:
                w[4].settle(None)  # look again
            heap.clear()
        self._abandoned_waiters = 0
        self._wake_data()
        self._wake_hw()
        self._wake_starts()

    def _wake_starts(self) -> None:
        self.starts_changed.set()
        self.starts_changed = trio.Event()

    def _wake_produce(self) -> None:
        """The durable end or the HW moved: wake the produce waiters now decided, lowest first."""
        for heap in (self._acks1_waiters, self._acks_all_waiters):
            while heap:
                last, _, acks, epoch, parked = heap[0]
                if parked.settled:  # abandoned
                    self._abandoned_waiters = max(0, self._abandoned_waiters - 1)
                else:
                    out = self.produce_outcome(last, acks, epoch)
                    if out is None:
                        break
                    parked.settle(out)
                heapq.heappop(heap)

    def _wake_data(self) -> None:
        self.data_changed.fire()

    def _wake_hw(self) -> None:
        self.hw_changed.fire()

    def statistics(self) -> dict[str, Any]:
        return {"leader": self.is_leader, "leader_epoch": self.leader_epoch,
                "high_watermark": self.high_watermark, "durable_end": self.durable_end,
                "last_stable_offset": self.last_stable_offset,
                **self.log.statistics()}
