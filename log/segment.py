"""One log segment: ``<base_offset:020d>.log`` plus its indexes.

Besides the offset and time indexes (accelerators) a segment owns its aborted-transaction index
``txn_index`` (``log/txn_index.py``: state, not an accelerator — created with the segment,
truncated with it, deleted with it; ``PartitionLog`` appends to it and recovery rebuilds it).

Theory of operation: a segment is an append-only file of whole record batches opened once
``O_RDWR | O_APPEND``; appends are one ``os.write`` per payload (``write``; follower appends)
or one ``os.writev`` of stamped header copies and the caller's batch bodies (``writev``; leader
appends, no copy of the payload), then ``record_appended`` publishes size, end offset and index
entries (a short write is continued; an error — ENOSPC — truncates the file back to its
previous size, so a failed append leaves no trace).  Reads use ``os.pread`` on the same descriptor; fetches hand out ``os.dup`` copies so a
reader survives the segment being deleted or replaced.

A segment holds at most ``segment.bytes`` except when its only batch is bigger than that
(``roll_reason``: an empty segment takes any batch): every batch starts below ``segment.bytes``,
so index positions fit, and ``scan`` reads a batch bigger than its chunk in one piece.

Sizes and offsets kept in memory: ``size`` (bytes of whole batches), ``next_offset`` (last
offset + 1 of the last batch, ``base_offset`` when empty), ``max_timestamp`` and the offset of
the batch that reached it (retention, time index), ``flushed_size`` (what ``fdatasync`` last
covered) and ``index_dirty`` (indexes changed since persisted; see ``log/index.py``).

``scan`` walks the file batch by batch in 4 MiB reads, optionally checking every CRC, rebuilds
the indexes as it goes and stops at the first bad or partial batch, reporting where: recovery
and index rebuilds share it.  ``find_batch`` is the read path's seek: index lookup, then batch
headers read one by one (at most ``index.interval.bytes`` plus one batch away) — except in the
segment's tail, where a dense in-memory list of (base offset, position) of every batch since the
last offset-index entry (``tail_offsets``/``tail_positions``, rebuilt by ``scan``, cleared with
the indexes) finds the batch with one header read: a caught-up follower or consumer fetches there
on every request, and the header scan was ~20 ``pread`` calls per produce on the leader.  Damage met on
the read path becomes ``CorruptSegmentError`` naming ``[first bad offset, next good offset)``,
the next good offset found by probing later offset-index entries (``resync``).

Thread safety: none of its own; ``PartitionLog`` serialises structural changes and lets
``flush()`` (``fdatasync``) run from another thread.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .batch import HEADER_SIZE, BatchHeader, CorruptBatchError, crc_ok, parse_header
from .config import LogConfig
from .errors import CorruptSegmentError, StorageError
from .index import OffsetIndex, TimeIndex
from .txn_index import TXN_INDEX_SUFFIX, TxnIndex

__all__ = ["Segment", "ScanResult", "segment_file_name", "LOG_SUFFIX"]

LOG_SUFFIX = ".log"
_SCAN_CHUNK = 4 * 1024 * 1024
try:
    _IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX"))
except (ValueError, OSError):  # pragma: no cover
    _IOV_MAX = 16
_MAX_RELATIVE_OFFSET = 2**31 - 1
logger = logging.getLogger("rafka.log")


def segment_file_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(slots=True)
class ScanResult:
    """Outcome of ``Segment.scan``: the whole batches found and the first problem, if any."""

    valid_size: int  # bytes of good batches from the start of the file
    next_offset: int  # last good offset + 1 (the base offset when none)
    batches: int
    problem: str | None  # why the scan stopped before the end of the file
    file_size: int
    # whole batches kept in place despite a CRC mismatch (``keep_bad_crc``):
    # (first offset, next offset, position)
    damaged: list[tuple[int, int, int]] = field(default_factory=list)


class Segment:
    __slots__ = ("directory", "base_offset", "config", "path", "fd", "size", "next_offset",
                 "max_timestamp", "offset_of_max_timestamp", "offset_index", "time_index",
                 "bytes_since_index", "roll_base_ms", "flushed_size", "index_dirty", "batches",
                 "txn_index", "tail_offsets", "tail_positions")

    def __init__(self, directory: Path, base_offset: int, config: LogConfig, fd: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.path = directory / segment_file_name(base_offset)
        self.fd = fd
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        entries = config.segment_index_bytes // 8
        self.offset_index = OffsetIndex(directory / segment_file_name(base_offset, ".index"),
                                        base_offset, entries)
        self.time_index = TimeIndex(directory / segment_file_name(base_offset, ".timeindex"),
                                    base_offset, config.segment_index_bytes // 12)
        self.txn_index = TxnIndex(directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX),
                                  base_offset)
        self.bytes_since_index = 0
        self.roll_base_ms = -1
        self.flushed_size = 0
        self.index_dirty = True
        self.batches = 0  # batches appended/scanned in this process (statistics only)
        # dense tail index (memory only): base offset and position of every batch indexed since
        # the last offset-index entry, so ``find_batch`` seeks the tail without a header scan
        self.tail_offsets: list[int] = []
        self.tail_positions: list[int] = []

    # -- life cycle -----------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, config: LogConfig,
               now_ms: int) -> Segment:
        """A new, empty segment (replaces leftover files of the same name)."""
        path = directory / segment_file_name(base_offset)
        for suffix in (".index", ".timeindex"):
            path.with_suffix(suffix).unlink(missing_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create segment {path}", exc) from exc
        seg = cls(directory, base_offset, config, fd)
        seg.roll_base_ms = now_ms
        try:
            seg.txn_index.create()
        except StorageError:
            seg.delete_files()
            raise
        return seg

    @classmethod
    def open_existing(cls, path: Path, config: LogConfig) -> Segment:
        """Open a segment file; call ``load_indexes`` or ``scan`` next."""
        base_offset = int(path.name[:20])
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
        except OSError as exc:
            raise StorageError(f"cannot open segment {path}", exc) from exc
        seg = cls(path.parent, base_offset, config, fd)
        seg.size = seg.flushed_size = os.fstat(fd).st_size
        return seg

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.txn_index.close()

    @property
    def file_paths(self) -> tuple[Path, ...]:
        """The segment file and every index file of it."""
        return (self.path, self.offset_index.path, self.time_index.path, self.txn_index.path)

    def delete_files(self) -> None:
        """Close and unlink the segment and its indexes."""
        self.close()
        for p in self.file_paths:
            p.unlink(missing_ok=True)

    # -- append ---------------------------------------------------------------------------

    def roll_reason(self, incoming_bytes: int, last_offset: int, now_ms: int) -> str | None:
        """Why the segment must roll before taking a payload, or None.

        An empty segment takes anything, even a batch larger than ``segment.bytes`` (it then
        exceeds ``segment.bytes`` and rolls on the next append, as in Kafka)."""
        if self.size == 0:
            return None
        cfg = self.config
        if self.size + incoming_bytes > cfg.segment_bytes:
            return "size"
        if self.roll_base_ms >= 0 and now_ms - self.roll_base_ms >= cfg.segment_ms:
            return "age"
        if self.offset_index.is_full:
            return "index full"
        if last_offset - self.base_offset > _MAX_RELATIVE_OFFSET:
            return "relative offset overflow"
        return None

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data`` to the file; returns its position.  All or nothing.

        Call ``record_appended`` afterwards (under the log's lock) to publish it.
        """
        start = self.size
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as exc:
            self._undo_partial_write(start)
            raise StorageError(f"append to {self.path.name} failed", exc) from exc
        finally:
            view.release()
        return start

    def writev(self, parts: list[bytearray | memoryview], length: int) -> int:
        """Append the concatenation of ``parts`` (``length`` bytes in all) with ``os.writev``;
        returns its position.  All or nothing, as ``write``."""
        start = self.size
        fd = self.fd
        try:
            i = 0
            while i < len(parts):
                batch = parts[i:i + _IOV_MAX]
                done = os.writev(fd, batch)
                # a short write: skip what went out, go on with the rest of the part it cut
                for part in batch:
                    n = len(part)
                    if done >= n:
                        done -= n
                        i += 1
                        continue
                    if done:
                        parts[i] = memoryview(part)[done:]
                    break
        except OSError as exc:
            self._undo_partial_write(start)
            raise StorageError(f"append to {self.path.name} failed", exc) from exc
        return start

    def record_appended(self, start: int, length: int,
                        batches: list[tuple[int, int, int, int, int]], now_ms: int) -> None:
        """Index written batches: (rel_pos, base_offset, next_offset, size, max_timestamp)."""
        if start == 0 and self.roll_base_ms < 0:
            self.roll_base_ms = now_ms
        for rel, base, nxt, size, max_ts in batches:
            self._index_batch(start + rel, base, size, max_ts)
            self.next_offset = nxt
        self.size = start + length
        self.batches += len(batches)

    def _undo_partial_write(self, size: int) -> None:
        try:
            os.ftruncate(self.fd, size)
        except OSError as exc:  # pragma: no cover - nothing sane left to do
            logger.error("cannot truncate %s back to %d bytes after a failed write: %s",
                         self.path, size, exc)
            raise StorageError(f"{self.path.name} has a torn write", exc) from exc

    def _index_batch(self, position: int, base_offset: int, size: int, max_ts: int) -> None:
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self.offset_of_max_timestamp = base_offset
        idx = self.offset_index
        if self.bytes_since_index >= self.config.index_interval_bytes and (
                not idx.positions or position > idx.positions[-1]):
            idx.append(base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_index = 0
            del self.tail_offsets[:]
            del self.tail_positions[:]
        tail = self.tail_offsets
        if not tail or base_offset > tail[-1]:
            tail.append(base_offset)
            self.tail_positions.append(position)
        self.bytes_since_index += size
        self.index_dirty = True

    # -- reads ----------------------------------------------------------------------------

    def pread(self, length: int, position: int) -> bytes:
        try:
            return os.pread(self.fd, length, position)
        except OSError as exc:
            raise StorageError(f"read from {self.path.name} failed", exc) from exc

    def find_batch(self, offset: int) -> tuple[int, BatchHeader, int] | None:
        """(position, header, previous next offset) of the first batch with last ≥ offset."""
        tail = self.tail_offsets
        if tail and offset >= tail[0]:  # the tail: straight to the batch, one header read
            i = bisect_right(tail, offset) - 1
            prev_next, pos = tail[i], self.tail_positions[i]
        else:
            prev_next, pos = self.offset_index.lookup(offset)
        if pos == 0:
            prev_next = self.base_offset
        while pos < self.size:
            buf = self.pread(HEADER_SIZE, pos)
            try:
                h = parse_header(buf)
            except CorruptBatchError as exc:
                raise self.damage(prev_next, pos, str(exc)) from None
            if h.base_offset < prev_next or pos + h.size > self.size:
                raise self.damage(prev_next, pos, "batch header out of place")
            if h.last_offset >= offset:
                return pos, h, prev_next
            prev_next = h.next_offset
            pos += h.size
        return None

    def damage(self, first_bad: int, position: int, reason: str) -> CorruptSegmentError:
        """Describe damage at ``position``; the next good offset comes from ``resync``."""
        return CorruptSegmentError(self.path, first_bad, self.resync(position), position, reason)

    def resync(self, bad_position: int) -> int:
        """First offset at which a CRC-valid batch is found again after ``bad_position``."""
        for off, pos in self.offset_index.entries_after(bad_position):
            buf = self.pread(HEADER_SIZE, pos)
            try:
                h = parse_header(buf)
            except CorruptBatchError:
                continue
            if h.base_offset == off and pos + h.size <= self.size and crc_ok(
                    self.pread(h.size, pos)):
                return off
        return self.next_offset

    def first_batch_header(self) -> BatchHeader | None:
        if self.size < HEADER_SIZE:
            return None
        try:
            return parse_header(self.pread(HEADER_SIZE, 0))
        except CorruptBatchError:
            return None

    # -- scanning, recovery, index rebuild --------------------------------------------------

    def reset_indexes(self) -> None:
        self.offset_index.clear()
        self.time_index.clear()
        del self.tail_offsets[:]
        del self.tail_positions[:]
        self.bytes_since_index = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.index_dirty = True

    def scan(self, *, validate: bool, start_position: int = 0, start_offset: int | None = None,
             on_batch: Callable[[BatchHeader], None] | None = None,
             keep_bad_crc: bool = False) -> ScanResult:
        """Walk the batches from ``start_position`` (indexing them) to the end of the file.

        From position 0 the indexes are rebuilt from scratch.  Sets ``size`` and
        ``next_offset`` to the end of the last good batch; never modifies the file (see
        ``truncate_to_position``).  ``validate`` checks every CRC.  ``keep_bad_crc`` (data
        known to have been fsynced: a clean start, or below the recovery point) walks over a
        whole, well-placed batch whose CRC fails instead of stopping there — bit rot in the
        middle, not a torn tail: it stays in place (the read path answers CORRUPT_MESSAGE for
        its range), is listed in ``ScanResult.damaged``, and the next batch gets an index
        entry so that the damaged range can be named precisely.
        """
        if start_position == 0:
            self.reset_indexes()
        file_size = os.fstat(self.fd).st_size
        pos = start_position
        prev_next = self.base_offset if start_offset is None else start_offset
        count = 0
        problem: str | None = None
        damaged: list[tuple[int, int, int]] = []
        while pos < file_size and problem is None:
            remaining = file_size - pos
            if remaining < HEADER_SIZE:
                problem = f"partial batch header ({remaining} trailing bytes)"
                break
            buf = self.pread(min(_SCAN_CHUNK, remaining), pos)
            p = 0
            while len(buf) - p >= HEADER_SIZE:
                try:
                    h = parse_header(buf, p)
                except CorruptBatchError as exc:
                    problem = str(exc)
                    break
                if h.base_offset < prev_next:
                    problem = f"offset {h.base_offset} goes backwards (expected >= {prev_next})"
                    break
                if pos + p + h.size > file_size:
                    problem = f"partial batch ({file_size - pos - p} of {h.size} bytes)"
                    break
                if p + h.size > len(buf):
                    if p == 0:  # a batch bigger than the chunk: read exactly it
                        buf = self.pread(h.size, pos)
                        continue
                    break
                bad = validate and not crc_ok(buf, p)
                if bad and not keep_bad_crc:
                    problem = f"CRC mismatch in batch at offset {h.base_offset}"
                    break
                if bad:
                    damaged.append((h.base_offset, h.next_offset, pos + p))
                    # its header's timestamps are not to be trusted: index it without them
                    self._index_batch(pos + p, h.base_offset, h.size, -1)
                    self.bytes_since_index = self.config.index_interval_bytes  # index the next
                    prev_next = h.next_offset
                    count += 1
                    p += h.size
                    continue
                self._index_batch(pos + p, h.base_offset, h.size, h.max_timestamp)
                if on_batch is not None:
                    on_batch(h)
                prev_next = h.next_offset
                count += 1
                p += h.size
            pos += p
            if p == 0 and problem is None:  # pragma: no cover - defensive
                problem = "no progress"
        self.size = pos
        self.next_offset = prev_next
        self.batches += count
        return ScanResult(pos, prev_next, count, problem, file_size, damaged)

    def load_indexes(self) -> bool:
        """Trust the index files (clean shutdown); sanity-check the tail; False → rescan."""
        if not self.offset_index.load(self.size):
            return False
        if not self.time_index.load(2**63 - 1):
            self.offset_index.clear()
            return False
        last_off, last_pos = self.offset_index.lookup(2**63 - 1)
        if self.time_index.timestamps:
            self.max_timestamp = self.time_index.timestamps[-1]
            self.offset_of_max_timestamp = self.time_index.offsets[-1]
        # Walk (and CRC-check) the batches after the last index entry: finds the end offset
        # and checks the last batch of the segment.
        size = self.size
        res = self.scan(validate=True, start_position=last_pos,
                        start_offset=last_off if last_pos else self.base_offset, keep_bad_crc=True)
        if res.problem is not None or res.valid_size != size:
            self.size = size
            return False
        log_damage(self, res)
        self.bytes_since_index = size - last_pos
        first = self.first_batch_header()
        self.roll_base_ms = first.max_timestamp if first is not None else -1
        self.index_dirty = False
        return True

    def truncate_to_position(self, position: int) -> None:
        """Cut the file at ``position`` (a batch boundary) and rebuild the indexes."""
        try:
            os.ftruncate(self.fd, position)
        except OSError as exc:
            raise StorageError(f"cannot truncate {self.path.name}", exc) from exc
        self.size = position
        self.flushed_size = min(self.flushed_size, position)
        self.scan(validate=False)

    def truncate_to_offset(self, offset: int) -> bool:
        """Remove every batch whose last offset ≥ ``offset``; True if anything was removed."""
        try:
            found = self.find_batch(offset)
        except CorruptSegmentError as exc:
            found = (exc.position, None, exc.start_offset)
        if found is None:
            return False
        self.truncate_to_position(found[0])
        self.txn_index.truncate(offset)
        return True

    # -- durability -------------------------------------------------------------------------

    def persist_indexes(self, *, fsync: bool) -> None:
        """Write both index files (with the final max-timestamp entry)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        try:
            self.offset_index.write(fsync=fsync)
            self.time_index.write(fsync=fsync)
        except OSError as exc:
            raise StorageError(f"cannot write indexes of {self.path.name}", exc) from exc
        self.index_dirty = False

    def __repr__(self) -> str:
        return (f"Segment(base={self.base_offset}, size={self.size}, next={self.next_offset}, "
                f"max_ts={self.max_timestamp})")


def log_damage(seg: Segment, res: ScanResult) -> None:
    """WARNING for each batch a scan kept in place despite a CRC mismatch."""
    for first, nxt, pos in res.damaged:
        logger.warning("%s: batch at offsets [%d, %d), byte %d, fails its CRC check: kept in place, "
                       "fetches of that range get CORRUPT_MESSAGE", seg.path, first, nxt, pos)
