"""The client conveniences kafka-python / aiokafka users look for (issue 15).

Theory of operation
-------------------
*Serializers* (``AsyncProducer(key_serializer=..., value_serializer=...)``, and so the sync
``Producer``): ``install_serializers`` replaces, on that one producer instance, ``send``,
``send_nowait``, ``send_threadsafe``, ``send_batch`` and ``send_batch_threadsafe`` by wrappers
that turn the key and the value into bytes and call the class's own method. ``None`` passes
through and never reaches a serializer (a tombstone stays a tombstone, as a keyless record stays
keyless). Without serializers nothing is installed: the send paths are exactly the code they
were, with no per-record test.

*Deserializers* (``AsyncConsumer(key_deserializer=..., value_deserializer=...)``):
``deserializing_take`` gives the consumer a ``take`` (``CompletedFetch.take``'s signature) that
builds each ``ConsumerRecord`` with the deserialized key and value, ``None`` passing through.
Without deserializers the consumer keeps ``CompletedFetch.take`` itself — no call per record.
``poll_batch`` (columns) returns the raw bytes either way: it exists for bulk and Arrow use.

*Shortcuts*: ``AsyncConsumer.getmany`` (aiokafka's name for ``poll``; optionally only
some partitions) and the admin's consumer-group methods (``GroupAdminApi``), which wrap the
helpers of ``rafka.client.groups`` — the same code ``rafka group`` runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from rafka.client.types import ConsumerRecord, TopicPartition

if TYPE_CHECKING:
    from rafka.client.aio.admin import AsyncAdmin
    from rafka.client.aio.consumer import AsyncConsumer
    from rafka.client.aio.enqueue import Headers
    from rafka.client.aio.fetch import CompletedFetch
    from rafka.client.aio.producer import AsyncProducer
    from rafka.wire.errors import RafkaError

__all__ = ["ConsumerGroupListing", "GetManyApi", "GroupAdminApi", "deserializing_take",
           "install_serializers"]

Serializer = Callable[[Any], bytes]
Deserializer = Callable[[bytes], Any]
_new = tuple.__new__

# ---------------------------------------------------------------------- producer


def _each(fn: Serializer | None, items: Sequence[Any] | None) -> Sequence[Any] | None:
    if fn is None or items is None:
        return items
    return [fn(x) if x is not None else None for x in items]


def install_serializers(producer: AsyncProducer, key_serializer: Serializer | None,
                        value_serializer: Serializer | None) -> None:
    """Wrap ``producer``'s send methods (this instance only) to serialize keys and values;
    a no-op when both are ``None`` (see the module docstring)."""
    if key_serializer is None and value_serializer is None:
        return
    ks, vs = key_serializer, value_serializer
    cls = type(producer)

    def conv(value: Any, key: Any) -> tuple[bytes | None, bytes | None]:
        return (vs(value) if vs is not None and value is not None else value,
                ks(key) if ks is not None and key is not None else key)

    async def send(topic: str, value: Any = None, key: Any = None, headers: Headers = None,
                   partition: int | None = None, timestamp_ms: int | None = None) -> Any:
        v, k = conv(value, key)
        return await cls.send(producer, topic, v, k, headers, partition, timestamp_ms)

    def sync_send(method: Callable[..., Any]) -> Callable[..., Any]:
        def send_serialized(topic: str, value: Any = None, key: Any = None, headers: Headers = None,
                            partition: int | None = None, timestamp_ms: int | None = None) -> Any:
            v, k = conv(value, key)
            return method(producer, topic, v, k, headers, partition, timestamp_ms)

        return send_serialized

    async def send_batch(topic: str, values: Sequence[Any], keys: Sequence[Any] | None = None,
                         headers: Any = None, partition: int | None = None,
                         timestamp_ms: int | None = None) -> Any:
        return await cls.send_batch(producer, topic, _each(vs, values), _each(ks, keys), headers,
                                    partition, timestamp_ms)

    def send_batch_threadsafe(topic: str, values: Sequence[Any], keys: Sequence[Any] | None = None,
                              headers: Any = None, partition: int | None = None,
                              timestamp_ms: int | None = None) -> Any:
        return cls.send_batch_threadsafe(producer, topic, _each(vs, values), _each(ks, keys),  # type: ignore[arg-type]
                                         headers, partition, timestamp_ms)

    p: Any = producer
    p.send = send
    p.send_nowait = sync_send(cls.send_nowait)
    p.send_threadsafe = sync_send(cls.send_threadsafe)
    p.send_batch = send_batch
    p.send_batch_threadsafe = send_batch_threadsafe


# ---------------------------------------------------------------------- consumer

Take = Callable[["CompletedFetch", int, int], tuple[list[ConsumerRecord], int]]


def deserializing_take(take: Take, key_deserializer: Deserializer | None,
                       value_deserializer: Deserializer | None) -> Take:
    """``take`` itself when both are ``None``; else a ``take`` whose records carry the
    deserialized key and value (``None`` passes through)."""
    if key_deserializer is None and value_deserializer is None:
        return take
    kd = key_deserializer or _identity
    vd = value_deserializer or _identity

    def take_deserialized(cf: CompletedFetch, position: int, max_records: int) -> tuple[list[ConsumerRecord], int]:
        records, position = take(cf, position, max_records)
        return [_new(ConsumerRecord, (t, p, o, ts, tt, None if k is None else kd(k), None if v is None else vd(v), h))
                for t, p, o, ts, tt, k, v, h in records], position

    return take_deserialized


def _identity(x: Any) -> Any:
    return x


class GetManyApi:
    """``getmany``, mixed into ``AsyncConsumer``."""

    async def getmany(self: AsyncConsumer, *partitions: TopicPartition, timeout_ms: float = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """aiokafka's batched poll: records by partition, waiting up to ``timeout_ms`` for some
        (``{}`` if none came); with ``partitions``, only records of those (the others keep
        theirs for a later call). Same positions, pausing and isolation as ``poll``."""
        only = frozenset(TopicPartition(*tp) for tp in partitions) or None
        return await self._poll(timeout_ms, max_records or self.max_poll_records, self._take, only)


# ---------------------------------------------------------------------- admin


class ConsumerGroupListing(NamedTuple):
    """One group of ``list_consumer_groups``: its state (``Empty``, ``Stable``, …) and size."""

    group_id: str
    state: str
    members: int


class GroupAdminApi:
    """Consumer-group administration, mixed into ``AsyncAdmin`` (names as kafka-python's
    ``KafkaAdminClient``); each method wraps a ``rafka.client.groups`` helper."""

    async def list_consumer_groups(self: AsyncAdmin) -> list[ConsumerGroupListing]:
        """Every group any broker knows (with members, or with committed offsets), by id."""
        from rafka.client.groups import list_groups

        self._check_open()
        return [ConsumerGroupListing(g["group_id"], g.get("state", ""), int(g.get("members", 0)))
                for g in await list_groups(self._core)]

    async def describe_consumer_groups(self: AsyncAdmin, group_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Per group: state, epochs, members (id, client, subscription, assignment) and
        ``partitions`` — each committed or assigned partition's committed offset, high
        watermark, lag and owner (what ``rafka group describe`` shows). An unknown group raises
        its named error (``GroupIdNotFoundError``)."""
        from rafka.client.groups import describe_group

        self._check_open()
        return {gid: await describe_group(self._core, gid) for gid in dict.fromkeys(group_ids)}

    async def list_consumer_group_offsets(self: AsyncAdmin, group_id: str,
                                          partitions: Iterable[TopicPartition] | None = None
                                          ) -> dict[TopicPartition, int]:
        """The group's committed offsets (all of them, or of ``partitions``); a partition
        without a committed offset is left out."""
        from rafka.client.groups import fetch_committed

        self._check_open()
        tps = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        found = await fetch_committed(self._core, group_id, tps)
        return {tp: off for tp, off in found.items() if off is not None}

    async def delete_consumer_groups(self: AsyncAdmin, group_ids: Iterable[str], *,
                                     raise_on_error: bool = True) -> dict[str, RafkaError | None]:
        """Delete groups without members (their committed offsets go too). Raises the first
        error (``NonEmptyGroupError``, ``GroupIdNotFoundError``, …) unless
        ``raise_on_error=False``: then ``{group_id: error or None}``."""
        from rafka.client.groups import delete_groups

        self._check_open()
        out = await delete_groups(self._core, list(dict.fromkeys(group_ids)))
        if raise_on_error:
            for err in out.values():
                if err is not None:
                    raise err
        return out
