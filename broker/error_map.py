"""Map ``log/`` exceptions (and our own) to wire error codes.

Theory of operation: the storage layer raises exceptions by class (``log/errors.py``); the
broker turns each into an ``ErrorCode`` plus a human message, by class, in one table, so every
handler reports the same failure the same way. A duplicate idempotent batch is not an error on
the wire: the produce handler answers with the original offsets (``DuplicateSequenceError``
carries them) before it gets here.
"""

from __future__ import annotations

import logging

from rafka.log import errors as le
from rafka.wire.errors import ErrorCode, RafkaError

__all__ = ["wire_error"]

log = logging.getLogger("rafka.broker")

_BY_CLASS: list[tuple[type[BaseException], ErrorCode]] = [
    (le.CorruptSegmentError, ErrorCode.CORRUPT_MESSAGE),
    (le.CorruptBatchError, ErrorCode.CORRUPT_MESSAGE),
    (le.StorageError, ErrorCode.KAFKA_STORAGE_ERROR),
    (le.RecordTooLargeError, ErrorCode.MESSAGE_TOO_LARGE),
    (le.OffsetOutOfRangeError, ErrorCode.OFFSET_OUT_OF_RANGE),
    (le.UnknownProducerIdError, ErrorCode.UNKNOWN_PRODUCER_ID),
    (le.OutOfOrderSequenceError, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    (le.DuplicateSequenceError, ErrorCode.DUPLICATE_SEQUENCE_NUMBER),
    (le.InvalidProducerEpochError, ErrorCode.INVALID_PRODUCER_EPOCH),
    (le.InvalidTxnStateError, ErrorCode.INVALID_TXN_STATE),
    (le.TransactionCoordinatorFencedError, ErrorCode.TRANSACTION_COORDINATOR_FENCED),
    (le.InvalidRecordError, ErrorCode.INVALID_RECORD),
    (le.InvalidConfigError, ErrorCode.INVALID_CONFIG),
    (le.UnexpectedAppendOffsetError, ErrorCode.UNKNOWN_SERVER_ERROR),
    (OSError, ErrorCode.KAFKA_STORAGE_ERROR),
]


def wire_error(exc: BaseException) -> tuple[ErrorCode, str]:
    """(code, message) for an exception met while serving a partition."""
    if isinstance(exc, RafkaError):
        return exc.code, exc.message
    for cls, code in _BY_CLASS:
        if isinstance(exc, cls):
            return code, str(exc)
    log.error("unexpected %s while serving a partition: %s", type(exc).__name__, exc)
    return ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"
