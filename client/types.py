"""The small value types of the client API (names as in kafka-python).

``TopicPartition`` is the one defined by ``rafka.metadata.image`` (the metadata engineer's type), so
that keys of consumer dicts and of broker-side maps are the same class; it is re-exported here.
"""

from __future__ import annotations

from typing import NamedTuple

from rafka.metadata.image import TopicPartition

__all__ = [
    "TopicPartition",
    "RecordMetadata",
    "ConsumerRecord",
    "OffsetAndTimestamp",
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
