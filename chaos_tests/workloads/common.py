"""Shared plumbing of the workloads: the run context, op recording and error classification.

Theory of operation
-------------------
A workload is a set of *logical processes* (Jepsen's word): trio tasks that each perform one
operation at a time and record it in the history as ``invoke`` then ``ok`` / ``fail`` /
``info`` (:mod:`rafka.chaos_tests.history`).  Every client operation is bounded by
``RunContext.op_timeout_s`` (``trio.move_on_after``); a timeout is ``info`` — the outcome is
unknown — and the process continues under a *new* process id with a fresh client, because
its client state (producer sequence numbers, consumer position) is unknown too.

Definite vs indefinite (:func:`classify_error`).  Only errors that prove the operation did not
take effect are ``fail``: the broker rejected the request *before* appending anything
(``NOT_ENOUGH_REPLICAS``, ``UNKNOWN_TOPIC_OR_PARTITION``, sequence and epoch errors, invalid
requests, …) or the client never sent it (a full buffer, a record too large).  Timeouts, lost
connections, ``NOT_ENOUGH_REPLICAS_AFTER_APPEND``, ``KAFKA_STORAGE_ERROR`` and anything unknown
are ``info``.  So is ``NOT_LEADER_OR_FOLLOWER``: the broker answers it before an append (not
the leader) but also *after* one, when the leader epoch the records were appended in ends
while the request waits for acks=all (``broker/partition.py`` ``produce_outcome``, as Kafka's
delayed produce) — the new leader may have replicated them (seen: two such sends read back at
offsets 253/254, flagged as aborted reads while this was counted definite).  This is only sound when the client
made a single attempt: the queue workload's producers run with ``retries=0`` and one record in
flight, so a definite error of the last attempt is the fate of the record.

Values are unique per run: :meth:`RunContext.next_value` hands out increasing integers
(sent as their decimal ASCII bytes), never reused, not even for retries.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import trio

from ..history import HistoryWriter

__all__ = [
    "DEFINITE_CODES",
    "RunContext",
    "classify_error",
    "error_name",
    "encode_value",
    "decode_value",
]

# Wire error names whose meaning is "rejected before any append" (Kafka numbering).
DEFINITE_CODES = frozenset({
    "NOT_ENOUGH_REPLICAS",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "LEADER_NOT_AVAILABLE",
    "CORRUPT_MESSAGE",
    "INVALID_TOPIC_EXCEPTION",
    "MESSAGE_TOO_LARGE",
    "RECORD_LIST_TOO_LARGE",
    "INVALID_REQUIRED_ACKS",
    "INVALID_TIMESTAMP",
    "INVALID_RECORD",
    "INVALID_REQUEST",
    "UNSUPPORTED_VERSION",
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "INVALID_PRODUCER_EPOCH",
    "UNKNOWN_PRODUCER_ID",
    "FENCED_LEADER_EPOCH",
    "UNKNOWN_LEADER_EPOCH",
    "TOO_MANY_IN_FLIGHT",
    "TOO_MANY_CONNECTIONS",
    "BROKER_FENCED",
    "TOPIC_ALREADY_EXISTS",
    "INVALID_PARTITIONS",
    "INVALID_REPLICATION_FACTOR",
    "INVALID_CONFIG",
    "POLICY_VIOLATION",
    "UNKNOWN_TOPIC_ID",
})

# Client-side exception class names that mean "never sent".
DEFINITE_CLIENT_ERRORS = frozenset({"BufferExhaustedError", "RecordTooLargeError"})


def error_name(exc: BaseException) -> str:
    """``CODE_NAME`` for a rafka error (its wire code), else the exception's class name."""
    code = getattr(exc, "code", None)
    name = getattr(code, "name", None)
    cls = type(exc).__name__
    if cls in DEFINITE_CLIENT_ERRORS or cls in ("KafkaTimeoutError", "IllegalStateError",
                                                "NoBrokersAvailableError"):
        return cls
    return name if isinstance(name, str) else cls


def classify_error(exc: BaseException) -> str:
    """``"fail"`` when ``exc`` proves the op did not happen, else ``"info"``."""
    name = error_name(exc)
    if name in DEFINITE_CLIENT_ERRORS or name in DEFINITE_CODES:
        return "fail"
    return "info"


def encode_value(v: int) -> bytes:
    return str(v).encode("ascii")


def decode_value(raw: bytes | None) -> int | str | None:
    if raw is None:
        return None
    s = raw.decode("utf-8", "replace")
    try:
        return int(s)
    except ValueError:
        return s


@dataclass
class RunContext:
    """What every workload process needs: the history, where the brokers are, the limits."""

    history: HistoryWriter
    bootstrap: str
    op_timeout_s: float = 5.0
    deadline: float = math.inf  # trio.current_time() after which processes stop starting ops
    request_timeout_ms: int = 3000
    _values: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _processes: Iterator[int] = field(default_factory=lambda: itertools.count(0))
    stats: dict[str, int] = field(default_factory=dict)

    def next_value(self) -> int:
        return next(self._values)

    def next_process(self) -> int:
        return next(self._processes)

    def running(self) -> bool:
        return trio.current_time() < self.deadline

    def count(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n

    def client_options(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap, "request_timeout_ms": self.request_timeout_ms}




