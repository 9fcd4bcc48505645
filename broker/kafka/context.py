"""What every Kafka API adapter shares: the context it runs in and the native round trip.

Theory of operation: an adapter (``apis.py``, ``groups.py``, ``txn.py``, ``admin.py``) gets a
``KafkaContext`` — the node's dispatch, its metadata image, its id, cluster id and broker
settings, the classic members it coordinates and its fetch sessions — and calls ``call_native`` to put one rafka
request through that dispatch, so a raised native error arrives as ``{"error", "message"}``
like any answer. ``kafka_error`` turns a native code into Kafka's (the same number below
1000: rafka numbered its errors after Kafka's), ``kafka_address`` finds a broker's registered
Kafka listener of the same name as the one the request came in on (``KafkaContext.listener``:
PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL), so a client bootstrapped on one kind of listener
is only ever sent to that kind — as Kafka keys its advertised listeners by listener name.
A broker registers them in one string (``RegisterBroker.kafka_listener``): ``HOST:PORT`` for
a lone PLAINTEXT listener, else Kafka's ``advertised.listeners`` form,
``NAME://HOST:PORT,NAME://HOST:PORT`` (``kafka_listeners`` reads both).
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rafka.broker.kafka.codec import KafkaRequest
from rafka.broker.kafka.fetch_sessions import FetchSessionCache
from rafka.broker.kafka.members import ClassicGroups
from rafka.metadata.image import MetadataImage
from rafka.wire.errors import ErrorCode, RafkaError
from rafka.wire.protocol import ApiKey, Request

__all__ = ["KafkaContext", "kafka_error", "commit_error", "call_native", "kafka_address", "kafka_listeners", "ms",
           "UNKNOWN_SERVER_ERROR", "CORRUPT_MESSAGE", "UNKNOWN_TOPIC_OR_PARTITION",
           "UNSUPPORTED_COMPRESSION_TYPE", "NO_AUTH_OPS", "RAFKA_ONLY_AS_KAFKA"]

UNKNOWN_SERVER_ERROR = -1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
UNSUPPORTED_COMPRESSION_TYPE = 76
NO_AUTH_OPS = -(2**31)


@dataclass
class KafkaContext:
    """What an adapter may use: the node's dispatch, its metadata and its own identity."""

    dispatch: Callable[[Request], Awaitable[Any]]
    image: Callable[[], MetadataImage]
    node_id: int
    cluster_id: str
    settings: Mapping[str, Any]
    groups: ClassicGroups = field(default_factory=ClassicGroups)  # classic members (groups.py)
    # the broker's ReplicaManager, read-only: what only its replicas know (admin_more.py:
    # leader-epoch end offsets, log dirs); None on a node without replicas
    replicas: Any = None
    # the listener name this context serves (one context per Kafka listener, sharing groups)
    listener: str = "PLAINTEXT"
    fetch_sessions: FetchSessionCache = field(default_factory=FetchSessionCache)  # KIP-227


# Each rafka-only code (1000+) as the Kafka code a Kafka client understands for the same
# situation; −1 (UNKNOWN_SERVER_ERROR) only where Kafka has none. The reason per code is the
# table in docs/kafka-compat.md "Error codes"; tests/kafka_wire/test_errors.py checks every
# ErrorCode member lands on a code Kafka defines.
RAFKA_ONLY_AS_KAFKA: dict[ErrorCode, int] = {
    ErrorCode.MALFORMED_FRAME: 42,         # INVALID_REQUEST
    ErrorCode.FRAME_TOO_LARGE: 10,         # MESSAGE_TOO_LARGE
    ErrorCode.UNKNOWN_API: 35,             # UNSUPPORTED_VERSION
    ErrorCode.TOO_MANY_CONNECTIONS: 13,    # NETWORK_EXCEPTION
    ErrorCode.TOO_MANY_IN_FLIGHT: 89,      # THROTTLING_QUOTA_EXCEEDED
    ErrorCode.BROKER_FENCED: 6,            # NOT_LEADER_OR_FOLLOWER
    ErrorCode.STALE_PARTITION_EPOCH: 95,   # INVALID_UPDATE_VERSION
    ErrorCode.STALE_MEMBER: 22,            # ILLEGAL_GENERATION
    ErrorCode.TRANSACTION_TIMED_OUT: 47,   # INVALID_PRODUCER_EPOCH (KIP-588)
    ErrorCode.TLS_REQUIRED: UNKNOWN_SERVER_ERROR,          # Kafka has no code: it drops the connection
    ErrorCode.TLS_HANDSHAKE_FAILED: UNKNOWN_SERVER_ERROR,  # client-side only, never on the wire
    ErrorCode.RESOURCE_NOT_FOUND: 91,      # RESOURCE_NOT_FOUND
}
_KAFKA_NUMBER = {int(k): v for k, v in RAFKA_ONLY_AS_KAFKA.items()}


def kafka_error(code: int | None) -> int:
    """A native error code as Kafka's: the same number below 1000 (rafka numbered those after
    Kafka's), ``RAFKA_ONLY_AS_KAFKA`` for a rafka-only one, UNKNOWN_SERVER_ERROR for a number
    rafka does not define. (confluent-kafka 2.16's AdminClient never completes an
    AlterUserScramCredentials future whose user answered −1, which is how a missing credential
    read before RESOURCE_NOT_FOUND was mapped; a timed-out transaction answered −1 made
    librdkafka fail the commit as an unknown error instead of reporting the producer fenced.)"""
    code = int(code or 0)
    return code if code < 1000 else _KAFKA_NUMBER.get(code, UNKNOWN_SERVER_ERROR)


def ms(td: datetime.timedelta | int) -> int:
    return td if isinstance(td, int) else int(td.total_seconds() * 1000)


async def call_native(ctx: KafkaContext, req: KafkaRequest, key: ApiKey, body: dict[str, Any]) -> Any:
    """The native answer; an error the handler raised becomes ``{"error", "message"}`` (as
    the msgpack listener puts it on the wire), so every adapter reads errors one way."""
    try:
        return await ctx.dispatch(Request(int(key), req.correlation_id, body, 0,
                                          req.client_id or "", req.principal, req.client_host))
    except RafkaError as exc:
        return {"error": int(exc.code), "message": exc.message}


def kafka_listeners(registered: str | None) -> dict[str, str]:
    """Listener name -> ``HOST:PORT`` of a registered ``kafka_listener`` string (module doc)."""
    out: dict[str, str] = {}
    for part in (registered or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, addr = part.partition("://")
        if sep:
            out[name.upper()] = addr
        else:
            out["PLAINTEXT"] = part
    return out


def kafka_address(image: MetadataImage, broker_id: int,
                  listener: str = "PLAINTEXT") -> tuple[str, int] | None:
    """The broker's registered Kafka listener named ``listener``; None: it has none."""
    reg = image.cluster.brokers.get(broker_id)
    if reg is None or not reg.kafka_listener:
        return None
    addr = kafka_listeners(reg.kafka_listener).get(listener)
    if addr is None:
        return None
    host, _, port = addr.rpartition(":")
    return host, int(port)


def commit_error(code: int | None) -> int:
    """Member-epoch errors as the classic ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID."""
    code = int(code or 0)
    if code in (110, 113, 1007):  # FENCED_MEMBER_EPOCH, STALE_MEMBER_EPOCH, STALE_MEMBER
        return 22
    return kafka_error(code)
