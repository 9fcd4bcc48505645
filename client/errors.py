"""Errors a rafka client can raise.

Theory of operation: every error that comes from a broker is a ``wire.errors.RafkaError``
subclass named after its wire code (``NotLeaderOrFollowerError``, ``OffsetOutOfRangeError``,
…); this module re-exports all of them so that ``rafka.client.errors`` is the one place users import
from. Errors that only a client can meet (a full buffer, a closed client, a local timeout) are
``ClientError`` subclasses — still ``RafkaError``\\ s, so ``except RafkaError`` catches
everything rafka raises, and each carries the closest wire code for programs that switch on
``.code``.
"""

from __future__ import annotations

from typing import Any

import rafka.wire.errors as _wire
from rafka.wire.errors import (
    ErrorCode,
    ProtocolError,
    RafkaError,
    error_class,
    error_for,
    raise_for,
)

__all__ = [
    "ErrorCode",
    "RafkaError",
    "ProtocolError",
    "error_class",
    "error_for",
    "raise_for",
    "ClientError",
    "KafkaTimeoutError",
    "BufferExhaustedError",
    "IllegalStateError",
    "NoBrokersAvailableError",
    "UnresolvableHostError",
    "BootstrapTimeoutError",
    "CorruptRecordError",
    "RecordTooLargeError",
    "IllegalTxnStateError",
    "TransactionAbortedError",
]


class ClientError(RafkaError):
    """An error met by the client itself (not reported by a broker)."""


class KafkaTimeoutError(ClientError):
    """A client-side deadline passed (max_block_ms, delivery_timeout_ms, request_timeout_ms)."""

    code = ErrorCode.REQUEST_TIMED_OUT


class BufferExhaustedError(KafkaTimeoutError):
    """``send`` waited ``max_block_ms`` for room in ``buffer_memory`` and found none."""


class IllegalStateError(ClientError):
    """The call does not fit the client's state (closed, not assigned, …)."""

    code = ErrorCode.INVALID_REQUEST


class NoBrokersAvailableError(ClientError):
    """No bootstrap or known broker answered."""

    code = ErrorCode.BROKER_NOT_AVAILABLE


class BootstrapTimeoutError(NoBrokersAvailableError):
    """No bootstrap address answered for the whole ``connection_setup_timeout_ms`` (the CLI's
    ``--timeout``) and the client has never reached the cluster: most likely a wrong address,
    so waiting on (up to ``max_block_ms`` / ``request_timeout_ms``) would only hide it. Not
    retriable; the message names each address tried and why it failed."""

    @property
    def retriable(self) -> bool:
        return False


class UnresolvableHostError(ClientError):
    """No bootstrap or known broker address resolves (the name does not exist): a setting to
    fix, not a state to wait out, so it is not retriable (Kafka's "no resolvable bootstrap urls")."""

    code = ErrorCode.INVALID_CONFIG


class CorruptRecordError(ClientError):
    """A fetched batch failed its CRC or could not be decoded; ``.topic/.partition/.start_offset
    /.end_offset`` name the damaged range (seek past ``end_offset + 1`` to skip it)."""

    code = ErrorCode.CORRUPT_MESSAGE

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message, **details)
        self.topic: str = details.get("topic", "")
        self.partition: int = details.get("partition", -1)
        self.start_offset: int = details.get("start_offset", -1)
        self.end_offset: int = details.get("end_offset", -1)


class RecordTooLargeError(ClientError):
    """A record is larger than ``max_request_size`` / ``buffer_memory``, or a fetched batch is
    larger than ``max_partition_fetch_bytes``."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class IllegalTxnStateError(IllegalStateError, error_class(ErrorCode.INVALID_TXN_STATE)):  # type: ignore[misc]
    """A transactional producer's call does not fit its transaction state (``send`` before
    ``begin_transaction()``, ``commit_transaction()`` with none open, …). Both an
    ``IllegalStateError`` and an ``InvalidTxnStateError``."""

    code = ErrorCode.INVALID_TXN_STATE


class TransactionAbortedError(ClientError):
    """The record's batch was dropped unsent because its transaction was aborted."""

    code = ErrorCode.INVALID_TXN_STATE


def __getattr__(name: str) -> Any:  # the per-code classes of wire.errors
    try:
        return getattr(_wire, name)
    except AttributeError:
        raise AttributeError(f"module 'rafka.client.errors' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(_wire.__all__))
