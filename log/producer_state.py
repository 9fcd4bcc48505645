"""Idempotent-producer state of one partition.

Theory of operation: for every producer id the partition remembers its current epoch and the
metadata of its last ``BATCHES_PER_PRODUCER`` (5) batches: ``(first_seq, last_seq,
base_offset, last_offset, timestamp)``.  A leader append ``check``s each batch:

* producer epoch older than the recorded one → ``InvalidProducerEpochError`` (fenced);
* newer epoch → its sequence must restart at 0, else ``OutOfOrderSequenceError``;
* same (first_seq, last_seq) as a remembered batch → a retry: ``DuplicateInfo`` with the
  original offsets (the log returns them without appending);
* otherwise first_seq must be the last sequence + 1 (wrapping from 2^31-1 to 0);
* an unknown producer must start at sequence 0 (``UnknownProducerIdError``).

``update`` records a batch after it is appended.  A produce payload with several batches is
checked against an *overlay* dict (``begin()``) so the batches see each other, and committed
only once the write succeeded.

Transactions (docs/transactions.md): each entry also keeps ``txn_first_offset``, the base
offset of its open transaction (-1 none).  A transactional data batch opens one when none is
open; a control batch (marker) closes it and ``update`` returns a ``CompletedTxn`` — with the
last stable offset right after it, which the aborted-transaction index stores.  Markers carry
no sequence (base sequence -1): they never touch the sequence window, except that a marker
with a newer epoch is an epoch bump like any other (the window is cleared; the next batch
starts at sequence 0).  ``check`` takes ``from_coordinator``: only then are markers, and
transactional batches without a sequence (the group coordinator's offset commits), accepted —
with the epoch check but no sequence check.  ``first_unstable_offset`` is the smallest open
``txn_first_offset``, kept incrementally in ``_open`` (producer id → first offset) so it costs
O(open transactions), not O(producers).  Producers with an open transaction are never
evicted by ``trim`` or ``expire`` (their transaction would silently stop holding back the last
stable offset).

Persistence: state is a pure function of the batch headers, so it is rebuilt on open from the
newest snapshot file ``<offset:020d>.snapshot`` at or below the log end offset plus a header
scan of the batches after it.  Snapshots are written on segment roll and on close (msgpack,
CRC-32C protected, temp file + rename); ``truncate_to`` drops the snapshots above the new end
and rebuilds the same way.  The table is bounded (``max_producers``, oldest evicted first) and
producers idle for ``expiration_ms`` are dropped by ``expire``.

Idle is measured on the broker's clock, never the batch's: each entry keeps ``last_seen_ms``,
the wall-clock time of the last append that touched it on *this* replica (a follower's own
append time; snapshots keep it; batches found by a log scan after the snapshot, which carry
no broker time, count as seen at the scan — later, never earlier, than they were).
``last_timestamp`` (the batch's max timestamp, what DESCRIBE_PRODUCERS shows) is client time: a mirror replaying week-old
records, or a producer with a clock a day behind, would otherwise have its sequence window
dropped at the next retention pass, and its next retry appended a second time (CI found this:
a retry with timestamp-0 batches duplicated on a new leader whose retention pass ran between
the append and the retry).  ``trim`` evicts by ``last_seen_ms`` for the same reason.
"""

from __future__ import annotations

import logging
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import msgpack
from crc32c import crc32c

from .batch import BatchHeader
from .errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from .index import write_file_atomic

__all__ = ["ProducerStateManager", "ProducerEntry", "BatchMetadata", "DuplicateInfo",
           "CompletedTxn", "ProducerInfo", "SNAPSHOT_SUFFIX", "SNAPSHOT_VERSION",
           "BATCHES_PER_PRODUCER", "last_sequence"]

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 4  # 2 adds txn_first_offset, 3 coordinator_epoch, 4 last_seen_ms; 1-3 load
BATCHES_PER_PRODUCER = 5
_SEQ_MAX = 2**31 - 1
_SNAPSHOT_KEEP = 3
_CRC = struct.Struct(">I")
logger = logging.getLogger("rafka.log")


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    timestamp: int


class DuplicateInfo(NamedTuple):
    """Where the original of a retried batch landed."""

    base_offset: int
    last_offset: int
    timestamp: int


