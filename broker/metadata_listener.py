"""The broker's view of the ``@metadata`` log: tail it, fold it, publish images.

Theory of operation
-------------------
``MetadataListener.run`` long-polls ``METADATA_FETCH`` from the controllers by offset
(``from_offset = image.offset + 1``), rotating to the next voter on failure. A response holds
either entries ``[[offset, epoch, record], ...]`` or, when the broker is behind the log start,
a snapshot ``{offset, epoch, records}``. Entries are folded with ``MetadataDelta``; a snapshot
is loaded as a whole new image (``records_to_image``) and the local changes are computed by
folding the snapshot's records onto the empty image, plus a delete for every local partition
that the snapshot no longer has.

``MetadataPublisher`` is the one place a broker's current image lives. ``publish`` first awaits
every subscriber (the replica manager makes partitions it now leads or follows, deletes those it
lost) and only then makes the image current and wakes ``wait_for_offset`` waiters, so whoever
sees offset N in the image can rely on the local partitions of offset N existing.

The image comes only from the controller quorum: tests build the same deltas from records and
publish them the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import trio

from broker.controller_channel import ControllerChannel
from broker.errors import ErrorCode, RafkaError
from broker.protocol import ApiKey
from metadata.delta import LocalChanges, MetadataDelta
from metadata.image import MetadataImage, TopicPartition
from metadata.records import MetadataRecord, record_from_dict
from metadata.snapshot import records_to_image

__all__ = ["MetadataPublisher", "MetadataListener", "Subscriber", "fold_records"]

log = logging.getLogger("rafka.metadata")

# subscriber(image, changes): react to what changed for this broker
Subscriber = Callable[[MetadataImage, LocalChanges], Awaitable[None]]


def fold_records(image: MetadataImage, entries: Iterable[tuple[int, int, MetadataRecord]],
                 broker_id: int) -> tuple[MetadataImage, LocalChanges]:
    """Fold ``(offset, epoch, record)`` entries onto ``image`` → (new image, local changes)."""
    delta = MetadataDelta(image)
    for offset, epoch, record in entries:
        delta.replay(record, offset, epoch)
    new = delta.apply()
    return new, delta.topics.local_changes(broker_id)


def _snapshot_changes(old: MetadataImage, records: list[MetadataRecord], new: MetadataImage,
                      broker_id: int) -> LocalChanges:
    delta = MetadataDelta(MetadataImage.EMPTY)
    for i, r in enumerate(records):
        delta.replay(r, i, new.epoch)
    delta.apply()
    changes = delta.topics.local_changes(broker_id)
    for name, topic in old.topics.by_name.items():
        for p, reg in topic.partitions.items():
            if broker_id not in reg.replicas:
                continue
            now = new.topics.by_name.get(name)
            if now is None or now.topic_id != topic.topic_id or p not in now.partitions \
                    or broker_id not in now.partitions[p].replicas:
                changes.deletes.add(TopicPartition(name, p))
    return changes


class MetadataPublisher:
    """Holds the current image; subscribers see each change before it becomes current."""

    def __init__(self, broker_id: int, image: MetadataImage = MetadataImage.EMPTY) -> None:
        self.broker_id = broker_id
        self.image = image
        self._subscribers: list[Subscriber] = []
        self._changed = trio.Event()

    def subscribe(self, fn: Subscriber) -> None:
        self._subscribers.append(fn)

    async def publish(self, image: MetadataImage, changes: LocalChanges) -> None:
        for fn in self._subscribers:
            await fn(image, changes)
        self.image = image
        self._changed.set()
        self._changed = trio.Event()

    async def publish_records(self, entries: Iterable[tuple[int, int, MetadataRecord]]) -> None:
        """Fold entries onto the current image and publish (the listener, and tests)."""
        image, changes = fold_records(self.image, entries, self.broker_id)
        await self.publish(image, changes)

    async def publish_snapshot(self, offset: int, epoch: int, records: list[MetadataRecord]) -> None:
        new = records_to_image(records, offset, epoch)
        await self.publish(new, _snapshot_changes(self.image, records, new, self.broker_id))

    async def wait_changed(self) -> None:
        await self._changed.wait()

    async def wait_for(self, predicate: Callable[[MetadataImage], bool]) -> MetadataImage:
        while not predicate(self.image):
            await self._changed.wait()
        return self.image

    async def wait_for_offset(self, offset: int) -> MetadataImage:
        """Return once the image includes ``offset`` (callers bound the wait)."""
        return await self.wait_for(lambda img: img.offset >= offset)


class MetadataListener:
    """Tails the controllers' ``@metadata`` log into a ``MetadataPublisher``."""

    def __init__(self, publisher: MetadataPublisher, channel: ControllerChannel, *,
                 max_records: int = 2000, max_wait_ms: int = 500) -> None:
        self.publisher = publisher
        self.channel = channel
        self.max_records = max_records
        self.max_wait_ms = max_wait_ms
        self.fetches = 0
        self.errors = 0

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            try:
                await self.fetch_once()
            except RafkaError as exc:
                self.errors += 1
                log.info("metadata fetch failed: %s", exc)
                await trio.sleep(0.1)

    async def fetch_once(self) -> None:
        pub = self.publisher
        body = await self.channel.request_any(ApiKey.METADATA_FETCH, {
            "node_id": pub.broker_id,
            "from_offset": pub.image.offset + 1,
            "max_records": self.max_records,
            "max_wait_ms": self.max_wait_ms,
        }, attempt_timeout_s=self.max_wait_ms / 1000 + 5)  # a long-poll that never returns: next voter
        self.fetches += 1
        err = body.get("error", 0)
        snap = body.get("snapshot")
        if snap:
            records = [record_from_dict(r) for r in snap["records"]]
            if snap["offset"] > pub.image.offset:
                log.info("loading metadata snapshot at offset %d", snap["offset"])
                await pub.publish_snapshot(snap["offset"], snap["epoch"], records)
        if err and err != ErrorCode.OFFSET_OUT_OF_RANGE:
            raise RafkaError(f"metadata fetch: error {err}: {body.get('message')}")
        entries = [(o, e, record_from_dict(r)) for o, e, r in body.get("entries") or ()
                   if o > pub.image.offset]
        if entries:
            await pub.publish_records(entries)
        elif not snap and not err:
            await trio.sleep(0)  # an empty long-poll answer: poll again at once
        elif err:
            await trio.sleep(0.05)
