"""rafka clients.

``Producer`` / ``Consumer`` / ``Admin`` (blocking, ``client.sync``) are thin facades over the
trio-native ``AsyncProducer`` / ``AsyncConsumer`` / ``AsyncAdmin`` (``client.aio``). Names follow
kafka-python / aiokafka. Every error is a ``client.errors.RafkaError`` subclass with a name.
"""

from client import errors
from client import groups as _groups  # noqa: F401,E402  registers the consumer-group coordinator
from client.aio import AsyncAdmin, AsyncConsumer, AsyncProducer, NewTopic
from client.sync import Admin, Consumer, Producer
from client.types import (
    ConsumerRecord,
    GroupMetadata,
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
    "OffsetAndTimestamp",
    "Producer",
    "RecordMetadata",
    "TopicPartition",
    "errors",
]
