"""Sparse offset index and time index of one segment.

Theory of operation: both indexes live in memory as ``array('q')`` columns (absolute values)
and are persisted as files only when the segment stops changing — by the first ``flush`` after
a roll (in the thread that calls ``flush``, fsynced), on close and after compaction — written to a temp
file and renamed into place.  The active segment's indexes exist only in memory until close.  They are pure accelerators: every
entry can be recomputed from the ``.log`` file (``Segment.rebuild_indexes``), and ``load``
refuses (returns False) a file that is not sane for the segment's current size, which makes the
caller rebuild.  Recovery rebuilds the indexes of every segment it validates, so an index file
is never trusted beyond the recovery point.

* ``.index``: ``(relative_offset: uint32, position: uint32)`` big-endian, 8 bytes per entry.
  An entry is added for a batch when at least ``index.interval.bytes`` were appended since the
  previous entry; the key is the batch's *base* offset, so "the largest entry ≤ target" always
  points at or before the batch that contains the target.
* ``.timeindex``: ``(timestamp: int64, relative_offset: uint32)``, 12 bytes per entry: the max
  timestamp seen so far in the segment and the base offset of the batch that reached it.  Added
  with the offset index entries (and once more at roll) when the max timestamp grew.

The number of entries is bounded by ``segment.index.bytes`` (``is_full``); a full index makes
the log roll its segment, as Kafka does.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

__all__ = ["OffsetIndex", "TimeIndex", "fsync_dir", "write_file_atomic"]

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


def fsync_dir(path: str | Path) -> None:
    """fsync a directory: makes a rename, create or unlink inside it durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomic(path: Path, data: bytes, *, fsync: bool, sync_dir: bool = False) -> None:
    """Write ``data`` to ``path`` via a temp file and rename (optionally fsynced; with
    ``sync_dir`` the rename itself is made durable by fsyncing the directory too).

    On failure (ENOSPC...) the temp file is removed and ``path`` is left untouched."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        # a full disk: leave the old file as it was and give the temp file's blocks back
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise
    if sync_dir:
        fsync_dir(path.parent)


class _Index:
    """What both indexes share: the file, the segment's base offset, the entry limit, and the
    file as a run of fixed-size ``_ENTRY`` records."""

    __slots__ = ("path", "base_offset", "max_entries")
    _ENTRY: ClassVar[struct.Struct]

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_entries)

    def to_bytes(self) -> bytes:
        raise NotImplementedError

    def write(self, *, fsync: bool = False) -> None:
        write_file_atomic(self.path, self.to_bytes(), fsync=fsync)

    def _read_entries(self) -> Iterator[tuple[int, int]] | None:
        """The file's entries, or None when it is missing or not a whole number of at most
        ``max_entries`` entries."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        count, rest = divmod(len(data), self._ENTRY.size)
        if rest or count > self.max_entries:
            return None
        return self._ENTRY.iter_unpack(data)


class OffsetIndex(_Index):
    """Offset → file position, sparse."""

    __slots__ = ("offsets", "positions")
    _ENTRY = _OFFSET_ENTRY

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, base_offset, max_entries)
        self.offsets = array("q")
        self.positions = array("q")

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def is_full(self) -> bool:
        return len(self.offsets) >= self.max_entries

    def append(self, offset: int, position: int) -> None:
        if self.offsets and (offset <= self.offsets[-1] or position <= self.positions[-1]):
            raise ValueError(f"index entries must grow: ({offset}, {position}) after "
                             f"({self.offsets[-1]}, {self.positions[-1]})")
        self.offsets.append(offset)
        self.positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """Largest entry with key ≤ ``offset``, or (base_offset, 0)."""
        i = bisect_right(self.offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.offsets[i], self.positions[i]

    def entries_after(self, position: int) -> list[tuple[int, int]]:
        """Entries whose position is > ``position`` (used to resync past damage)."""
        i = bisect_right(self.positions, position)
        return list(zip(self.offsets[i:], self.positions[i:], strict=True))

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or after ``position``."""
        i = bisect_left(self.positions, position)
        del self.offsets[i:]
        del self.positions[i:]

    def clear(self) -> None:
        del self.offsets[:]
        del self.positions[:]

    def to_bytes(self) -> bytes:
        base = self.base_offset
        return b"".join(_OFFSET_ENTRY.pack(o - base, p)
                        for o, p in zip(self.offsets, self.positions, strict=True))

    def load(self, log_size: int) -> bool:
        """Load the file if it is sane for a ``.log`` of ``log_size`` bytes."""
        entries = self._read_entries()
        if entries is None:
            return False
        offsets, positions = array("q"), array("q")
        last_o = last_p = -1
        for rel, pos in entries:
            if rel <= last_o or pos <= last_p or pos >= log_size:
                return False
            last_o, last_p = rel, pos
            offsets.append(self.base_offset + rel)
            positions.append(pos)
        self.offsets, self.positions = offsets, positions
        return True


class TimeIndex(_Index):
    """Max timestamp so far → base offset of the batch that reached it."""

    __slots__ = ("timestamps", "offsets")
    _ENTRY = _TIME_ENTRY

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, base_offset, max_entries)
        self.timestamps = array("q")
        self.offsets = array("q")

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if self.timestamps and (timestamp <= self.timestamps[-1] or offset < self.offsets[-1]):
            return
        if len(self.timestamps) >= self.max_entries:
            return
        self.timestamps.append(timestamp)
        self.offsets.append(offset)

    def lookup(self, timestamp: int) -> int:
        """Base offset from which to scan for the first record with ts ≥ ``timestamp``."""
        i = bisect_left(self.timestamps, timestamp) - 1
        return self.base_offset if i < 0 else self.offsets[i]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for batches at or after ``offset``."""
        i = bisect_left(self.offsets, offset)
        del self.timestamps[i:]
        del self.offsets[i:]

    def clear(self) -> None:
        del self.timestamps[:]
        del self.offsets[:]

    def to_bytes(self) -> bytes:
        base = self.base_offset
        return b"".join(_TIME_ENTRY.pack(t, o - base)
                        for t, o in zip(self.timestamps, self.offsets, strict=True))

    def load(self, next_offset: int) -> bool:
        """Load the file if it is sane for a segment ending before ``next_offset``."""
        entries = self._read_entries()
        if entries is None:
            return False
        timestamps, offsets = array("q"), array("q")
        last_t, last_o = -(2**63), -1
        for ts, rel in entries:
            o = self.base_offset + rel
            if ts <= last_t or rel < last_o or o >= max(next_offset, self.base_offset + 1):
                return False
            last_t, last_o = ts, rel
            timestamps.append(ts)
            offsets.append(o)
        self.timestamps, self.offsets = timestamps, offsets
        return True
