"""What every Kafka API adapter shares: the context it runs in and the native round trip.

Theory of operation: an adapter (``apis.py``, ``groups.py``, ``txn.py``, ``admin.py``) gets a
``KafkaContext`` — the node's dispatch, its metadata image, its id, cluster id and broker
settings, the classic members it coordinates and its fetch sessions — and calls ``call_native`` to put one rafka
request through that dispatch, so a raised native error arrives as ``{"error", "message"}``
like any answer. ``kafka_error`` turns a native code into Kafka's (the same number below
1000: rafka numbered its errors after Kafka's), ``kafka_address`` finds a broker's registered
Kafka listener.
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
from rafka.wire.errors import RafkaError
from rafka.wire.protocol import ApiKey, Request

__all__ = ["KafkaContext", "kafka_error", "commit_error", "call_native", "kafka_address", "ms",
           "UNKNOWN_SERVER_ERROR", "CORRUPT_MESSAGE", "UNKNOWN_TOPIC_OR_PARTITION",
           "UNSUPPORTED_COMPRESSION_TYPE", "NO_AUTH_OPS"]

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
    fetch_sessions: FetchSessionCache = field(default_factory=FetchSessionCache)  # KIP-227


def kafka_error(code: int | None) -> int:
    """A native error code as Kafka's (the same number below 1000)."""
    code = int(code or 0)
    return code if code < 1000 else UNKNOWN_SERVER_ERROR


def ms(td: datetime.timedelta | int) -> int:
    return td if isinstance(td, int) else int(td.total_seconds() * 1000)


async def call_native(ctx: KafkaContext, req: KafkaRequest, key: ApiKey, body: dict[str, Any]) -> Any:
    """The native answer; an error the handler raised becomes ``{"error", "message"}`` (as
    the msgpack listener puts it on the wire), so every adapter reads errors one way."""
    try:
        return await ctx.dispatch(Request(int(key), req.correlation_id, body, 0,
                                          req.client_id or ""))
    except RafkaError as exc:
        return {"error": int(exc.code), "message": exc.message}


def kafka_address(image: MetadataImage, broker_id: int) -> tuple[str, int] | None:
    reg = image.cluster.brokers.get(broker_id)
    if reg is None or not reg.kafka_listener:
        return None
    host, _, port = reg.kafka_listener.rpartition(":")
    return host, int(port)


def commit_error(code: int | None) -> int:
    """Member-epoch errors as the classic ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID."""
    code = int(code or 0)
    if code in (110, 113, 1007):  # FENCED_MEMBER_EPOCH, STALE_MEMBER_EPOCH, STALE_MEMBER
        return 22
    return kafka_error(code)
