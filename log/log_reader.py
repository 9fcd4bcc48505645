"""LogReader: the read side of a ``PartitionLog`` (a mixin; the log owns the state).

Theory of operation
-------------------
Read path (``read``): the batch containing ``fetch_offset`` is found through the sparse index;
whole batches are returned as a ``FetchSlice`` (an owned, dup'ed fd + position + length, ready
for ``os.sendfile``), bounded by ``max_bytes`` (the first batch always whole) and by
``max_offset`` (the high watermark), within one segment.  Every returned batch's CRC is checked
on the way: damage at ``fetch_offset`` raises ``CorruptSegmentError`` with the damaged range,
damage later cuts the slice short — a segment damaged in the middle keeps serving the rest.

Transactions: ``first_unstable_offset`` (the oldest open transaction, from producer state) and
``aborted_transactions``/``collect_aborted`` (the ``.txnindex`` entries of the segments from
``fetch_offset`` on) serve the broker's last stable offset and read_committed fetches.

Every method here belongs to the log's owner thread and only reads ``_segments``, ``_bases``,
``_log_start_offset``, ``log_end_offset`` and ``producer_state``, which ``PartitionLog`` keeps;
``_check_usable`` raises on a closed or offline log.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .batch import HEADER_SIZE, BatchHeader, CorruptBatchError, crc_ok, decode_records, parse_header
from .errors import OffsetOutOfRangeError
from .producer_state import ProducerInfo
from .segment import Segment
from .txn_index import AbortedTxn

if TYPE_CHECKING:
    from .producer_state import ProducerStateManager

__all__ = ["FetchSlice", "LogReader"]

logger = logging.getLogger("rafka.log")


class FetchSlice:
    """Whole batches ``[position, position + length)`` of a file, behind an owned fd — or, for
    a small read (``PartitionLog.read``'s ``inline_max_bytes``), the bytes themselves in
    ``data`` (already read to check their CRCs) and no fd (``fd`` −1)."""

    __slots__ = ("fd", "position", "length", "first_offset", "last_offset", "data")

    def __init__(self, fd: int, position: int, length: int, first_offset: int,
                 last_offset: int, data: memoryview | None = None) -> None:
        self.fd = fd
        self.position = position
        self.length = length
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.data = data

    def fileno(self) -> int:
        return self.fd

    def read_bytes(self) -> bytes:
        if self.data is not None:
            return bytes(self.data)
        return os.pread(self.fd, self.length, self.position)

    def read_bytearray(self) -> bytearray:
        """The slice's bytes in a fresh ``bytearray`` (one copy: a caller may patch them —
        the Kafka listener's fetch sets stored Kafka batches' magic back to 2)."""
        if self.data is not None:
            return bytearray(self.data)
        buf = bytearray(self.length)
        got = os.preadv(self.fd, [buf], self.position)
        if got < self.length:
            del buf[got:]
        return buf

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> FetchSlice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"FetchSlice(offsets {self.first_offset}..{self.last_offset}, "
                f"{self.length} bytes at {self.position})")


class LogReader:
    """Read methods of ``PartitionLog`` (see the module docstring)."""

    _segments: list[Segment]
    _bases: list[int]
    _log_start_offset: int
    producer_state: ProducerStateManager

    if TYPE_CHECKING:  # provided by PartitionLog
        @property
        def log_end_offset(self) -> int: ...

        def _check_usable(self) -> None: ...

    # -- batches ---------------------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect_right(self._bases, offset) - 1)

    def _locate(self, fetch_offset: int, max_bytes: int, max_offset: int | None
                ) -> tuple[Segment, int, memoryview, int, int] | None:
        self._check_usable()
        leo = self.log_end_offset
        if fetch_offset < self._log_start_offset or fetch_offset > leo:
            raise OffsetOutOfRangeError(fetch_offset, self._log_start_offset, leo)
        if fetch_offset == leo or (max_offset is not None and fetch_offset >= max_offset):
            return None
        for seg in self._segments[self._segment_index(fetch_offset):]:
            found = seg.find_batch(fetch_offset)
            if found is not None:
                break
        else:
            return None
        pos, h, prev_next = found
        if max_offset is not None and h.last_offset >= max_offset:
            return None
        buf = memoryview(seg.pread(min(max(h.size, max_bytes), seg.size - pos), pos))
        if not crc_ok(buf, 0):
            raise seg.damage(prev_next, pos, f"CRC mismatch in batch at offset {h.base_offset}")
        p, last = h.size, h.last_offset
        while len(buf) - p >= HEADER_SIZE:
            try:
                nh = parse_header(buf, p)
            except CorruptBatchError as exc:
                logger.warning("%s: corrupt batch header after offset %d at byte %d: %s",
                               seg.path, last, pos + p, exc)
                break
            if p + nh.size > len(buf) or (max_offset is not None and nh.last_offset >= max_offset):
                break
            if nh.base_offset <= last or not crc_ok(buf, p):
                logger.warning("%s: corrupt batch after offset %d at byte %d; serving up to it",
                               seg.path, last, pos + p)
                break
            p += nh.size
            last = nh.last_offset
        return seg, pos, buf[:p], h.base_offset, last

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int | None = None, *,
             inline_max_bytes: int = 0) -> FetchSlice | None:
        """Whole batches from the one containing ``fetch_offset``; None at the end. Up to
        ``inline_max_bytes`` the slice carries the bytes read for the CRC check (``data``, no
        fd): a tailing reader's usual answer then costs no ``dup``/``close`` and no second
        ``pread``."""
        found = self._locate(fetch_offset, max_bytes, max_offset)
        if found is None:
            return None
        seg, pos, data, first, last = found
        if len(data) <= inline_max_bytes:
            return FetchSlice(-1, pos, len(data), first, last, data)
        return FetchSlice(os.dup(seg.fd), pos, len(data), first, last)

    def read_bytes(self, fetch_offset: int, max_bytes: int,
                   max_offset: int | None = None) -> bytes:
        """Like ``read`` but returns the bytes (b"" at the end)."""
        found = self._locate(fetch_offset, max_bytes, max_offset)
        return b"" if found is None else bytes(found[2])

    def iter_headers(self, from_offset: int = 0) -> Iterator[tuple[Segment, int, BatchHeader]]:
        """(segment, position, header) of every batch whose last offset ≥ ``from_offset``."""
        for seg in self._segments[self._segment_index(from_offset):]:
            yield from self._iter_segment(seg, from_offset)

    def offset_for_timestamp(self, timestamp_ms: int,
                             max_offset: int | None = None) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp ≥ ``timestamp_ms``."""
        self._check_usable()
        for seg in self._segments:
            if seg.max_timestamp < timestamp_ms:
                continue
            start = max(seg.time_index.lookup(timestamp_ms), self._log_start_offset)
            for _seg, pos, h in self._iter_segment(seg, start):
                if h.max_timestamp < timestamp_ms:
                    continue
                for rec in decode_records(seg.pread(h.size, pos)):
                    if rec.timestamp >= timestamp_ms and rec.offset >= self._log_start_offset:
                        if max_offset is not None and rec.offset >= max_offset:
                            return None
                        return rec.offset, rec.timestamp
        return None

    def _iter_segment(self, seg: Segment, from_offset: int
                      ) -> Iterator[tuple[Segment, int, BatchHeader]]:
        found = seg.find_batch(from_offset)
        if found is None:
            return
        pos = found[0]
        while pos < seg.size:
            h = parse_header(seg.pread(HEADER_SIZE, pos))
            yield seg, pos, h
            pos += h.size

    # -- transactions -------------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction, or None (docs/transactions.md)."""
        return self.producer_state.first_unstable_offset()

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Index entries of the aborted transactions overlapping ``[fetch_offset,
        upper_bound)``: ``last_offset >= fetch_offset`` and ``first_offset < upper_bound``."""
        out: list[AbortedTxn] = []
        for seg in self._segments[self._segment_index(fetch_offset):]:
            if seg.txn_index.collect(fetch_offset, upper_bound, out):
                break
        return out

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of every aborted transaction overlapping
        ``[fetch_offset, upper_bound)`` — a read_committed FETCH's ``aborted_transactions``."""
        return [(e.producer_id, e.first_offset)
                for e in self.aborted_transactions(fetch_offset, upper_bound)]

    def describe_producers(self) -> list[ProducerInfo]:
        """The producers this replica knows (DESCRIBE_PRODUCERS)."""
        return self.producer_state.describe()

