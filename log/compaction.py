"""Log compaction: keep the last record per key in the tail of a compacted log.

Theory of operation (Kafka's cleaner, simplified to one pass per call):

* The *tail* is every non-active segment whose max timestamp is at least
  ``min.compaction.lag.ms`` old (a prefix of the log); the active segment is the *head* and is
  never touched, so producers never race the cleaner.
* Pass 1 builds the offset map ``key → last offset`` over the tail (decoding every record).
  The map is bounded by ``max_keys``: once full after a segment, the tail ends there (the
  rest is cleaned by a later call).
* Pass 2 rewrites each tail segment that loses anything into ``<base>.log.cleaned``: a
  record is kept iff it is the last one of its key in the map, and a kept tombstone (value
  None) is dropped once older than ``delete.retention.ms``.  Keyless records (possible only if
  the topic became compacted later) are dropped.  A batch that keeps everything is copied
  byte for byte; otherwise it is rebuilt keeping ``base_offset``, ``last_offset_delta``,
  timestamps, attributes (compression), producer fields and leader epoch, with the original
  offset and timestamp deltas, in the format it was stored in (a Kafka-written batch stays a
  Kafka records section with its codec: ``batch.pack_section``) — so offsets are preserved and may have gaps.  A batch that
  keeps nothing is dropped, unless it is its producer's last batch in the tail (kept empty so
  that producer state rebuilt from headers still sees its last sequence, as Kafka does).
* The ``.cleaned`` file is fsynced and swapped in by ``PartitionLog._swap_segment``: old
  indexes removed (+ directory fsync), ``os.replace(cleaned, log)`` (+ directory fsync), new
  indexes written.  A crash before the rename leaves the old segment and a ``.cleaned``
  leftover that ``open`` deletes; after it, the new segment.  Either way a consistent log.
  Segments are never merged, so ``log_start_offset`` and segment bases never change, and a
  segment larger than ``segment.bytes`` (one batch bigger than that) is cleaned like any
  other: its batches are streamed one by one, none is ever split.

Transactions (docs/transactions.md): the tail also ends at the first unstable offset (and at
the caller's ``upper_bound``, e.g. the last stable offset): only segments wholly below it are
cleaned, so every transaction with data there is decided.  Records of aborted transactions (a
transactional data batch inside an aborted-transaction index entry of its producer) are
removed and never enter the offset map, so an aborted record never shadows an earlier committed
one of its key.  Control batches (markers) are always kept byte for byte — the simplest correct
choice (Kafka drops a marker once no data of its transaction is left; keeping them costs one
small batch per transaction and keeps producer state and the index rebuildable from the log).

The broker calls ``compact`` from its owner thread (it decodes records: CPU-heavy, run it
when the log is quiet or per segment budget); ``min.cleanable.dirty.ratio`` is left to the
caller's scheduling.
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .batch import build_raw_batch, decode_raw_records, pack_section
from .errors import StorageError

if TYPE_CHECKING:
    from .partition_log import PartitionLog
    from .segment import Segment

__all__ = ["compact", "CompactionResult", "CLEANED_SUFFIX"]

CLEANED_SUFFIX = ".cleaned"
_COPY_CHUNK = 4 * 1024 * 1024
logger = logging.getLogger("rafka.log")


@dataclass(slots=True)
class CompactionResult:
    segments_cleaned: list[int] = field(default_factory=list)  # base offsets rewritten
    records_before: int = 0
    records_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    tombstones_removed: int = 0
    aborted_records_removed: int = 0


class _AbortedRanges:
    """Offset ranges ``[first, last]`` of aborted transactions, per producer id."""

    def __init__(self, log: PartitionLog, start: int, end: int) -> None:
        self.ranges: dict[int, list[tuple[int, int]]] = {}
        for e in log.aborted_transactions(start, end):
            self.ranges.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))

    def contains(self, h) -> bool:
        """Is ``h`` a data batch of an aborted transaction?"""
        if not h.is_transactional or h.is_control:
            return False
        off = h.base_offset
        return any(a <= off <= b for a, b in self.ranges.get(h.producer_id, ()))


def _batches(log: PartitionLog, seg: Segment):
    """(position, header, raw bytes) of every batch of a tail segment."""
    for _seg, pos, h in log._iter_segment(seg, seg.base_offset):
        yield pos, h, seg.pread(h.size, pos)


def compact(log: PartitionLog, now_ms: int | None = None, *,
            max_keys: int = 1_000_000, upper_bound: int | None = None) -> CompactionResult:
    """Compact the tail of ``log`` (no-op unless cleanup.policy contains compact).

    Only segments wholly below ``upper_bound`` (when given) and below the first unstable
    offset are cleaned."""
    result = CompactionResult()
    cfg = log.config
    if not cfg.compact:
        return result
    now = log._now_ms() if now_ms is None else now_ms
    lag_horizon = now - cfg.min_compaction_lag_ms
    bounds = [b for b in (upper_bound, log.first_unstable_offset()) if b is not None]
    bound = min(bounds) if bounds else None
    tail: list[Segment] = []
    for seg in log.segments[:-1]:
        if cfg.min_compaction_lag_ms > 0 and seg.max_timestamp > lag_horizon:
            break
        if bound is not None and seg.next_offset > bound:
            break
        tail.append(seg)
    if not tail:
        return result
    aborted = _AbortedRanges(log, tail[0].base_offset, tail[-1].next_offset)

    # Pass 1: key -> last offset, and each producer's last batch in the tail.
    last_offset: dict[bytes, int] = {}
    producer_last_batch: dict[int, int] = {}
    cleanable = 0
    for seg in tail:
        for _pos, h, raw in _batches(log, seg):
            base = h.base_offset
            if h.producer_id >= 0:
                producer_last_batch[h.producer_id] = base
            if h.is_control or aborted.contains(h):
                continue
            for rec in decode_raw_records(raw, 0, h):
                if rec[2] is not None:
                    last_offset[rec[2]] = base + rec[0]
        cleanable += 1
        if len(last_offset) >= max_keys:
            logger.info("%s: compaction offset map full (%d keys); cleaning %d of %d segments",
                        log.directory, len(last_offset), cleanable, len(tail))
            break
    tail = tail[:cleanable]

    # Pass 2: rewrite the segments that lose something.
    tombstone_horizon = now - cfg.delete_retention_ms
    for seg in tail:
        writer = _CleanedWriter(seg)
        try:
            for pos, h, raw in _batches(log, seg):
                recs = decode_raw_records(raw, 0, h)
                if h.is_control:
                    kept = recs
                elif aborted.contains(h):
                    kept = []
                    result.aborted_records_removed += len(recs)
                else:
                    kept = _kept_records(h, recs, last_offset, tombstone_horizon, result)
                result.records_before += len(recs)
                result.records_after += len(kept)
                result.bytes_before += len(raw)
                if len(kept) == len(recs):
                    writer.keep(pos, raw)
                    result.bytes_after += len(raw)
                    continue
                if not kept and producer_last_batch.get(h.producer_id, -1) != h.base_offset:
                    writer.replace(pos, b"")
                    continue
                section = pack_section(h, kept)  # in the batch's own format and codec
                rebuilt = build_raw_batch(
                    section, base_offset=h.base_offset, last_offset_delta=h.last_offset_delta,
                    record_count=len(kept), first_timestamp=h.first_timestamp,
                    max_timestamp=h.max_timestamp, attributes=h.attributes,
                    producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                    base_sequence=h.base_sequence, leader_epoch=h.partition_leader_epoch,
                    magic=h.magic)
                writer.replace(pos, rebuilt)
                result.bytes_after += len(rebuilt)
            cleaned = writer.finish()
        except BaseException:
            writer.abort()
            raise
        if cleaned is not None:
            log._swap_segment(seg, cleaned)
            result.segments_cleaned.append(seg.base_offset)
    if result.segments_cleaned:
        logger.info("%s: compacted segments %s: %d -> %d records, %d -> %d bytes, %d tombstones "
                    "removed", log.directory, result.segments_cleaned, result.records_before,
                    result.records_after, result.bytes_before, result.bytes_after,
                    result.tombstones_removed)
    return result


def _kept_records(h, recs: list, last_offset: dict[bytes, int], tombstone_horizon: int,
                  result: CompactionResult) -> list:
    base = h.base_offset
    lat = h.timestamp_type == 1
    kept = []
    for rec in recs:
        key = rec[2]
        if key is None or last_offset.get(key) != base + rec[0]:
            continue
        if rec[3] is None:
            ts = h.max_timestamp if lat else h.first_timestamp + rec[1]
            if ts < tombstone_horizon:
                result.tombstones_removed += 1
                continue
        kept.append(rec)
    return kept


class _CleanedWriter:
    """Streams a segment's cleaned copy; nothing is written until the first change.

    The unchanged prefix is then copied inside the kernel (``os.copy_file_range``), so a
    segment that loses nothing costs no writes at all.
    """

    def __init__(self, seg: Segment) -> None:
        self.seg = seg
        self.path = seg.path.with_name(seg.path.name + CLEANED_SUFFIX)
        self.fd = -1

    def _open(self, prefix_end: int) -> None:
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            copied = 0
            while copied < prefix_end:
                try:
                    n = os.copy_file_range(self.seg.fd, self.fd, prefix_end - copied, copied)
                except OSError as exc:  # file systems without it: copy through user space
                    if exc.errno not in (errno.ENOSYS, errno.EXDEV, errno.EINVAL,
                                         errno.EOPNOTSUPP):
                        raise
                    n = 0
                if n == 0:
                    chunk = self.seg.pread(min(_COPY_CHUNK, prefix_end - copied), copied)
                    if not chunk:
                        raise OSError(errno.EIO, f"short read from {self.seg.path.name}")
                    self._write(chunk)
                    n = len(chunk)
                copied += n
        except OSError as exc:
            raise StorageError(f"cannot write {self.path.name}", exc) from exc

    def keep(self, pos: int, raw: bytes) -> None:
        if self.fd >= 0:
            self._write(raw)

    def replace(self, pos: int, data: bytes) -> None:
        if self.fd < 0:
            self._open(pos)
        if data:
            self._write(data)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as exc:
            raise StorageError(f"cannot write {self.path.name}", exc) from exc

    def finish(self):
        """Path of the fsynced cleaned file, or None if the segment is unchanged."""
        if self.fd < 0:
            return None
        try:
            os.fsync(self.fd)
        except OSError as exc:
            raise StorageError(f"cannot fsync {self.path.name}", exc) from exc
        os.close(self.fd)
        self.fd = -1
        return self.path

    def abort(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.path.unlink(missing_ok=True)
