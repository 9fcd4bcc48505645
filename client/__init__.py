"""rafka clients.

``Producer`` / ``Consumer`` / ``Admin`` (blocking, ``rafka.client.sync``) are thin facades over the
trio-native ``AsyncProducer`` / ``AsyncConsumer`` / ``AsyncAdmin`` (``rafka.client.aio``). Names follow
kafka-python / aiokafka. Every error is a ``client.errors.RafkaError`` subclass with a name.
"""

from rafka.client import errors
from rafka.client import groups as _groups  # noqa: F401,E402  registers the consumer-group coordinator
from rafka.client.aio import AsyncAdmin, AsyncConsumer, AsyncProducer, NewTopic
from rafka.client.sync import Admin, Consumer, Producer
from rafka.client.types import (
    ConsumerRecord,
    GroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)

__all__ = [
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "Consumer",
    "ConsumerRecord",
    "GroupMetadata",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "Producer",
    "RecordMetadata",
    "TopicPartition",
    "errors",
]
