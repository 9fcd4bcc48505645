"""The small value types of the client API (names as in kafka-python).

``TopicPartition`` is the one defined by ``rafka.metadata.image`` (the metadata engineer's type), so
that keys of consumer dicts and of broker-side maps are the same class; it is re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from rafka.metadata.image import TopicPartition

__all__ = [
    "TopicPartition",
    "RecordMetadata",
    "ConsumerRecord",
    "OffsetAndTimestamp",
    "OffsetAndMetadata",
    "CommitOffsets",
    "commit_offsets",
    "PartitionMetadata",
    "BrokerMetadata",
    "GroupMetadata",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
]

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed (offset -1 with ``acks=0``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]  # immutable; () when the record has none


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class OffsetAndMetadata(NamedTuple):
    """A committed offset with an application's metadata string (kafka-python's and
    confluent-kafka's type): accepted wherever offsets are committed — ``Consumer.commit``,
    ``Producer.send_offsets_to_transaction`` — and given back by ``Consumer.committed(tp,
    metadata=True)`` and ``rafka group describe``. ``leader_epoch`` is accepted for source
    compatibility and not sent (rafka validates commits by member epoch)."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


# what the commit calls take: per partition a plain offset or an ``OffsetAndMetadata``
CommitOffsets = (Mapping[TopicPartition, int | OffsetAndMetadata]
                 | Iterable[tuple[TopicPartition, int | OffsetAndMetadata]])


def commit_offsets(offsets: CommitOffsets) -> dict[TopicPartition, OffsetAndMetadata]:
    """``offsets`` as ``{TopicPartition: OffsetAndMetadata}`` (a plain int: no metadata). A
    ``TypeError`` names anything else, e.g. an offset that is neither."""
    items = offsets.items() if isinstance(offsets, Mapping) else offsets
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, off in items:
        if isinstance(off, OffsetAndMetadata):
            entry = OffsetAndMetadata(int(off.offset), str(off.metadata or ""), off.leader_epoch)
        elif isinstance(off, tuple) and len(off) >= 1 and not isinstance(off, bool):
            entry = OffsetAndMetadata(int(off[0]), str(off[1] if len(off) > 1 and off[1] else ""))
        elif isinstance(off, int) and not isinstance(off, bool):
            entry = OffsetAndMetadata(off)
        else:
            raise TypeError(f"offset for {tp}: an int or an OffsetAndMetadata, not {type(off).__name__}")
        out[TopicPartition(*tp)] = entry
    return out


class BrokerMetadata(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None = None


class PartitionMetadata(NamedTuple):
    topic: str
    partition: int
    leader: int  # -1 = no leader
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: int = 0


class GroupMetadata(NamedTuple):
    """A consumer's group identity, for ``Producer.send_offsets_to_transaction`` (KIP-447):
    the offsets committed in a transaction are validated like the member's own commit.
    ``member_id`` ``""`` / ``member_epoch`` -1: a commit from outside the group's membership."""

    group_id: str
    member_id: str = ""
    member_epoch: int = -1
    min_metadata_offset: int = -1
