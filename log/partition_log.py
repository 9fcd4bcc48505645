"""PartitionLog: the storage of one partition replica.

Theory of operation
-------------------
A directory of segments (``log/segment.py``) sorted by base offset; the last one is *active*
and takes appends, the others are immutable (except for truncation and compaction swaps).
``bisect`` over the base offsets finds the segment for an offset.

Write path (leader, ``append``): the payload is never copied nor modified.  Each batch header
is parsed and its CRC checked on the caller's bytes (records are never decoded, except the key
check on compacted topics), the producer state is checked, then a 61-byte copy of the header
gets ``base_offset`` and the leader epoch stamped (outside the CRC).  LogAppendTime topics also
get ``max_timestamp`` and the timestamp-type bit stamped in that copy, which lie inside the CRC
range, so the CRC is recomputed as crc32c(rest, crc32c(header tail)) — one pass, no copy.  The
payload is written as header copy + rest of each batch with one ``os.writev`` per segment-sized
run (``Segment.writev``) to the active segment (rolled first if it is full or old).  The caller
may reuse its buffer as soon as ``append`` returns.  Followers (``append_as_follower``) keep
the leader's offsets and epochs and write the fetched bytes as they are (one ``os.write``).

Batches larger than ``segment.bytes`` (as Kafka): the only per-batch limit is
``max.message.bytes``, checked by the leader's ``append`` before anything is written
(``RecordTooLargeError`` → MESSAGE_TOO_LARGE).  A bigger-than-a-segment batch makes the active
segment roll first unless it is empty, is written alone into the fresh segment — which then
exceeds ``segment.bytes`` — and the next append rolls again (``Segment.roll_reason``).
Followers accept such batches as they are (no size limit: the leader already accepted them,
refusing would make the replicas diverge).  Nothing else assumes a segment is at most
``segment.bytes``: index positions stay below it (a batch starts in a segment only while the
segment is smaller than ``segment.bytes``), recovery scans batches of any size, retention
counts real sizes and compaction never merges segments.

Read path (``read``, ``aborted_transactions``): ``log/log_reader.py``.

Durability (``flush``): ``fdatasync`` of every segment written since the last flush, the
directory when files were created, then ``recovery_point`` advances to the log end offset seen
before the fsync.  ``start_writeback`` (``log/writeback.py``; the broker calls it after each
leader append under flush policy ``batch``) submits a large unflushed tail to the disk without
waiting, so the group commit's fsync mostly waits instead of writing.  ``flush`` may run in a
worker thread while the owner thread appends:
``_lock`` guards the segment list and the published sizes (held for microseconds, never across
a syscall that waits for the disk); ``_flush_lock`` serialises flushes with the rare operations
that close file descriptors (truncation, retention, compaction swaps, close).  Every other
method belongs to the one owner thread (the broker's trio thread).

Transactions (docs/transactions.md): ``append(from_coordinator=True)`` is the only way in for
control batches (markers).  Producer state (``log/producer_state.py``) tracks each producer's
open transaction; a marker closing one returns a ``CompletedTxn`` and, for an ABORT, an entry is
appended to the ``.txnindex`` of the segment holding the marker (``log/txn_index.py``) once
the batches are written — leader and follower alike.  ``first_unstable_offset`` and
``collect_aborted`` serve the broker's last stable offset and read_committed fetches.
Truncation and recovery re-derive state and index together (``recovery.rebuild_producer_state``);
retention (``log/retention.py``) and compaction stop at the first unstable offset.

The recovery point is checkpointed (``recovery-point-checkpoint``) when it moves into another
segment, on truncation and on close; an unclean open validates every batch from the start of
the segment that holds it (``log/recovery.py``).  ``close`` leaves a ``.clean_shutdown`` marker.

Full disk / I/O errors (docs/durability.md, "Disk full"): an append is all or nothing — a
failed write is cut back off the segment file (``Segment.write``), and a payload that failed
after earlier chunks of it were written to other segments is truncated back to the log end
offset it started from, so the log, its indexes, producer state and epochs are exactly as
before and the append can simply be retried once space is freed.  Checkpoint-type files
(recovery point, leader epochs, producer snapshots) are hints that recovery can rebuild: a
failed write is logged and retried later, never fails the operation that caused it.  A failed
``fdatasync`` is different (after a failed fsync the kernel may have dropped the dirty pages:
"fsyncgate"): the log goes *offline* — appends and reads raise ``StorageError`` — until the
broker restarts and recovery re-validates the unflushed tail.  ``close`` is best effort: it
always closes the files, and leaves the clean-shutdown marker only if everything was written.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from . import recovery, retention
from .batch import (
    HEADER_SIZE,
    BatchHeader,
    CorruptBatchError,
    control_coordinator_epoch,
    control_type,
    crc_ok,
    decode_raw_records,
    parse_header,
    stamp,
    stamp_log_append_time,
)
from .config import LogConfig
from .epoch_cache import CHECKPOINT_NAME, LeaderEpochCache
from .errors import (
    InvalidRecordError,
    LogError,
    RecordTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from .index import fsync_dir, write_file_atomic
from .log_reader import FetchSlice, LogReader
from .producer_state import CompletedTxn, ProducerStateManager, wall_clock_ms
from .segment import Segment
from .txn_index import AbortedTxn
from .writeback import start_writeback

__all__ = ["PartitionLog", "AppendInfo", "FetchSlice", "CLEAN_SHUTDOWN_FILE",
           "RECOVERY_POINT_FILE"]

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
RECOVERY_POINT_FILE = "recovery-point-checkpoint"
# start_writeback leaves smaller unflushed tails to the fsync: for a small append the syscall
# would cost more than the writes it starts early (a single-record acks=all produce)
WRITEBACK_MIN_BYTES = 64 * 1024
logger = logging.getLogger("rafka.log")


class AppendInfo(NamedTuple):
    base_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    duplicate: bool = False  # an idempotent retry: offsets are those of the original


class PartitionLog(LogReader):
    """See the module docstring.  Create with ``PartitionLog.open``."""

    def __init__(self, directory: Path, config: LogConfig, now_ms: Callable[[], int]) -> None:
        self.directory = directory
        self.config = config
        self._now_ms = now_ms
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._recovery_point = 0
        self._checkpointed_base = -1  # base offset of the segment holding the checkpointed rp
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._dir_dirty = False
        self._closed = False
        self._offline: StorageError | None = None
        self._pending_deletes: deque[tuple[int, list[Path]]] = deque()
        self.fsync_count = 0  # flushes that issued fsyncs (statistics, group-commit tests)
        # (segment, size) at the last start_writeback: what the disk is already writing
        self.writeback_count = 0  # start_writeback calls that started one (statistics, tests)
        self._writeback: tuple[Segment | None, int] = (None, 0)
        self.epochs = LeaderEpochCache(directory / CHECKPOINT_NAME, lambda: self.log_end_offset)
        self.producer_state = ProducerStateManager(directory, clock=now_ms)

    @classmethod
    def open(cls, directory: Path, config: LogConfig, *,
             now_ms: Callable[[], int] | None = None) -> PartitionLog:
        """Open (creating if needed) and recover the log in ``directory``."""
        directory = Path(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create {directory}", exc) from exc
        log = cls(directory, config, now_ms or wall_clock_ms)
        recovery.recover(log)
        return log

    # -- properties ---------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def offline(self) -> StorageError | None:
        """The I/O error that took this log offline until restart (a failed fsync), or None."""
        return self._offline

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> Segment:
        return self._segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def statistics(self) -> dict[str, int]:
        return {"segments": len(self._segments), "size_bytes": self.size_bytes,
                "log_start_offset": self._log_start_offset,
                "log_end_offset": self.log_end_offset, "recovery_point": self._recovery_point,
                "fsyncs": self.fsync_count, "writebacks": self.writeback_count,
                "producers": len(self.producer_state)}

    def _check_usable(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.directory} is closed")
        if self._offline is not None:
            raise StorageError(f"log {self.directory} is offline after an I/O error",
                               self._offline.os_error)

    # -- append -------------------------------------------------------------------------------

    def append(self, batch: bytes | bytearray | memoryview, leader_epoch: int, *,
               from_coordinator: bool = False) -> AppendInfo:
        """Append a produce payload (one or more batches) as the leader.

        ``from_coordinator``: written by a coordinator of this broker, not a client — only then
        are control batches (transaction markers) and transactional batches without a
        sequence (transactional offset commits) accepted."""
        self._check_usable()
        buf = batch if isinstance(batch, memoryview) else memoryview(batch)
        n = len(buf)
        if n == 0:
            raise InvalidRecordError("empty produce payload")
        cfg = self.config
        now = self._now_ms()
        log_append_time = cfg.log_append_time
        offset = self.log_end_offset
        metas: list[tuple[int, int, int, int, int]] = []
        heads: list[bytearray] = []
        overlay = None
        state = self.producer_state
        completed: list[CompletedTxn] = []
        max_ts = -1
        pos = 0
        while pos < n:
            h = parse_header(buf, pos)
            size = h.size
            if pos + size > n:
                raise CorruptBatchError(f"truncated batch: {n - pos} of {size} bytes")
            # max.message.bytes is the only per-batch limit (checked before anything is
            # written, so MESSAGE_TOO_LARGE never consumes offsets or sequences); a batch
            # larger than segment.bytes is accepted and goes alone into a fresh segment
            if size > cfg.max_message_bytes:
                raise RecordTooLargeError(size, cfg.max_message_bytes)
            if not crc_ok(buf, pos):
                raise CorruptBatchError(f"CRC mismatch in batch {len(metas)} of the payload")
            if h.record_count == 0 or h.record_count != h.last_offset_delta + 1:
                raise InvalidRecordError(f"batch has {h.record_count} records but last offset "
                                         f"delta {h.last_offset_delta}")
            if cfg.compact:
                self._check_keys(buf, pos, h)
            ts = now if log_append_time else h.max_timestamp
            if h.producer_id >= 0 or h.is_transactional or h.is_control:
                if overlay is None:
                    overlay = state.begin()
                cepoch = control_coordinator_epoch(buf, pos) if h.is_control else -1
                dup = state.check(h, overlay, from_coordinator=from_coordinator,
                                  coordinator_epoch=cepoch)
                if dup is not None:
                    return AppendInfo(dup.base_offset, dup.last_offset, dup.timestamp, -1, True)
                done = state.update(h, offset, overlay, timestamp=ts,
                                    marker_type=self._marker_type(buf, pos, h),
                                    coordinator_epoch=cepoch, now_ms=now)
                if done is not None:
                    completed.append(done)
            head = bytearray(buf[pos:pos + HEADER_SIZE])
            stamp(head, 0, offset, leader_epoch)
            if log_append_time:
                stamp_log_append_time(head, 0, now, buf[pos + HEADER_SIZE:pos + size])
            heads.append(head)
            nxt = offset + h.last_offset_delta + 1
            metas.append((pos, offset, nxt, size, ts))
            max_ts = max(max_ts, ts)
            offset = nxt
            pos += size
        base = metas[0][1]
        self._write(buf, metas, now, heads)
        if overlay:
            state.commit(overlay)
        self._index_aborted(completed)
        latest = self.epochs.latest_epoch
        if latest is None or leader_epoch > latest:
            self.epochs.assign(leader_epoch, base)  # a failed checkpoint never fails it
        return AppendInfo(base, offset - 1, max_ts, now if log_append_time else -1)

    @staticmethod
    def _marker_type(buf: memoryview, pos: int, h: BatchHeader) -> int | None:
        if not h.is_control:
            return None
        if h.record_count != 1:
            raise InvalidRecordError(f"control batch at offset {h.base_offset} has "
                                     f"{h.record_count} records (a marker has one)")
        try:
            return control_type(buf, pos)
        except CorruptBatchError as exc:
            raise InvalidRecordError(str(exc)) from exc

    def _index_aborted(self, completed: list[CompletedTxn]) -> None:
        """Write the aborted-transaction index entries of markers just appended (each into the
        segment holding its marker).  A failed write takes the log offline: the marker is in
        the log but the index would miss it; recovery rebuilds it on restart."""
        for c in completed:
            if not c.aborted:
                continue
            seg = self._segments[self._segment_index(c.last_offset)]
            try:
                seg.txn_index.append(AbortedTxn(c.producer_id, c.first_offset, c.last_offset,
                                                c.last_stable_offset))
            except StorageError as exc:
                self._offline = exc
                logger.error("%s: %s; the log is offline until restart", self.directory, exc)
                raise

    @staticmethod
    def _check_keys(buf: bytearray, pos: int, h: BatchHeader) -> None:
        for rec in decode_raw_records(buf, pos, h):
            if rec[2] is None:
                raise InvalidRecordError("compacted topics require a key on every record")

    def append_as_follower(self, batches: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches fetched from the leader, keeping their offsets and epochs."""
        self._check_usable()
        buf = memoryview(batches)
        n = len(buf)
        if n == 0:
            raise InvalidRecordError("empty follower append")
        expected = self.log_end_offset
        metas: list[tuple[int, int, int, int, int]] = []
        headers: list[BatchHeader] = []
        types: list[int | None] = []
        pos = 0
        while pos < n:
            h = parse_header(buf, pos)
            if pos + h.size > n:
                raise CorruptBatchError(f"truncated batch: {n - pos} of {h.size} bytes")
            if not crc_ok(buf, pos):
                raise CorruptBatchError(f"CRC mismatch in batch at offset {h.base_offset}")
            if h.base_offset < expected:
                raise UnexpectedAppendOffsetError(expected, h.base_offset)
            metas.append((pos, h.base_offset, h.next_offset, h.size, h.max_timestamp))
            headers.append(h)
            # the leader accepted it: an unreadable marker here is damage in transit
            types.append((control_type(buf, pos), control_coordinator_epoch(buf, pos))
                         if h.is_control else (None, -1))
            expected = h.next_offset
            pos += h.size
        now = self._now_ms()
        self._write(buf, metas, now)
        # The batches are in the log now, so the producer state is updated in place, with no
        # overlay of copied entries to commit (the leader's append needs one: its checks come
        # before the write, which may still fail): no entry copy per batch on a follower.
        state = self.producer_state
        completed: list[CompletedTxn] = []
        for h, (mtype, cepoch) in zip(headers, types, strict=True):
            done = state.update(h, h.base_offset, marker_type=mtype, coordinator_epoch=cepoch,
                                now_ms=now)
            if done is not None:
                completed.append(done)
            if h.partition_leader_epoch >= 0:
                self.epochs.assign(h.partition_leader_epoch, h.base_offset)
        state.trim()
        self._index_aborted(completed)
        return AppendInfo(headers[0].base_offset, headers[-1].last_offset,
                          max(h.max_timestamp for h in headers), -1)

    def _write(self, buf: bytes | bytearray | memoryview,
               metas: list[tuple[int, int, int, int, int]], now: int,
               heads: list[bytearray] | None = None) -> None:
        """Write batches, rolling segments as needed (several chunks if big).

        ``heads``: stamped copies of each batch's header, written in place of the first
        ``HEADER_SIZE`` bytes of that batch in ``buf`` (leader appends); None: ``buf`` as is."""
        seg_bytes = self.config.segment_bytes
        start_leo = self.log_end_offset
        i = 0
        while i < len(metas):
            # The largest run of batches that fits a segment (at least one batch: one larger
            # than segment.bytes goes alone, into a fresh segment unless the active one is
            # empty, and the next chunk or append rolls again).
            j, start = i + 1, metas[i][0]
            while j < len(metas) and metas[j][0] + metas[j][3] - start <= seg_bytes:
                j += 1
            end = metas[j - 1][0] + metas[j - 1][3]
            chunk = [(p - start, b, nx, s, t) for p, b, nx, s, t in metas[i:j]]
            # A roll in the middle of a payload must not snapshot producer state: the
            # earlier chunks' batches are not committed to it yet (open rescans instead).
            seg = self._maybe_roll(end - start, metas[i][1], metas[j - 1][2] - 1, now,
                                   snapshot=i == 0)
            try:
                if heads is None:
                    pos = seg.write(memoryview(buf)[start:end])
                else:
                    parts: list[bytearray | memoryview] = []
                    for k in range(i, j):
                        p, size = metas[k][0], metas[k][3]
                        parts.append(heads[k])
                        parts.append(buf[p + HEADER_SIZE:p + size])
                    pos = seg.writev(parts, end - start)
            except StorageError as exc:
                if "torn write" in str(exc):
                    self._offline = exc
                elif i > 0:
                    # earlier chunks of this payload went to earlier segments: take them
                    # back, the append is all or nothing (nothing of it was acknowledged)
                    self._roll_back_append(start_leo, exc)
                raise
            with self._lock:
                seg.record_appended(pos, end - start, chunk, now)
            i = j

    def _roll_back_append(self, start_leo: int, exc: StorageError) -> None:
        logger.warning("%s: append failed after %d record(s) of it were written (%s); "
                       "truncating back to %d", self.directory,
                       self.log_end_offset - start_leo, exc, start_leo)
        try:
            self.truncate_to(start_leo)
        except (LogError, OSError) as exc2:
            self._offline = exc2 if isinstance(exc2, StorageError) else StorageError(
                f"cannot roll back a failed append in {self.directory}", exc2)
            logger.error("%s: %s; the log is offline until restart", self.directory, exc2)

    def _maybe_roll(self, incoming: int, first_offset: int, last_offset: int,
                    now: int, *, snapshot: bool = True) -> Segment:
        seg = self._segments[-1]
        reason = seg.roll_reason(incoming, last_offset, now)
        if reason is None:
            return seg
        new = Segment.create(self.directory, first_offset, self.config, now)
        with self._lock:
            self._segments.append(new)
            self._bases.append(first_offset)
            self._dir_dirty = True
        logger.debug("%s: rolled segment %d -> %d (%s)", self.directory, seg.base_offset,
                     first_offset, reason)
        try:
            if snapshot:
                self.producer_state.write_snapshot(first_offset)
        except OSError as exc:
            logger.warning("%s: cannot write producer snapshot: %s", self.directory, exc)
        return new

    def roll(self) -> None:
        """Force a roll of a non-empty active segment (tests, compaction of everything)."""
        seg = self._segments[-1]
        if seg.size:
            with self._lock:
                new = Segment.create(self.directory, seg.next_offset, self.config,
                                     self._now_ms())
                self._segments.append(new)
                self._bases.append(new.base_offset)
                self._dir_dirty = True
            try:
                self.producer_state.write_snapshot(new.base_offset)
            except OSError as exc:
                logger.warning("%s: cannot write producer snapshot: %s", self.directory, exc)

    # -- durability ---------------------------------------------------------------------------

    def start_writeback(self, min_bytes: int = WRITEBACK_MIN_BYTES) -> bool:
        """Submit the active segment's unflushed bytes for writeback without waiting
        (``log/writeback.py``), once at least ``min_bytes`` were appended since the last flush or
        writeback, so that the next ``flush`` mostly waits instead of writing. Owner thread;
        True if it was started."""
        seg = self._segments[-1]
        done = seg.flushed_size
        if self._writeback[0] is seg:
            done = max(done, self._writeback[1])
        if seg.size - done < min_bytes or not start_writeback(seg.fd):
            return False
        self._writeback = (seg, seg.size)
        self.writeback_count += 1
        return True

    def flush(self) -> int:
        """fsync everything appended so far; returns the new recovery point.  Thread-safe."""
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return self._recovery_point
                target = self.log_end_offset
                work = [(s, s.size) for s in self._segments if s.size > s.flushed_size]
                index_work = [s for s in self._segments[:-1] if s.index_dirty]
                txn_work = [s.txn_index for s in self._segments if s.txn_index.dirty]
                for t in txn_work:
                    t.dirty = False
                dir_dirty, self._dir_dirty = self._dir_dirty, False
            try:
                for seg, _size in work:
                    os.fdatasync(seg.fd)
                for t in txn_work:
                    t.sync()
                if dir_dirty:
                    self._fsync_dir()
            except OSError as exc:
                # after a failed fsync the page cache may have dropped the unflushed pages
                # (fsyncgate): a retry could "succeed" without them.  Offline until restart.
                self._dir_dirty = self._dir_dirty or dir_dirty
                for t in txn_work:
                    t.dirty = True
                err = StorageError(f"flush of {self.directory} failed", exc)
                self._offline = err
                logger.error("%s: %s; the log is offline until the broker restarts",
                             self.directory, err)
                raise err from exc
            for seg in index_work:
                try:
                    seg.persist_indexes(fsync=True)
                except StorageError as exc:  # accelerators, rebuilt by recovery: retried
                    logger.warning("%s: %s (retried on the next flush)", self.directory, exc)
            if self.epochs.dirty:
                try:
                    self.epochs.persist()
                except StorageError as exc:
                    logger.warning("%s: %s (retried on the next flush)", self.directory, exc)
            with self._lock:
                for seg, size in work:
                    seg.flushed_size = max(seg.flushed_size, size)
                if target > self._recovery_point:
                    self._recovery_point = target
                if work or dir_dirty:
                    self.fsync_count += 1
                rp = self._recovery_point
                seg_base = self._bases[self._segment_index(rp)]
            if seg_base != self._checkpointed_base:
                self._try_write_recovery_checkpoint(rp, seg_base)
            return rp

    def _fsync_dir(self) -> None:
        fsync_dir(self.directory)

    def _write_recovery_checkpoint(self, rp: int, seg_base: int | None = None) -> None:
        try:
            write_file_atomic(self.directory / RECOVERY_POINT_FILE, f"{rp}\n".encode(), fsync=True)
        except OSError as exc:
            raise StorageError("cannot write the recovery point checkpoint", exc) from exc
        self._checkpointed_base = seg_base if seg_base is not None else -1

    def _try_write_recovery_checkpoint(self, rp: int, seg_base: int | None = None) -> bool:
        """The recovery point checkpoint only bounds how much recovery re-validates: a failed
        write (disk full) is logged and retried by the next flush, never fails the caller."""
        try:
            self._write_recovery_checkpoint(rp, seg_base)
            return True
        except StorageError as exc:
            self._checkpointed_base = -2  # makes the next flush write it again
            logger.warning("%s: %s (retried on the next flush)", self.directory, exc)
            return False

    def close(self) -> None:
        """Flush, persist indexes and producer state, and leave the clean-shutdown marker."""
        if self._closed:
            return
        failure: BaseException | None = None
        if self._offline is None:
            try:
                self.flush()
            except StorageError as exc:
                failure = exc
        with self._flush_lock, self._lock:
            clean = self._offline is None and failure is None
            try:
                if clean:
                    self.epochs.persist()
                    for seg in self._segments:
                        if seg.index_dirty:
                            seg.persist_indexes(fsync=True)
                    self.producer_state.write_snapshot(self.log_end_offset, fsync=True)
                    self._write_recovery_checkpoint(self._recovery_point)
            except (LogError, OSError) as exc:
                # best effort: no clean-shutdown marker, so the next open recovers (rebuilds
                # indexes, epochs and producer state from the segments, which are intact)
                clean = False
                failure = exc
            finally:
                for seg in self._segments:
                    seg.close()
                self._purge_deleted(None)
                self._closed = True
            if clean:
                try:
                    write_file_atomic(self.directory / CLEAN_SHUTDOWN_FILE, b"", fsync=True)
                    self._fsync_dir()
                except OSError as exc:
                    failure = exc
        if failure is not None:
            logger.warning("%s: closed without a clean-shutdown marker (%s); the next open "
                           "recovers it", self.directory, failure)

    def _crash(self) -> None:
        """Tests only: drop everything on the floor like a killed process."""
        for seg in self._segments:
            seg.close()
        self._closed = True

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- truncation ---------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after ``offset`` (follower divergence); fsynced."""
        self._check_usable()
        if offset >= self.log_end_offset:
            return
        if offset <= self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        with self._flush_lock:
            with self._lock:
                keep = self._segment_index(offset - 1) + 1
                doomed = self._segments[keep:]
                del self._segments[keep:]
                del self._bases[keep:]
                for seg in doomed:
                    seg.delete_files()
                active = self._segments[-1]
                active.truncate_to_offset(offset)
                active.index_dirty = True
                os.fdatasync(active.fd)
                self._fsync_dir()
                self._recovery_point = min(self._recovery_point, self.log_end_offset)
            self._try_write_recovery_checkpoint(self._recovery_point)
        leo = self.log_end_offset
        if self._log_start_offset > leo:  # truncated below a deleted-records start
            self._log_start_offset = leo
            retention.write_log_start(self, leo)
        logger.info("%s: truncated to offset %d (log end offset now %d)", self.directory,
                    offset, leo)
        self.epochs.truncate_from_end(leo)
        self.producer_state.delete_snapshots_above(leo)
        recovery.rebuild_producer_state(self)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and start an empty log at ``offset``."""
        self._check_usable()
        with self._flush_lock:
            with self._lock:
                for seg in self._segments:
                    seg.delete_files()
                new = Segment.create(self.directory, offset, self.config, self._now_ms())
                self._segments = [new]
                self._bases = [offset]
                self._log_start_offset = offset
                self._recovery_point = offset
                self._fsync_dir()
            retention.write_log_start(self, None)  # the new first segment's base rules
            self._try_write_recovery_checkpoint(offset)
        logger.info("%s: truncated fully, log now starts at %d", self.directory, offset)
        self.epochs.clear()
        self.producer_state.clear()
        self.producer_state.delete_snapshots_above(-1)

    # -- retention (log/retention.py) ---------------------------------------------------------

    def enforce_retention(self, now_ms: int | None = None) -> list[int]:
        """Delete old segments by retention.ms / retention.bytes; returns their base offsets.

        Never moves the log start past the first unstable offset."""
        return retention.enforce_retention(self, now_ms)

    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: the log now starts at ``offset`` (at most the log end; never
        moves back); whole segments below it are deleted. Returns the new log start offset."""
        return retention.advance_log_start(self, offset)

    def _purge_deleted(self, now: int | None) -> None:
        retention.purge_deleted(self, now)

    # -- compaction support (log/compaction.py) -----------------------------------------------

    def _swap_segment(self, old: Segment, cleaned_path: Path) -> Segment:
        """Atomically replace ``old``'s file by ``cleaned_path`` (fsynced by the caller)."""
        with self._flush_lock:
            for p in (old.offset_index.path, old.time_index.path):
                p.unlink(missing_ok=True)
            self._fsync_dir()
            os.replace(cleaned_path, old.path)
            self._fsync_dir()
            new = Segment.open_existing(old.path, self.config)
            res = new.scan(validate=False)
            if res.problem is not None:  # we just wrote and fsynced it
                raise LogError(f"cleaned segment {old.path} is unreadable: {res.problem}")
            new.roll_base_ms = old.roll_base_ms
            new.next_offset = old.next_offset  # keeps its offset range even if emptied
            new.txn_index = old.txn_index  # markers are kept, so are their entries
            new.persist_indexes(fsync=True)
            with self._lock:
                i = self._segments.index(old)
                self._segments[i] = new
            old.close()
        return new