class CompletedTxn(NamedTuple):
    """A transaction closed by a marker at ``last_offset``.

    ``last_stable_offset``: the first unstable offset once it is closed (the marker offset + 1
    when nothing else is open) — the aborted-transaction index stores it."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool
    last_stable_offset: int = -1


class ProducerInfo(NamedTuple):
    """One producer as DESCRIBE_PRODUCERS shows it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int  # -1 when none
    last_timestamp: int
    txn_first_offset: int  # -1 when no transaction is open


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=BATCHES_PER_PRODUCER))
    last_timestamp: int = -1
    txn_first_offset: int = -1
    coordinator_epoch: int = -1  # the highest coordinator epoch of this producer's markers
    last_seen_ms: int = -1  # broker wall clock of the last append touching it (expiry, trim)

    def copy(self) -> ProducerEntry:
        return ProducerEntry(self.epoch, deque(self.batches, maxlen=BATCHES_PER_PRODUCER),
                             self.last_timestamp, self.txn_first_offset, self.coordinator_epoch,
                             self.last_seen_ms)


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The batch's last sequence number, wrapping past 2^31-1 to 0."""
    if base_sequence > _SEQ_MAX - last_offset_delta:
        return last_offset_delta - (_SEQ_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


def _next_sequence(seq: int) -> int:
    return 0 if seq == _SEQ_MAX else seq + 1


def wall_clock_ms() -> int:
    """The wall clock in ms: the default clock of the producer state and of a partition log."""
    return time.time_ns() // 1_000_000


class ProducerStateManager:
    def __init__(self, directory: Path, *, max_producers: int = 100_000,
                 expiration_ms: int = 24 * 3600 * 1000,
                 clock: Callable[[], int] = wall_clock_ms) -> None:
        self.directory = directory
        self._clock = clock
        self.max_producers = max_producers
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}
        self._open: dict[int, int] = {}  # producer id -> txn_first_offset of open transactions

    def __len__(self) -> int:
        return len(self.producers)

    # -- transactions -------------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of an open transaction, or None."""
        return min(self._open.values()) if self._open else None

    def open_transactions(self) -> dict[int, int]:
        """producer id → first offset of its open transaction."""
        return dict(self._open)

    def describe(self) -> list[ProducerInfo]:
        """Every producer with its epoch, last sequence, last timestamp and open txn."""
        return [ProducerInfo(pid, e.epoch, e.batches[-1].last_seq if e.batches else -1,
                             e.last_timestamp, e.txn_first_offset)
                for pid, e in sorted(self.producers.items())]

    def _set(self, pid: int, entry: ProducerEntry) -> None:
        self.producers[pid] = entry
        if entry.txn_first_offset >= 0:
            self._open[pid] = entry.txn_first_offset
        else:
            self._open.pop(pid, None)

    def _forget(self, pid: int) -> None:
        del self.producers[pid]
        self._open.pop(pid, None)

    def _first_unstable_with(self, overlay: dict[int, ProducerEntry] | None) -> int | None:
        if not overlay:
            return self.first_unstable_offset()
        firsts = [off for pid, off in self._open.items() if pid not in overlay]
        firsts.extend(e.txn_first_offset for e in overlay.values() if e.txn_first_offset >= 0)
        return min(firsts) if firsts else None

    # -- check and update -------------------------------------------------------------------

    def begin(self) -> dict[int, ProducerEntry]:
        """An overlay for checking and updating several batches before committing them."""
        return {}

    def _entry(self, pid: int, overlay: dict[int, ProducerEntry] | None) -> ProducerEntry | None:
        entry = overlay.get(pid) if overlay else None
        return entry if entry is not None else self.producers.get(pid)

    def check(self, header: BatchHeader, overlay: dict[int, ProducerEntry] | None = None, *,
              from_coordinator: bool = False, coordinator_epoch: int = -1) -> DuplicateInfo | None:
        """Validate an incoming leader batch; a ``DuplicateInfo`` means "already appended".

        ``from_coordinator``: the batch comes from a coordinator of this broker — markers and
        sequence-less transactional batches are accepted (epoch checked, sequence not). A
        marker's ``coordinator_epoch`` older than one this producer's markers already carried
        is ``TransactionCoordinatorFencedError`` (Kafka's check): a deposed coordinator still
        finishing an old decision must not close the producer's *current* transaction (-1, an
        operator's abort, is not checked)."""
        pid = header.producer_id
        if header.is_control or (from_coordinator and header.is_transactional
                                 and header.base_sequence < 0):
            if not from_coordinator:
                raise InvalidRecordError("control batches are written by transaction "
                                         "coordinators only")
            if pid < 0:
                raise InvalidRecordError("a transactional batch needs a producer id")
            entry = self._entry(pid, overlay)
            if entry is not None and header.producer_epoch < entry.epoch:
                raise InvalidProducerEpochError(pid, entry.epoch, header.producer_epoch)
            if (header.is_control and entry is not None
                    and 0 <= coordinator_epoch < entry.coordinator_epoch):
                raise TransactionCoordinatorFencedError(
                    f"producer {pid}: marker of coordinator epoch {coordinator_epoch}, "
                    f"older than {entry.coordinator_epoch}")
            return None
        if pid < 0:
            if header.is_transactional:
                raise InvalidRecordError("a transactional batch needs a producer id")
            return None
        entry = self._entry(pid, overlay)
        seq = header.base_sequence
        if entry is None or not entry.batches:
            if entry is not None and header.producer_epoch < entry.epoch:
                raise InvalidProducerEpochError(pid, entry.epoch, header.producer_epoch)
            if seq != 0:
                raise UnknownProducerIdError(
                    pid, 0, seq, f"producer {pid}: unknown producer id with sequence {seq} "
                    "(a new producer must start at sequence 0)")
            self._check_txn_mode(header, entry)
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(pid, entry.epoch, header.producer_epoch)
        if header.producer_epoch > entry.epoch:
            if seq != 0:
                raise OutOfOrderSequenceError(
                    pid, 0, seq, f"producer {pid}: new epoch {header.producer_epoch} must start "
                    f"at sequence 0, got {seq}")
            return None
        last = last_sequence(seq, header.last_offset_delta)
        for b in entry.batches:
            if b.first_seq == seq and b.last_seq == last:
                return DuplicateInfo(b.base_offset, b.last_offset, b.timestamp)
        expected = _next_sequence(entry.batches[-1].last_seq)
        if seq != expected:
            raise OutOfOrderSequenceError(pid, expected, seq)
        self._check_txn_mode(header, entry)
        return None

    @staticmethod
    def _check_txn_mode(header: BatchHeader, entry: ProducerEntry | None) -> None:
        """A non-transactional batch of the same epoch while its transaction is open is a
        client bug (Kafka: "expected transactional write"); it would never be committed."""
        if (entry is not None and entry.txn_first_offset >= 0 and not header.is_transactional
                and header.producer_epoch == entry.epoch):
            raise InvalidTxnStateError(
                f"producer {header.producer_id}: non-transactional batch while its transaction "
                f"from offset {entry.txn_first_offset} is open")

    def update(self, header: BatchHeader, base_offset: int,
               overlay: dict[int, ProducerEntry] | None = None, *,
               timestamp: int | None = None, marker_type: int | None = None,
               coordinator_epoch: int = -1, now_ms: int | None = None) -> CompletedTxn | None:
        """Record an appended batch (``base_offset`` as assigned, the header may predate it).

        ``timestamp`` overrides the header's max timestamp (LogAppendTime stamping);
        ``now_ms`` is the broker's time of the append (the clock's when None).  A control
        batch needs its ``marker_type`` (``log.batch.control_type``); when it closes an open
        transaction the ``CompletedTxn`` is returned."""
        pid = header.producer_id
        if pid < 0:
            return None
        ts = header.max_timestamp if timestamp is None else timestamp
        target = overlay if overlay is not None else self.producers
        entry = target.get(pid)
        if entry is None:
            existing = self.producers.get(pid)
            entry = existing.copy() if existing is not None else ProducerEntry(header.producer_epoch)
            if overlay is not None:
                overlay[pid] = entry
        if header.producer_epoch > entry.epoch or (
                header.producer_epoch != entry.epoch and not header.is_control):
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        completed = None
        if header.is_control:
            if marker_type is None:
                raise ValueError("update of a control batch needs its marker_type")
            entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
            if entry.txn_first_offset >= 0:
                first, entry.txn_first_offset = entry.txn_first_offset, -1
                completed = (pid, first, base_offset, marker_type == 0)
        else:
            if header.is_transactional and entry.txn_first_offset < 0:
                entry.txn_first_offset = base_offset
            if header.base_sequence >= 0:
                entry.batches.append(BatchMetadata(
                    header.base_sequence,
                    last_sequence(header.base_sequence, header.last_offset_delta),
                    base_offset, base_offset + header.last_offset_delta, ts))
        entry.last_timestamp = max(entry.last_timestamp, ts)
        entry.last_seen_ms = self._clock() if now_ms is None else now_ms
        if overlay is None:
            self._set(pid, entry)
        if completed is None:
            return None
        fuo = self._first_unstable_with(overlay)
        return CompletedTxn(*completed, base_offset + 1 if fuo is None else fuo)

    def commit(self, overlay: dict[int, ProducerEntry]) -> None:
        if overlay:
            for pid, entry in overlay.items():
                self._set(pid, entry)
            self.trim()

    def trim(self) -> None:
        """Evict the least recently active producers beyond ``max_producers`` (never one
        with an open transaction)."""
        excess = len(self.producers) - self.max_producers
        if excess > 0:
            idle = [p for p in self.producers if p not in self._open]
            idle.sort(key=lambda p: self.producers[p].last_seen_ms)
            for pid in idle[:excess]:
                self._forget(pid)

    def expire(self, now_ms: int) -> int:
        """Forget producers with no append for ``expiration_ms`` of broker time (none with an
        open transaction)."""
        horizon = now_ms - self.expiration_ms
        dead = [pid for pid, e in self.producers.items()
                if e.last_seen_ms < horizon and pid not in self._open]
        for pid in dead:
            self._forget(pid)
        return len(dead)

    def clear(self) -> None:
        self.producers.clear()
        self._open.clear()

    # -- snapshots --------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        out = []
        for p in self.directory.glob("*" + SNAPSHOT_SUFFIX):
            try:
                out.append(int(p.name[:-len(SNAPSHOT_SUFFIX)]))
            except ValueError:
                continue
        return sorted(out)

    def _snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def write_snapshot(self, offset: int, *, fsync: bool = False) -> None:
        """Persist the state covering every batch below ``offset``; keeps the newest few."""
        body = msgpack.packb([SNAPSHOT_VERSION, offset, [
            [pid, e.epoch, e.last_timestamp, [list(b) for b in e.batches], e.txn_first_offset,
             e.coordinator_epoch, e.last_seen_ms]
            for pid, e in self.producers.items()]])
        write_file_atomic(self._snapshot_path(offset), _CRC.pack(crc32c(body)) + body,
                          fsync=fsync)
        for old in self.snapshot_offsets()[:-_SNAPSHOT_KEEP]:
            self._snapshot_path(old).unlink(missing_ok=True)

    def delete_snapshots_above(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off > offset:
                self._snapshot_path(off).unlink(missing_ok=True)

    def load_latest_snapshot(self, max_offset: int) -> int | None:
        """Load the newest readable snapshot at or below ``max_offset``; its offset or None."""
        self.clear()
        loaded_at = self._clock()
        for off in reversed(self.snapshot_offsets()):
            if off > max_offset:
                continue
            path = self._snapshot_path(off)
            try:
                data = path.read_bytes()
                if len(data) < 4 or _CRC.unpack_from(data)[0] != crc32c(data[4:]):
                    raise ValueError("CRC mismatch")
                version, snap_off, producers = msgpack.unpackb(data[4:])
                if version not in (1, 2, 3, SNAPSHOT_VERSION) or snap_off != off:
                    raise ValueError(f"bad version/offset {version}/{snap_off}")
                for row in producers:
                    pid, epoch, last_ts, batches = row[:4]
                    txn_first = row[4] if version >= 2 else -1
                    coord_epoch = row[5] if version >= 3 else -1
                    # a version 1-3 snapshot has no broker time: seen at the load
                    seen = row[6] if version >= 4 else loaded_at
                    self._set(pid, ProducerEntry(
                        epoch, deque((BatchMetadata(*b) for b in batches),
                                     maxlen=BATCHES_PER_PRODUCER), last_ts, txn_first,
                        coord_epoch, seen))
            except (OSError, ValueError, TypeError, msgpack.UnpackException) as exc:
                logger.warning("ignoring unreadable producer snapshot %s: %s", path, exc)
                self.clear()
                continue
            return off
        return None
