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

Startup catch-up (Kafka's rule: a broker does not act on metadata until it has caught up with
the log). The log is a history: folded batch by batch from offset 0, its intermediate images
name leaders of epochs that ended long ago, and a replica manager acting on them would lead a
stale epoch and serve or accept data as that leader. So until ``caught_up``, every response is
folded into ONE pending ``MetadataDelta`` (a snapshot replaces it with a delta over the
snapshot's image) and nothing is published. The target is the ``committed_offset`` of the first
response **served by the active controller**: ``leader_id`` in the answer equals the voter that
answered (``ControllerChannel.request_any_from``). A follower voter's committed offset is never
used: a voter that has just restarted serves from its own local log and may report an offset
far behind the quorum's. Answers from followers are still folded (their entries are committed),
and the leader they name is tried next (``note_leader``). Without a target the requests do not
long-poll (``max_wait_ms = 0``, a short sleep when nothing came), so a leader with nothing newer
answers at once. Once the pending image's offset reaches the target, it is published once, with
local changes computed against the image the publisher had before the catch-up (the delta's
own changes; after a snapshot, the final image's records folded onto EMPTY plus deletes, as for
a snapshot). From then on each folded batch is published as it comes.

No reachable active controller (an election, a partition) means no target: the broker keeps
folding and stays not caught up — its image stays what it was (EMPTY after a restart), so it
leads and follows nothing, and its heartbeats report that offset, so the controller keeps it
fenced. Registration is independent of this, so startup completes as soon as a controller is
active: the leader's first answer gives the target. A deposed leader that does not know it yet
can still claim to lead and give a smaller target; the first image is then the whole committed
state of a moment ago (what any lagging broker has), never a point deep in the history.

A restart does not have to fold from offset 0: with a ``checkpoint``
(``broker/image_checkpoint.py``, ``DATA_DIR/@metadata-image.ckpt``) the catch-up starts from the
image saved there — loaded in a worker thread, then treated like a controller snapshot: the
fetches ask from its offset + 1, the first image's local changes are the final image's records
folded onto the image the publisher had, and it is still published only at the active
controller's committed offset. A checkpoint above that offset is dropped and the log folded
from the start. Once caught up, a task of ``run`` saves the current image again whenever it is
``every_records`` past the last checkpoint. The ``catch-up`` event says how many records the
catch-up folded and from which checkpoint (``bench/restart_phases.py``).

``MetadataPublisher`` is the one place a broker's current image lives. ``publish`` first awaits
every subscriber (the replica manager makes partitions it now leads or follows, deletes those it
lost) and only then makes the image current and wakes ``wait_for_offset`` waiters, so whoever
sees offset N in the image can rely on the local partitions of offset N being known to the
replica manager: open, or — an existing log after a restart — queued to open, answering the
retriable NOT_LEADER_OR_FOLLOWER until it is (``broker/replica_manager.py``, "Opening logs";
the image no longer waits for recovery, issue 27).

The image comes only from the controller quorum: tests build the same deltas from records and
publish them the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import trio
from rafka.broker.controller_channel import ControllerChannel
from rafka.broker.events import EventLog
from rafka.broker.image_checkpoint import ImageCheckpoint
from rafka.metadata.delta import LocalChanges, MetadataDelta
from rafka.metadata.image import MetadataImage, TopicPartition
from rafka.metadata.records import MetadataRecord, record_from_dict
from rafka.metadata.snapshot import image_to_records, records_to_image
from rafka.wire.errors import ErrorCode, RafkaError
from rafka.wire.protocol import ApiKey

__all__ = ["MetadataPublisher", "MetadataListener", "Subscriber", "fold_records"]

log = logging.getLogger("rafka.metadata")

# A long poll parks up to ``max_wait_ms`` (``metadata.fetch.max.wait.ms``, 2000) on the voter
# and returns as soon as the log advances, so its length costs no latency; a longer one only
# means fewer empty round trips on an idle cluster (issue 26: 2 a second per broker at the old
# 500 ms). The attempt gives up this much later and tries the next voter (a paused voter): the
# 2.0 + 3.5 s is the 0.5 + 5 s it was, so a stuck voter is left no later than before.
_LONG_POLL_SLACK_S = 3.5

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

    def __init__(self, broker_id: int, image: MetadataImage = MetadataImage.EMPTY, *,
                 events: EventLog | None = None) -> None:
        self.broker_id = broker_id
        self.image = image
        self._subscribers: list[Subscriber] = []
        self._changed = trio.Event()
        self.events = events
        self.published = 0  # images made current

    def subscribe(self, fn: Subscriber) -> None:
        self._subscribers.append(fn)

    async def publish(self, image: MetadataImage, changes: LocalChanges) -> None:
        for fn in self._subscribers:
            await fn(image, changes)
        self.image = image
        self.published += 1
        self._changed.set()
        self._changed = trio.Event()
        local = len(changes.leaders) + len(changes.followers) + len(changes.deletes)
        if self.events is not None and (self.published == 1 or local):
            # evidence of when this image became current, relative to the ``partition`` events
            # of the logs it names (the first image after a restart: issue 27)
            self.events.emit("metadata-image", offset=image.offset, local_changes=local,
                             first=self.published == 1)

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
    """Tails the controllers' ``@metadata`` log into a ``MetadataPublisher``.

    Until ``caught_up`` (see the module docstring) it folds without publishing."""

    def __init__(self, publisher: MetadataPublisher, channel: ControllerChannel, *,
                 max_records: int = 2000, max_wait_ms: int = 2000,
                 checkpoint: ImageCheckpoint | None = None) -> None:
        self.publisher = publisher
        self.channel = channel
        self.max_records = max_records
        self.max_wait_ms = max_wait_ms
        # the image kept on disk across restarts (broker/image_checkpoint.py): loaded as the
        # catch-up's starting point, saved as the image moves on
        self.checkpoint = checkpoint
        self.checkpoint_offset: int | None = None  # the checkpoint this catch-up started from
        self.catchup_folded = 0  # records folded by the startup catch-up (entries, not snapshots)
        self.fetches = 0
        self.errors = 0
        # the startup catch-up: nothing is published before the folded image reaches the
        # committed offset reported by the active controller itself
        self.caught_up = False
        self.caught_up_event = trio.Event()
        self.catchup_target: int | None = None
        self._base: MetadataImage | None = None  # the publisher's image when catch-up began
        self._pending: MetadataDelta | None = None  # everything folded since (unpublished)
        self._pending_from_snapshot = False
        self._pending_from_checkpoint = False  # the pending image started at the checkpoint's

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            if self.checkpoint is not None:
                nursery.start_soon(self._checkpoint_loop, self.checkpoint)
            task_status.started()
            while True:
                try:
                    await self.fetch_once()
                except RafkaError as exc:
                    self.errors += 1
                    log.info("metadata fetch failed: %s", exc)
                    await trio.sleep(0.1)

    async def _checkpoint_loop(self, cp: ImageCheckpoint) -> None:
        """Save the current image whenever it is ``cp.every_records`` past the last checkpoint
        (at most once per ``cp.min_interval_s``); only published images, so only caught-up ones."""
        if cp.every_records <= 0:
            return
        await self.caught_up_event.wait()
        while True:
            image = await self.publisher.wait_for(
                lambda img: img.offset >= cp.saved_offset + cp.every_records)
            await trio.to_thread.run_sync(cp.save, image)
            await trio.sleep(cp.min_interval_s)

    async def _fetch(self, from_offset: int, max_wait_ms: int) -> tuple[int | None, dict[str, Any]]:
        body = {
            "node_id": self.publisher.broker_id,
            "from_offset": from_offset,
            "max_records": self.max_records,
            "max_wait_ms": max_wait_ms,
        }
        # a long-poll that never returns (a paused voter): next voter after this slack
        timeout_s = max_wait_ms / 1000 + _LONG_POLL_SLACK_S
        return await self.channel.request_any_from(ApiKey.METADATA_FETCH, body,
                                                   attempt_timeout_s=timeout_s)

    async def fetch_once(self) -> None:
        if not self.caught_up:
            await self._catch_up_once()
            return
        pub = self.publisher
        _responder, body = await self._fetch(pub.image.offset + 1, self.max_wait_ms)
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

    async def _catch_up_once(self) -> None:
        """One fetch of the startup catch-up: fold, learn the target, publish once at the end."""
        if self._pending is None:
            await self._start_catch_up()
        pending = self._pending
        # No target yet: ask without a long-poll, so that a leader that has nothing newer than
        # what we folded says so at once (its committed offset is what we are waiting for).
        wait_ms = self.max_wait_ms if self.catchup_target is not None else 0
        responder, body = await self._fetch(pending.offset + 1, wait_ms)
        self.fetches += 1
        err = body.get("error", 0)
        snap = body.get("snapshot")
        if snap and snap["offset"] > pending.offset:
            log.info("loading metadata snapshot at offset %d (startup catch-up)", snap["offset"])
            records = [record_from_dict(r) for r in snap["records"]]
            pending = self._pending = MetadataDelta(records_to_image(records, snap["offset"], snap["epoch"]))
            self._pending_from_snapshot = True
            self._pending_from_checkpoint = False
            del records
        if err and err != ErrorCode.OFFSET_OUT_OF_RANGE:
            raise RafkaError(f"metadata fetch: error {err}: {body.get('message')}")
        folded = 0
        for o, e, r in body.get("entries") or ():
            if o > pending.offset:
                pending.replay(record_from_dict(r), o, e)
                folded += 1
        self.catchup_folded += folded
        leader = body.get("leader_id")
        leader_served = not err and responder is not None and leader == responder
        if leader_served and self.catchup_target is None:
            self.catchup_target = int(body["committed_offset"])
            log.info("metadata catch-up: the active controller %d reports committed offset %d",
                     responder, self.catchup_target)
            if self._pending_from_checkpoint and self.checkpoint_offset is not None \
                    and self.catchup_target < self.checkpoint_offset:
                # the checkpoint is ahead of the quorum's committed log: not this log's history
                # (a controller quorum started afresh) or a deposed leader's stale answer; the
                # fold from the start is right in both cases (broker/image_checkpoint.py)
                log.warning("metadata image checkpoint at offset %d is ahead of the committed "
                            "offset %d: folding the log from the start", self.checkpoint_offset,
                            self.catchup_target)
                assert self._base is not None
                self._pending = MetadataDelta(self._base)
                self._pending_from_snapshot = self._pending_from_checkpoint = False
                self.checkpoint_offset = None
                self.catchup_folded = 0
                if self.checkpoint is not None:
                    self.checkpoint.saved_offset = -1  # replace it once caught up
                return
        if self.catchup_target is not None and pending.offset >= self.catchup_target:
            await self._finish_catch_up()
            return
        if not leader_served and isinstance(leader, int) and leader >= 0 and leader != responder:
            self.channel.note_leader(leader)  # ask the leader next: only its committed offset counts
        if not folded and not snap:
            # nothing new from this voter: before a target is known the answers are not
            # long-polls, so do not spin (an election, or a voter that is behind)
            await trio.sleep(0.05 if err or self.catchup_target is None else 0)

    async def _start_catch_up(self) -> None:
        """Begin from the publisher's image, or from the checkpoint when that is newer (a
        restart: the image is EMPTY); the checkpoint's image is then handled like a snapshot."""
        self._base = self.publisher.image
        self._pending = MetadataDelta(self._base)
        cp = self.checkpoint
        if cp is not None and cp.every_records > 0:
            image = await trio.to_thread.run_sync(cp.load)
            if image is not None and image.offset > self._base.offset:
                self._pending = MetadataDelta(image)
                self._pending_from_snapshot = self._pending_from_checkpoint = True
                self.checkpoint_offset = image.offset
        log.info("metadata catch-up: folding the log from offset %d without acting on it%s",
                 self._pending.offset + 1,
                 "" if self.checkpoint_offset is None else " (after the local checkpoint)")

    async def _finish_catch_up(self) -> None:
        base, pending = self._base, self._pending
        assert base is not None and pending is not None
        image = pending.apply()
        if self._pending_from_snapshot:
            changes = _snapshot_changes(base, image_to_records(image), image, self.publisher.broker_id)
        else:
            changes = pending.topics.local_changes(self.publisher.broker_id)
        self._base = self._pending = None
        self._pending_from_snapshot = self._pending_from_checkpoint = False
        log.info("metadata catch-up done at offset %d (target %s, %d records folded%s): "
                 "publishing the first image", image.offset, self.catchup_target,
                 self.catchup_folded, "" if self.checkpoint_offset is None
                 else f" after the checkpoint at {self.checkpoint_offset}")
        if self.publisher.events is not None:  # where a restart's time went (bench/restart_phases.py)
            self.publisher.events.emit("catch-up", offset=image.offset, target=self.catchup_target,
                                       folded=self.catchup_folded, fetches=self.fetches,
                                       checkpoint=self.checkpoint_offset)
        await self.publisher.publish(image, changes)
        self.caught_up = True
        self.caught_up_event.set()
