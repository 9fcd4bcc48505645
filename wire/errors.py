"""Every error a rafka client can meet: a code, a name, and an exception class.

Theory of operation: the wire carries an integer ``error`` (and optionally a ``message``) in
response bodies. ``ErrorCode`` numbers follow Kafka where Kafka has the same error, so people
who know Kafka can read them; rafka-only errors live at 1000 and above. Each code has an
exception class named after it (``NOT_LEADER_OR_FOLLOWER`` → ``NotLeaderOrFollowerError``), all
subclasses of ``RafkaError``, with ``.code``, ``.retriable`` and ``.message``. ``error_for`` turns
a code into an exception instance; ``raise_for`` raises from a response body.

Local errors (you broke the protocol: ``ProtocolError``) and remote ones (the broker says so:
``RafkaError`` with a code) are kept apart, as h11 does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import IntEnum
from typing import Any

__all__ = [
    "ErrorCode",
    "RafkaError",
    "ProtocolError",
    "RETRIABLE",
    "error_class",
    "error_for",
    "raise_for",
    "Handler",
    "answer_errors",
]


class ErrorCode(IntEnum):
    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    TOPIC_AUTHORIZATION_FAILED = 29  # security (docs/security.md)
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FENCED_LEADER_EPOCH = 74
    FENCED_INSTANCE_ID = 82  # KIP-345: a newer member joined with this group_instance_id
    UNKNOWN_LEADER_EPOCH = 75
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    INVALID_RECORD = 87
    GROUP_SUBSCRIBED_TO_TOPIC = 86  # OFFSET_DELETE of a topic the group's members subscribe to
    NO_REASSIGNMENT_IN_PROGRESS = 85  # a cancel named a partition that is not moving (kraft/reassign.py)
    UNSTABLE_OFFSET_COMMIT = 88  # KIP-447: a transaction holding offsets of this partition is open
    PRODUCER_FENCED = 90
    FENCED_MEMBER_EPOCH = 110
    UNKNOWN_TOPIC_ID = 100
    BROKER_ID_NOT_REGISTERED = 102  # decommission / unregister of an unknown broker id
    TRANSACTIONAL_ID_NOT_FOUND = 105
    INELIGIBLE_REPLICA = 107  # KIP-841: an ISR expansion adding a fenced broker or one in controlled shutdown
    DUPLICATE_VOTER = 126  # KIP-853: add-voter of a voter (id or address) already in the quorum
    VOTER_NOT_FOUND = 127  # KIP-853: remove-voter of an id that is not a voter
    # rafka-only
    MALFORMED_FRAME = 1000
    FRAME_TOO_LARGE = 1001
    UNKNOWN_API = 1002
    TOO_MANY_CONNECTIONS = 1003
    TOO_MANY_IN_FLIGHT = 1004
    BROKER_FENCED = 1005
    STALE_PARTITION_EPOCH = 1006
    STALE_MEMBER = 1007
    TRANSACTION_TIMED_OUT = 1008  # the coordinator aborted the transaction (transaction.timeout.ms)
    # security (docs/security.md)
    TLS_REQUIRED = 1020  # a plaintext request reached a TLS listener
    TLS_HANDSHAKE_FAILED = 1021  # client side: the TLS handshake failed (wrong CA, bad cert...)
    RESOURCE_NOT_FOUND = 1022  # e.g. deleting a SCRAM credential that does not exist


# Errors a client may retry after refreshing metadata / backing off.
RETRIABLE: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.TOO_MANY_IN_FLIGHT,
        ErrorCode.BROKER_FENCED,
    }
)


class RafkaError(Exception):
    """An error reported by a rafka node (or met by a client), with its wire code."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "", **details: Any) -> None:
        self.message = message or self.code.name.lower().replace("_", " ")
        self.details = details
        super().__init__(f"{self.code.name}: {self.message}")

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE


class ProtocolError(RafkaError):
    """The peer (or the local caller) broke the framing or the schema of the protocol."""

    code = ErrorCode.INVALID_REQUEST


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.lower().split("_"))


_CLASSES: dict[ErrorCode, type[RafkaError]] = {}
for _code in ErrorCode:
    if _code is ErrorCode.NONE:
        continue
    _name = _camel(_code.name)
    if not _name.endswith("Error") and not _name.endswith("Exception"):
        _name += "Error"
    _cls = type(_name, (RafkaError,), {"code": _code, "__module__": __name__})
    _CLASSES[_code] = _cls
    globals()[_name] = _cls
    __all__.append(_name)


def error_class(code: int | ErrorCode) -> type[RafkaError]:
    """The exception class for a wire error code (unknown codes → UnknownServerError)."""
    try:
        return _CLASSES[ErrorCode(code)]
    except ValueError:
        return _CLASSES[ErrorCode.UNKNOWN_SERVER_ERROR]


def error_for(code: int | ErrorCode, message: str = "", **details: Any) -> RafkaError:
    """An exception instance for ``code`` (which must not be NONE)."""
    return error_class(code)(message, **details)


def raise_for(body: dict[str, Any]) -> None:
    """Raise the error a response body (or a per-partition entry) carries, if any."""
    code = body.get("error", 0)
    if code:
        raise error_for(code, body.get("message") or "")


Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def answer_errors(fn: Handler) -> Handler:
    """``raise_for``'s inverse for a request handler: a body with ``error`` 0 and an empty
    ``message`` merged into what ``fn`` returns, or the code and message of the ``RafkaError``
    it raised."""
    async def handler(body: dict[str, Any]) -> dict[str, Any]:
        try:
            return {"error": 0, "message": "", **await fn(body)}
        except RafkaError as exc:
            return {"error": int(exc.code), "message": exc.message}

    handler.__name__ = fn.__name__
    return handler
