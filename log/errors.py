"""Storage exceptions of the partition log.

Theory of operation: every failure the log can report has its own class, all deriving from
``LogError``.  The broker maps them to wire error codes *by class* (``isinstance``), so the
classes are the contract and the messages are for humans.  Exceptions that describe a place in
the log carry it as attributes (offset ranges, the segment file, log start/end), never only in
the message text.

Two families:

* data errors — the bytes are bad: ``CorruptBatchError`` (a batch in hand fails its header or
  CRC check), ``CorruptSegmentError`` (a stored segment is damaged in a known offset range),
  ``InvalidRecordError``, ``RecordTooLargeError``;
* state errors — the request does not fit the log: ``OffsetOutOfRangeError``, the idempotent
  producer errors, ``InvalidTxnStateError``, ``UnexpectedAppendOffsetError`` (replication out
  of order);
* ``StorageError`` wraps an ``OSError`` from the file system (``.disk_full`` for ENOSPC/EDQUOT).
"""

from __future__ import annotations

import errno
from pathlib import Path

__all__ = [
    "LogError",
    "CorruptBatchError",
    "CorruptSegmentError",
    "OffsetOutOfRangeError",
    "RecordTooLargeError",
    "StorageError",
    "InvalidRecordError",
    "InvalidConfigError",
    "OutOfOrderSequenceError",
    "UnknownProducerIdError",
    "DuplicateSequenceError",
    "InvalidProducerEpochError",
    "TransactionCoordinatorFencedError",
    "InvalidTxnStateError",
    "UnexpectedAppendOffsetError",
]


class LogError(Exception):
    """Base class of every error raised by ``log/``."""


class CorruptBatchError(LogError):
    """A record batch fails its header sanity checks or its CRC-32C."""


class CorruptSegmentError(LogError):
    """A stored segment is damaged: offsets ``[start_offset, end_offset)`` cannot be served.

    ``end_offset`` is the first offset known good again (a reader may resume there); it is the
    log end offset when nothing after the damage could be found.
    """

    def __init__(self, segment_file: Path | str, start_offset: int, end_offset: int,
                 position: int, reason: str) -> None:
        self.segment_file = Path(segment_file)
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.position = position
        self.reason = reason
        super().__init__(
            f"corrupt data in {self.segment_file.name} at byte {position}: offsets "
            f"[{start_offset}, {end_offset}) are damaged ({reason}); next good offset {end_offset}"
        )


class OffsetOutOfRangeError(LogError):
    """Requested offset is outside ``[log_start, log_end]``."""

    def __init__(self, offset: int, log_start: int, log_end: int) -> None:
        self.offset = offset
        self.log_start = log_start
        self.log_end = log_end
        super().__init__(f"offset {offset} is out of range [{log_start}, {log_end}]")


class RecordTooLargeError(LogError):
    """A batch is larger than ``max.message.bytes`` (a batch larger than ``segment.bytes`` is
    accepted: it gets a segment of its own)."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"record batch of {size} bytes exceeds max.message.bytes={limit}")


class StorageError(LogError):
    """The file system failed us; wraps the ``OSError`` (``__cause__`` and ``.os_error``)."""

    def __init__(self, message: str, os_error: OSError | None = None) -> None:
        self.os_error = os_error
        self.errno = os_error.errno if os_error is not None else None
        self.disk_full = self.errno in (errno.ENOSPC, errno.EDQUOT)
        if self.disk_full:
            message = f"disk full: {message}"
        if os_error is not None:
            message = f"{message}: {os_error}"
        super().__init__(message)


class InvalidRecordError(LogError):
    """A batch is well formed but not acceptable (e.g. a keyless record on a compacted topic)."""


class InvalidConfigError(LogError, ValueError):
    """A topic config key is unknown or its value is invalid; ``.key`` names it."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"invalid config {key!r}: {message}")


class OutOfOrderSequenceError(LogError):
    """An idempotent producer's sequence number is not the next expected one."""

    def __init__(self, producer_id: int, expected: int, got: int, message: str = "") -> None:
        self.producer_id = producer_id
        self.expected = expected
        self.got = got
        super().__init__(
            message or f"producer {producer_id}: out of order sequence {got}, expected {expected}"
        )


class UnknownProducerIdError(OutOfOrderSequenceError):
    """Sequence ≠ 0 from a producer id this partition has no state for."""


class DuplicateSequenceError(LogError):
    """A batch was already appended; carries where the original landed."""

    def __init__(self, producer_id: int, base_offset: int, last_offset: int) -> None:
        self.producer_id = producer_id
        self.base_offset = base_offset
        self.last_offset = last_offset
        super().__init__(
            f"producer {producer_id}: duplicate batch, originally at offsets "
            f"[{base_offset}, {last_offset}]"
        )


class InvalidProducerEpochError(LogError):
    """The producer epoch is older than the one on record (a fenced zombie producer)."""

    def __init__(self, producer_id: int, current_epoch: int, got: int) -> None:
        self.producer_id = producer_id
        self.current_epoch = current_epoch
        self.got = got
        super().__init__(
            f"producer {producer_id}: epoch {got} is older than the current epoch {current_epoch}"
        )


class InvalidTxnStateError(LogError):
    """A batch does not fit the producer's transaction state on this partition (e.g. a
    non-transactional batch while its transaction is open) — INVALID_TXN_STATE."""


class TransactionCoordinatorFencedError(LogError):
    """A transaction marker from a coordinator older (lower coordinator epoch) than one this
    producer's markers already came from — TRANSACTION_COORDINATOR_FENCED."""


class UnexpectedAppendOffsetError(LogError):
    """A follower append is not contiguous with (or goes back before) the log end offset."""

    def __init__(self, expected_min: int, got: int) -> None:
        self.expected_min = expected_min
        self.got = got
        super().__init__(f"follower append at offset {got}, expected >= {expected_min}")
