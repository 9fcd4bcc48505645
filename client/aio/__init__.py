"""Trio-native rafka clients: ``AsyncProducer``, ``AsyncConsumer``, ``AsyncAdmin``.

Each is an async context manager that owns a nursery (its background tasks: the producer's
sender, the consumer's fetch loop, connection readers) and a ``ClientCore`` (connections and the
metadata cache). The sync classes in ``rafka.client.sync`` run these in a background thread.
"""

from rafka.client.aio.admin import (
    AsyncAdmin,
    ClusterDescription,
    NewTopic,
    PartitionDescription,
    TopicDescription,
)
from rafka.client.aio.consumer import AsyncConsumer, Coordinator
from rafka.client.aio.futures import FutureRecordMetadata
from rafka.client.aio.producer import AsyncProducer

__all__ = [
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "ClusterDescription",
    "Coordinator",
    "FutureRecordMetadata",
    "NewTopic",
    "PartitionDescription",
    "TopicDescription",
]
