"""Aborted-transaction index of one segment: ``<base_offset:020d>.txnindex``.

Theory of operation: when an ABORT marker closes an open transaction, the partition log appends
an entry ``(producer_id, first_offset, last_offset, last_stable_offset)`` — four big-endian
int64, 32 bytes — to the index of the segment that holds the marker (``last_offset`` = the
marker's offset; ``last_stable_offset`` = the first unstable offset right after it, the marker
offset + 1 when nothing else was open).  Entries are in marker order, so ``last_offset`` grows.

A read_committed fetch of ``[fetch_offset, upper_bound)`` needs every aborted transaction that
overlaps it: entries with ``last_offset >= fetch_offset`` and ``first_offset < upper_bound``,
from the segment holding ``fetch_offset`` on.  An entry whose ``last_stable_offset >
upper_bound`` ends the search (``collect`` returns ``complete``): every transaction aborted
after it was still open, or not yet begun, when that entry was written, so it starts at or
above that last stable offset — beyond the range.

The entries live in memory (a list) and in the file, which is appended with one ``os.write``
per entry (``O_APPEND``) and fsynced by the log's ``flush`` (``dirty``) before the recovery
point passes it.  The file exists for every segment, empty or not, so a *missing* file is
detectable — recovery then rebuilds it from the batches (``log/recovery.py``).  ``load`` is
robust to a torn tail: a partial last entry is ignored and cut off; ``truncate`` drops the
entries with ``last_offset >= offset`` (rewriting the file atomically); the file is deleted
with its segment.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path
from typing import NamedTuple

from .errors import StorageError
from .index import write_file_atomic

__all__ = ["AbortedTxn", "TxnIndex", "TXN_INDEX_SUFFIX", "ENTRY_SIZE"]

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">qqqq")
ENTRY_SIZE = _ENTRY.size
logger = logging.getLogger("rafka.log")


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndex:
    """The aborted transactions whose ABORT marker is in one segment."""

    __slots__ = ("path", "base_offset", "entries", "dirty", "fd")

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = []
        self.dirty = False  # appended since the last sync
        self.fd = -1

    def __len__(self) -> int:
        return len(self.entries)

    def _open_fd(self) -> int:
        if self.fd < 0:
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                raise StorageError(f"cannot open {self.path.name}", exc) from exc
        return self.fd

    def create(self) -> None:
        """Start an empty index file (a new segment; made durable with the segment's own
        directory entry by the log's next flush)."""
        self.close()
        self.entries.clear()
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC,
                              0o644)
        except OSError as exc:
            raise StorageError(f"cannot create {self.path.name}", exc) from exc
        self.dirty = False

    def load(self) -> bool:
        """Read the file; False when it is missing (the caller rebuilds the entries).

        A partial trailing entry (a torn append) is ignored and cut off; so are entries that
        are out of order (an append over a cut-off tail cannot produce them: damage)."""
        self.close()
        self.entries.clear()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot read {self.path.name}", exc) from exc
        good = len(data) - len(data) % ENTRY_SIZE
        prev = -1
        for pos in range(0, good, ENTRY_SIZE):
            e = AbortedTxn(*_ENTRY.unpack_from(data, pos))
            if e.last_offset < prev or e.first_offset > e.last_offset or e.producer_id < 0:
                logger.warning("%s: bad entry at byte %d; index cut there", self.path, pos)
                good = pos
                break
            self.entries.append(e)
            prev = e.last_offset
        if good != len(data):
            logger.warning("%s: cutting %d trailing bytes", self.path, len(data) - good)
            self._rewrite()
        return True

    def append(self, entry: AbortedTxn) -> None:
        """Add an entry (its marker is the newest batch of the segment)."""
        if self.entries and entry.last_offset < self.entries[-1].last_offset:
            raise ValueError(f"{self.path.name}: entry for offset {entry.last_offset} after "
                             f"{self.entries[-1].last_offset}")
        data = _ENTRY.pack(*entry)
        fd = self._open_fd()
        try:
            os.write(fd, data)  # 32 bytes, O_APPEND: whole or an error
        except OSError as exc:
            raise StorageError(f"append to {self.path.name} failed", exc) from exc
        self.entries.append(entry)
        self.dirty = True

    def sync(self) -> None:
        """fdatasync appended entries (called by the log's flush)."""
        if self.fd >= 0:
            os.fdatasync(self.fd)

    def truncate(self, offset: int) -> int:
        """Drop the entries with ``last_offset >= offset``; returns how many."""
        keep = len(self.entries)
        while keep and self.entries[keep - 1].last_offset >= offset:
            keep -= 1
        dropped = len(self.entries) - keep
        if dropped:
            del self.entries[keep:]
            self._rewrite()
        return dropped

    def _rewrite(self) -> None:
        self.close()
        try:
            write_file_atomic(self.path, b"".join(_ENTRY.pack(*e) for e in self.entries),
                              fsync=True, sync_dir=True)
        except OSError as exc:
            raise StorageError(f"cannot write {self.path.name}", exc) from exc
        self.dirty = False

    def collect(self, fetch_offset: int, upper_bound: int,
                out: list[AbortedTxn]) -> bool:
        """Append the entries overlapping ``[fetch_offset, upper_bound)`` to ``out``; True
        when the search is complete (no later segment can hold more)."""
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                out.append(e)
            if e.last_stable_offset > upper_bound:
                return True
        return False

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
