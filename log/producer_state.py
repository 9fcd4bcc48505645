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

Persistence: state is a pure function of the batch headers, so it is rebuilt on open from the
newest snapshot file ``<offset:020d>.snapshot`` at or below the log end offset plus a header
scan of the batches after it.  Snapshots are written on segment roll and on close (msgpack,
CRC-32C protected, temp file + rename); ``truncate_to`` drops the snapshots above the new end
and rebuilds the same way.  The table is bounded (``max_producers``, oldest evicted first) and
producers idle for ``expiration_ms`` are dropped by ``expire``.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import msgpack
from crc32c import crc32c

from .batch import BatchHeader
from .errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    UnknownProducerIdError,
)
from .index import write_file_atomic

__all__ = ["ProducerStateManager", "ProducerEntry", "BatchMetadata", "DuplicateInfo",
           "SNAPSHOT_SUFFIX", "BATCHES_PER_PRODUCER", "last_sequence"]

SNAPSHOT_SUFFIX = ".snapshot"
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


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=BATCHES_PER_PRODUCER))
    last_timestamp: int = -1

    def copy(self) -> ProducerEntry:
        return ProducerEntry(self.epoch, deque(self.batches, maxlen=BATCHES_PER_PRODUCER),
                             self.last_timestamp)


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The batch's last sequence number, wrapping past 2^31-1 to 0."""
    if base_sequence > _SEQ_MAX - last_offset_delta:
        return last_offset_delta - (_SEQ_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


def _next_sequence(seq: int) -> int:
    return 0 if seq == _SEQ_MAX else seq + 1


class ProducerStateManager:
    def __init__(self, directory: Path, *, max_producers: int = 100_000,
                 expiration_ms: int = 24 * 3600 * 1000) -> None:
        self.directory = directory
        self.max_producers = max_producers
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self.producers)

    # -- check and update -------------------------------------------------------------------

    def begin(self) -> dict[int, ProducerEntry]:
        """An overlay for checking and updating several batches before committing them."""
        return {}

    def check(self, header: BatchHeader,
              overlay: dict[int, ProducerEntry] | None = None) -> DuplicateInfo | None:
        """Validate an incoming leader batch; a ``DuplicateInfo`` means "already appended"."""
        pid = header.producer_id
        if pid < 0:
            return None
        entry = overlay.get(pid) if overlay else None
        if entry is None:
            entry = self.producers.get(pid)
        seq = header.base_sequence
        if entry is None or not entry.batches:
            if entry is not None and header.producer_epoch < entry.epoch:
                raise InvalidProducerEpochError(pid, entry.epoch, header.producer_epoch)
            if seq != 0:
                raise UnknownProducerIdError(
                    pid, 0, seq, f"producer {pid}: unknown producer id with sequence {seq} "
                    "(a new producer must start at sequence 0)")
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
        return None

    def update(self, header: BatchHeader, base_offset: int,
               overlay: dict[int, ProducerEntry] | None = None, *,
               timestamp: int | None = None) -> None:
        """Record an appended batch (``base_offset`` as assigned, the header may predate it).

        ``timestamp`` overrides the header's max timestamp (LogAppendTime stamping).
        """
        pid = header.producer_id
        if pid < 0:
            return
        ts = header.max_timestamp if timestamp is None else timestamp
        target = overlay if overlay is not None else self.producers
        entry = target.get(pid)
        if entry is None:
            existing = self.producers.get(pid)
            entry = existing.copy() if existing is not None else ProducerEntry(header.producer_epoch)
            target[pid] = entry
        if header.producer_epoch != entry.epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        if header.base_sequence >= 0:
            entry.batches.append(BatchMetadata(
                header.base_sequence, last_sequence(header.base_sequence, header.last_offset_delta),
                base_offset, base_offset + header.last_offset_delta, ts))
        entry.last_timestamp = max(entry.last_timestamp, ts)

    def commit(self, overlay: dict[int, ProducerEntry]) -> None:
        if overlay:
            self.producers.update(overlay)
            self.trim()

    def trim(self) -> None:
        """Evict the least recently active producers beyond ``max_producers``."""
        excess = len(self.producers) - self.max_producers
        if excess > 0:
            oldest = sorted(self.producers, key=lambda p: self.producers[p].last_timestamp)
            for pid in oldest[:excess]:
                del self.producers[pid]

    def expire(self, now_ms: int) -> int:
        """Forget producers idle for ``expiration_ms``; returns how many."""
        horizon = now_ms - self.expiration_ms
        dead = [pid for pid, e in self.producers.items() if e.last_timestamp < horizon]
        for pid in dead:
            del self.producers[pid]
        return len(dead)

    def clear(self) -> None:
        self.producers.clear()

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
        body = msgpack.packb([1, offset, [
            [pid, e.epoch, e.last_timestamp, [list(b) for b in e.batches]]
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
        self.producers.clear()
        for off in reversed(self.snapshot_offsets()):
            if off > max_offset:
                continue
            path = self._snapshot_path(off)
            try:
                data = path.read_bytes()
                if len(data) < 4 or _CRC.unpack_from(data)[0] != crc32c(data[4:]):
                    raise ValueError("CRC mismatch")
                version, snap_off, producers = msgpack.unpackb(data[4:])
                if version != 1 or snap_off != off:
                    raise ValueError(f"bad version/offset {version}/{snap_off}")
                for pid, epoch, last_ts, batches in producers:
                    e = ProducerEntry(epoch, deque((BatchMetadata(*b) for b in batches),
                                                   maxlen=BATCHES_PER_PRODUCER), last_ts)
                    self.producers[pid] = e
            except (OSError, ValueError, TypeError, msgpack.UnpackException) as exc:
                logger.warning("ignoring unreadable producer snapshot %s: %s", path, exc)
                self.producers.clear()
                continue
            return off
        return None
