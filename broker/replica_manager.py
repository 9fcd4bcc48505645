"""ReplicaManager: the partitions this broker hosts, their durability and their housekeeping.

Theory of operation
-------------------
The manager is a metadata subscriber. ``on_metadata(image, changes)`` runs before each new
image becomes current and reacts only to ``changes`` (``delta.topics.local_changes``): deletes
first (close the log, remove its directory — a topic deleted and re-created in one delta shows
up in both), then partitions it now leads or follows (open or create the log in
``DATA_DIR/<topic>-<partition>`` with the topic's effective ``LogConfig``, then apply the
registration). The partition table is a plain dict owned by the trio thread.

Opening logs without holding the image back (issue 27). Opening an existing log is recovery
(``log/recovery.py``: segment listing, index checks, after ``kill -9`` a CRC scan and index
rebuild of the unflushed tail, producer state): tens of milliseconds each on a loaded box, so
a restarted broker's first image — which names every partition it holds — took seconds to
become current when ``on_metadata`` opened them all, and every reader of the image waited
(metadata answers, a forwarded admin write waiting for its own offset, the heartbeat that
unfences the broker). The order chosen:

1. ``on_metadata`` applies deletes and config changes, then, per partition it now hosts:
   one already open gets its new registration at once; one whose directory does not exist is
   created at once (a new replica: nothing to recover — a few file creations — and a client
   that created a topic expects to produce to it); an existing log is queued
   (``logs_to_open``: internal topics first, then partitions this broker leads, then the rest,
   each group in partition order).
2. The image then becomes current (``MetadataPublisher.publish``) with those logs not open.
   A queued partition is not in ``partitions``: ``get`` answers NOT_LEADER_OR_FOLLOWER (its
   leader, and "its log is opening"), which every client retries — never a wrong answer, and
   nothing is read or written before its log is recovered. Its leader state does not exist yet,
   so it neither advances a high watermark nor shrinks an ISR; as a follower it is not in the
   fetcher, so its leader elsewhere sees a replica that does not fetch — exactly as while this
   broker was down (the leader's ISR check, acks=all and the HW rules are unchanged).
3. ``_open_queued`` (a task of ``run``) opens the queue one log at a time: the recovery
   (``PartitionLog.open``) in a worker thread, then, back on the trio thread, the partition is
   made with the registration the *current* image holds for it — as the catch-up does, the
   intermediate registrations are history — or the log is closed again if the image no longer
   places it here. A delete removes a queued partition from the queue and its directory
   (nothing has it open); a delete of the one being recovered is finished by the opener once
   the thread returns (close, then remove; queued again if the image placed it here anew).
   The open is the same call as before, so recovery, truncation to the diverging epoch (the
   fetcher, once added) and the HW checkpoint restore are unchanged; the log belongs to the
   trio thread from the moment the thread hands it back, as any log does.
   Why a worker thread, measured (``bench/ab_log_open.py``, docs/quorum.md "the first
   image"): one partition's recovery is one call — after ``kill -9`` a CRC scan of the
   unflushed tail, ~100 ms for a 10 MB partition here, seconds for a large one — so on the
   trio thread every request waits out the open in progress (longest loop stall 262 ms with
   10 MB partitions), in a worker thread the GIL's switch interval bounds it (17 ms); opening
   them all takes 5-20 % longer (a thread hand-off per log, GIL contention).
   ``open_logs_in_thread=False`` opens on the trio thread with a checkpoint after each (the
   bench's other arm).

``wait_logs_open`` returns once the queue is empty (tests, shutdown ordering).

Stray directories (``broker/partition_dirs.py``, docs/durability.md). Every directory this
manager creates gets an identity file (topic id, the image offset that placed it here) before
its first segment. A directory no partition object holds is judged against the image before it
is opened: the partitions a delta places here, and — on the first image, which after a restart
is compared with the empty one and so carries no deletes — every partition directory on disk.
One whose topic id the image (at least as new as the directory) no longer places here is
removed; one of another topic of the same name is removed and its successor created empty; one
the image is too old to decide (``undecided``) is left, unopened, and judged again with every
later image. A delete removes a directory only if it holds the deleted topic's id.

Durability: each partition follows a ``FlushRule`` (``broker/flush_rule.py``): the node's
``log.flush.policy``, or its topic's own ``flush.messages`` / ``flush.ms``. It is computed when
the partition is opened and again when its topic's configs change (``_apply_config_changes``):

* ``fsync_acks`` (``batch``, the default; a topic's ``flush.messages=1``) — group commit:
  every append marks its partition dirty and pokes the flusher; the flusher takes *all* dirty
  partitions of this rule, fsyncs them in one worker thread and then advances each one's durable
  end. Appends that arrive during a flush ride the next one, so a busy broker does one fsync per
  partition per flush round, not per request. ``acks >= 1`` answers wait for the durable end
  (``Partition.produce_outcome``), and a follower fsyncs before its next fetch reports them.
* ``every_messages`` / ``every_ms`` (``messages`` / ``interval``, or a topic's other values) — a
  partition is fsynced, in the same rounds, once that many of its records are unflushed or that
  long after its last flush (``_interval_flusher``, parked while no partition has such a rule);
  answers do not wait for it.
* neither (``none``) — the OS decides.

Inline flushes (``log.flush.inline.max.records``, batch policy only): a group-commit round
(leader) or a follower's per-fetch-response sync that covers at most that many records calls
``fdatasync`` on the trio thread itself, after one checkpoint (so the follower fetches an append
just woke send their answers first), instead of handing it to a worker thread. A hand-off costs
a wake-up of the worker (the job), usually a GIL wait when it comes back, a wake-up of the loop
(the result) and their futex traffic; the price is that the loop serves nothing else while the
disk syncs. So only small rounds — a lone request, nobody else waiting for the loop — go inline:
with 32 producers in flight every fsync inline cut the throughput by a third (the loop could
no longer take the next requests while the disk worked), and those rounds cover many records.
Durability is the same: the same ``_flush_all`` runs before the same ``on_flushed``.
A follower's sync has its own limit, ``log.flush.follower.inline.max.records`` (default 64): its
fetcher waits for the sync before the next fetch whichever thread runs it, so for the small
answers of a busy partition (5–11 records at 32 single-record produces in flight) the hop only
cost CPU: ~5 % of the cluster's per request (docs/performance.md, "A follower's small syncs on
its own thread"). Large answers (a catch-up, a bulk producer) still go to the worker, so a node
that also leads other partitions does not stop serving them while a big sync runs.

High-watermark checkpoints: every ``replica.high.watermark.checkpoint.interval.ms`` (1 s) one
worker-thread round writes ``high-watermark-checkpoint`` for every partition whose HW moved, and
``close`` writes them before closing the logs; a checkpoint may lag the HW, never lead it
(``Partition`` restores its HW from it on open).

Housekeeping runs in the same nursery, bounded and periodic: retention
(``log.retention.check.interval.ms``) and compaction of compacted topics
(``log.cleaner.backoff.ms``). A ``PartitionLog`` belongs to the trio thread (only ``flush`` may
run in a worker thread), so both run on the trio thread, one partition at a time with a
checkpoint in between.

Transaction markers (docs/transactions.md): ``append_marker`` appends a COMMIT/ABORT control
batch through the same path as any leader append (flush, replication, HW); once the
WRITE_TXN_MARKERS handler has seen it acknowledged (``acks=all``) it calls
``marker_acknowledged``, which tells every ``marker_listeners`` callback ``(topic, partition,
producer_id, commit, marker_offset)`` — the group offsets manager registers one to apply or
drop a producer's pending transactional offsets.

Full disk / I/O errors (docs/durability.md, "Disk full"): no storage error leaves a task of this
manager — the broker stays up. A partition whose log cannot open stays unhosted (clients get
NOT_LEADER_OR_FOLLOWER / retry) until the next metadata change; a failed leader append answers
KAFKA_STORAGE_ERROR (the append left the log as it was); a failed follower append backs the
fetcher off and is retried; HW checkpoints, retention, compaction and flushes log and retry next
round; closing a log (topic deletion, shutdown) is best effort. A log whose fsync failed is
offline until restart and its waiting produce requests are answered KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import trio
from rafka.broker.config import effective_topic_config
from rafka.broker.events import EventLog
from rafka.broker.flush_rule import FlushRule, flush_rule
from rafka.broker.partition import Partition, write_hw_checkpoint
from rafka.broker.partition_dirs import (
    IDENTITY_FILE,
    DirIdentity,
    Verdict,
    is_leftover,
    judge,
    parse_dir_name,
    read_identity,
    remove_dir,
    write_identity,
)
from rafka.broker.produce_wait import ProduceDeadlines
from rafka.log.compaction import compact
from rafka.log.errors import LogError
from rafka.log.partition_log import PartitionLog
from rafka.metadata.delta import LocalChanges
from rafka.metadata.image import MetadataImage, PartitionRegistration, TopicPartition
from rafka.wire.errors import ErrorCode, RafkaError, error_for
from rafka.wire.protocol import ApiKey
from rafka.wire.wakeups import grid_deadline, sleep_on_grid

__all__ = ["ReplicaManager", "partition_dir_name", "run_in_worker_thread"]

log = logging.getLogger("rafka.replica_manager")
# One AlterPartition attempt (see _send_alter): well above a live controller's commit time.
ALTER_ATTEMPT_TIMEOUT_S = 3.0


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


async def run_in_worker_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in one of trio's cached worker threads; returns (or raises) its outcome.

    ``trio.to_thread.run_sync`` without what it adds per call on top of the thread hand-off: a
    ``CapacityLimiter`` round, and naming the worker thread after the job (two ``prctl`` calls
    per job). Group-commit flushes run once per produce round on the leader and once per fetch
    response on every follower, so that was paid several times per acks=all request:
    74-95 -> 48-56 µs of CPU per call, measured on this 2-core VM. Like ``run_sync``'s default
    it cannot be cancelled: a flush that started is waited for. Flushes are few at a time (one
    group-commit round per replica manager and one sync per fetcher link), so no limiter is
    needed to bound the threads."""
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()

    def deliver(result: Any) -> None:
        token.run_sync_soon(trio.lowlevel.reschedule, task, result)

    trio.lowlevel.start_thread_soon(lambda: fn(*args), deliver)
    return await trio.lowlevel.wait_task_rescheduled(lambda _raise: trio.lowlevel.Abort.FAILED)


class ReplicaManager:
    def __init__(self, broker_id: int, data_dir: Path, settings: dict[str, Any],
                 topic_defaults: dict[str, Any], events: EventLog, *,
                 open_logs_in_thread: bool = True) -> None:
        self.broker_id = broker_id
        self.data_dir = data_dir
        self.settings = settings
        self.topic_defaults = topic_defaults
        self.events = events
        # a round covering at most this many records runs inline (0: never; "Inline flushes")
        self.flush_inline_max_records: int = int(settings.get("log.flush.inline.max.records", 1))
        # the same for a follower's sync of what a fetch answer appended
        self.follower_flush_inline_max_records: int = int(
            settings.get("log.flush.follower.inline.max.records", 64))
        self._follower_records = 0  # appended by fetch responses since the last follower sync
        self.unsafe_ack_before_replication: bool = bool(
            settings.get("unsafe.ack.before.replication", False))
        self.partitions: dict[TopicPartition, Partition] = {}
        self.image = MetadataImage.EMPTY
        # existing logs still to open, in opening order (module docstring, "Opening logs")
        self.logs_to_open: dict[TopicPartition, None] = {}
        self._to_open_added = trio.Event()
        self._all_open = trio.Event()
        self._all_open.set()
        self.open_logs_in_thread = open_logs_in_thread
        self._opening: TopicPartition | None = None  # in a worker thread (open_logs_in_thread)
        self._opening_deleted = False  # ... and deleted meanwhile: the opener removes it
        self.logs_opened_queued = 0  # statistics: logs opened by _open_queued
        # stray directories (broker/partition_dirs.py): the first image sweeps the data
        # directory; those an image was too old to decide are judged again by the next ones
        self.undecided: set[TopicPartition] = set()
        self._legacy_warned: set[TopicPartition] = set()
        self.strays_removed = 0  # statistics
        self._dirty = trio.Event()
        self._unflushed_messages = 0  # appended to fsync_acks partitions since the last round
        self._rules_changed = trio.Event()  # wakes _interval_flusher: an every_ms rule came or went
        self._node_rule = flush_rule(None, settings)  # a topic that sets no flush.* key follows it
        self.flush_rounds = 0
        self.inline_flushes = 0  # rounds run on the trio thread (log.flush.inline.max.records)
        # called with each flush round's duration in seconds (broker/metrics.py)
        self.flush_observer: Callable[[float], None] | None = None
        # produce requests' timeout_ms, for every partition: one timer (broker/produce_wait.py)
        self.produce_deadlines = ProduceDeadlines()
        # replication seam (broker/replication): set by attach_replication()
        self.fetcher: Any = None
        self.channel: Any = None
        self.broker_epoch: Callable[[], int] = lambda: -1
        self._isr_poke = trio.Event()
        # (topic, partition, producer_id, commit, marker_offset) of each acknowledged marker
        self.marker_listeners: list[Callable[[str, int, int, bool, int], None]] = []

    def attach_replication(self, fetcher: Any, channel: Any, broker_epoch: Callable[[], int]) -> None:
        """Plug in the follower fetcher (``ReplicaFetcherManager``) and the controller channel
        that carries AlterPartition; without them the manager serves single-replica partitions."""
        self.fetcher = fetcher
        self.channel = channel
        self.broker_epoch = broker_epoch
        fetcher.on_append = self._on_follower_append
        fetcher.on_high_watermark = self._on_follower_hw
        fetcher.on_truncate = self._on_follower_truncate
        fetcher.sync_appended = self._sync_follower_logs
        fetcher.needs_sync = self._follower_needs_sync

    # -- lookup -------------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Partition:
        """The local partition, or the wire error a client should see."""
        p = self.partitions.get(TopicPartition(topic, partition))
        if p is not None:
            return p
        reg = self.image.topics.partition(topic, partition)
        if reg is None:
            raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"unknown topic or partition {topic}/{partition}")
        tp = TopicPartition(topic, partition)
        if tp in self.logs_to_open or tp == self._opening:
            raise error_for(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                            f"broker {self.broker_id}: the log of {topic}/{partition} is opening "
                            f"({len(self.logs_to_open)} logs to open; leader is {reg.leader})",
                            leader_id=reg.leader)
        raise error_for(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                        f"broker {self.broker_id} does not host {topic}/{partition} "
                        f"(leader is {reg.leader})", leader_id=reg.leader)

    def get_leader(self, topic: str, partition: int, current_leader_epoch: int | None = None) -> Partition:
        p = self.get(topic, partition)
        p.check_leader(current_leader_epoch)
        return p

    # -- metadata -----------------------------------------------------------------------------

    async def on_metadata(self, image: MetadataImage, changes: LocalChanges) -> None:
        previous, self.image = self.image, image
        self._apply_config_changes(previous, image)
        for tp in sorted(changes.deletes):
            self._delete(tp, previous)
        placed = {**changes.followers, **changes.leaders}
        # directories no delta names: on the first image every one on disk (a topic deleted
        # or moved away while this broker was down), then those not yet decided ("Stray
        # directories" in the module docstring)
        if previous is MetadataImage.EMPTY:
            unexplained = self._partition_dirs_on_disk()
        else:
            unexplained = set(self.undecided)
        queue: list[TopicPartition] = []
        for tp in sorted(placed.keys() | unexplained):
            if tp in self.partitions:
                self.undecided.discard(tp)
                if tp not in placed:
                    continue
            elif tp in self.logs_to_open or tp == self._opening:
                continue  # the opener applies the registration current when it opens it
            else:
                directory = self.data_dir / partition_dir_name(tp.topic, tp.partition)
                if directory.exists():
                    verdict = self._judge_dir(image, tp, directory)
                    if verdict is Verdict.OPEN:
                        queue.append(tp)  # a log to recover: the opener's (module docstring)
                        continue
                    if verdict is not Verdict.REPLACE:
                        continue  # removed (STRAY), or left for a later image (WAIT, KEEP)
                elif tp not in placed:
                    self.undecided.discard(tp)
                    continue
            reg = placed.get(tp) or image.topics.partition(tp.topic, tp.partition)
            if reg is None:
                continue
            try:
                self._apply(image, tp, reg)
            except (LogError, OSError) as exc:
                log.error("cannot open %s/%d: %s", tp.topic, tp.partition, exc)
            await trio.lowlevel.checkpoint()
        if queue:
            self._queue_opens(image, queue)

    def _partition_dirs_on_disk(self) -> set[TopicPartition]:
        """The partition directories on disk; removes what a removal cut short left behind."""
        try:
            entries = list(self.data_dir.iterdir()) if self.data_dir.is_dir() else []
        except OSError as exc:
            log.error("cannot list %s: %s", self.data_dir, exc)
            return set()
        for e in entries:
            if is_leftover(e.name) and e.is_dir():
                log.info("%s: removing what an interrupted removal left", e)
                shutil.rmtree(e, ignore_errors=True)
        return {tp for e in entries if (tp := parse_dir_name(e.name)) is not None and e.is_dir()}

    def _judge_dir(self, image: MetadataImage, tp: TopicPartition, directory: Path) -> Verdict:
        """Judge an existing directory that no partition object holds; remove it if it is
        stray (or another topic's, of the same name, that the image replaced)."""
        identity = read_identity(directory)
        verdict = judge(identity, image, tp, self.broker_id)
        if verdict in (Verdict.WAIT, Verdict.KEEP):
            if identity is None:
                if tp not in self._legacy_warned:
                    self._legacy_warned.add(tp)
                    log.warning("%s: a partition directory without %s that the image does not "
                                "place here: left alone", directory, IDENTITY_FILE)
            elif tp not in self.undecided:  # logged once, judged again by every later image
                self.undecided.add(tp)
                log.warning("%s/%d: directory of topic id %s created at metadata offset %d, the "
                            "image (offset %d) is older: left alone (%s)", tp.topic, tp.partition,
                            identity.topic_id, identity.created_at, image.offset, verdict.value)
            return verdict
        self.undecided.discard(tp)
        if verdict is Verdict.OPEN:
            if identity is None:  # a directory from before identity files, placed here: adopt it
                topic = image.topics.by_name[tp.topic]
                try:
                    write_identity(directory, DirIdentity(topic.topic_id, image.offset))
                except OSError as exc:  # a full disk: open it as before; the next start adopts it
                    log.warning("%s: cannot write %s: %s", directory, IDENTITY_FILE, exc)
            return verdict
        assert identity is not None
        if not remove_dir(directory):
            # an I/O error: never open what is left of it as the image's topic; the next image
            # tries again
            log.error("%s: cannot remove the directory of topic id %s; its partition stays "
                      "unhosted here", directory, identity.topic_id)
            self.undecided.add(tp)
            return Verdict.WAIT
        self.strays_removed += 1
        current = image.topics.by_name.get(tp.topic)
        self.events.emit("stray-partition", tp=f"{tp.topic}/{tp.partition}", topic_id=identity.topic_id,
                         created_at=identity.created_at, image=image.offset, verdict=verdict.value)
        log.warning("%s/%d: removed the directory of topic id %s (created at metadata offset %d): "
                    "the image at offset %d %s", tp.topic, tp.partition, identity.topic_id,
                    identity.created_at, image.offset,
                    "places no replica of it here" if current is None or current.topic_id == identity.topic_id
                    else f"places topic id {current.topic_id} of that name here")
        return verdict

    def _queue_opens(self, image: MetadataImage, tps: list[TopicPartition]) -> None:
        """Queue existing logs for ``_open_queued``: internal topics, then led, then followed."""
        def rank(tp: TopicPartition) -> tuple[int, TopicPartition]:
            reg = image.topics.partition(tp.topic, tp.partition)
            led = reg is not None and reg.leader == self.broker_id
            return (0 if tp.topic.startswith("__") else 1 if led else 2), tp

        for tp in sorted(tps, key=rank):
            self.logs_to_open[tp] = None
        log.info("%d partition logs to open after this image (%d queued now)",
                 len(self.logs_to_open), len(tps))
        if self._all_open.is_set():  # a waiter on the unset one keeps waiting on it
            self._all_open = trio.Event()
        self._to_open_added.set()

    @property
    def log_opening(self) -> TopicPartition | None:
        """The partition whose log a worker thread is recovering now (``open_logs_in_thread``)."""
        return self._opening

    async def wait_logs_open(self) -> None:
        """Return once no log is queued or opening."""
        await self._all_open.wait()

    async def _open_queued(self) -> None:
        """Open the queued logs one at a time (module docstring, "Opening logs")."""
        while True:
            if not self.logs_to_open:
                self._all_open.set()
                await self._to_open_added.wait()
                self._to_open_added = trio.Event()
                continue
            tp = next(iter(self.logs_to_open))
            del self.logs_to_open[tp]
            try:
                if self.open_logs_in_thread:
                    await self._open_in_thread(tp)
                else:
                    reg = self._placed_here(tp)
                    if reg is not None:
                        self._apply(self.image, tp, reg)
                        self.logs_opened_queued += 1
            except (LogError, OSError) as exc:
                log.error("cannot open %s/%d: %s", tp.topic, tp.partition, exc)
            await trio.lowlevel.checkpoint()

    def _placed_here(self, tp: TopicPartition) -> PartitionRegistration | None:
        """The current registration of ``tp`` if this broker is still a replica and has no
        partition object for it yet."""
        if tp in self.partitions:
            return None
        reg = self.image.topics.partition(tp.topic, tp.partition)
        return reg if reg is not None and self.broker_id in reg.replicas else None

    async def _open_in_thread(self, tp: TopicPartition) -> None:
        """The worker-thread variant: recovery off the trio thread, the partition made here."""
        if self._placed_here(tp) is None:
            return
        directory = self.data_dir / partition_dir_name(tp.topic, tp.partition)
        cfg = effective_topic_config(self.image.topics.by_name.get(tp.topic), self.topic_defaults)
        self._opening, self._opening_deleted = tp, False
        try:
            plog = await trio.to_thread.run_sync(PartitionLog.open, directory, cfg)
        finally:
            self._opening = None
        reg = self._placed_here(tp)
        if self._opening_deleted or reg is None:
            try:
                plog.close()
            except (LogError, OSError) as exc:
                log.warning("closing deleted %s/%d: %s", tp.topic, tp.partition, exc)
            if self._opening_deleted:
                remove_dir(directory)
                if reg is not None:  # deleted and placed here again: a new, empty log
                    self.logs_to_open[tp] = None
            return
        plog.config = effective_topic_config(self.image.topics.by_name.get(tp.topic), self.topic_defaults)
        self._apply(self.image, tp, reg, plog)
        self.logs_opened_queued += 1

    def _apply_config_changes(self, previous: MetadataImage, image: MetadataImage) -> None:
        """Topic configs altered through the controller (ALTER_CONFIGS) reach the partitions
        already open here: retention, segment size, cleanup policy and min.insync.replicas take
        effect at their next use (next roll, retention check, cleaner pass, produce)."""
        changed = {
            name for name, topic in image.topics.by_name.items()
            if (old := previous.topics.by_name.get(name)) is not None and old.configs != topic.configs
        }
        if not changed:
            return
        for tp, p in self.partitions.items():
            if tp.topic not in changed:
                continue
            topic = image.topics.by_name[tp.topic]
            cfg = effective_topic_config(topic, self.topic_defaults)
            p.log.config = cfg
            p.set_min_insync_replicas(cfg.min_insync_replicas)
            self._set_rule(tp, p, flush_rule(topic.configs, self.settings))
            log.info("%s: topic config changed: %s", p.name, dict(topic.configs))

    def _set_rule(self, tp: TopicPartition, p: Partition, rule: FlushRule) -> None:
        """``p`` follows ``rule`` from now on (module docstring, "Durability")."""
        if rule == p.flush_rule:
            return
        was = p.flush_rule
        p.set_flush_rule(rule)
        log.info("%s: flush rule: %s (was: %s)", p.name, rule.describe(), was.describe())
        if rule.fsync_acks and not was.fsync_acks:
            if p.pending_flush:
                self._dirty.set()  # the unflushed tail: the next group commit takes it
            follower = None if self.fetcher is None else self.fetcher.partitions.get(tp)
            if follower is not None:  # what it appended unsynced is synced before it is reported
                follower.unsynced = True
        if rule.every_ms != was.every_ms:
            self._rules_changed.set()

    def _apply(self, image: MetadataImage, tp: TopicPartition, reg: PartitionRegistration,
               plog: PartitionLog | None = None) -> None:
        p = self.partitions.get(tp)
        if p is None:
            topic = image.topics.by_name.get(tp.topic)
            cfg = effective_topic_config(topic, self.topic_defaults)
            rule = flush_rule(None if topic is None else topic.configs, self.settings)
            if plog is None:
                directory = self.data_dir / partition_dir_name(tp.topic, tp.partition)
                if not directory.exists():  # a new replica: its identity before its first segment
                    directory.mkdir(parents=True)  # (whose creation fsyncs the directory)
                    topic_id = topic.topic_id if topic is not None else ""
                    write_identity(directory, DirIdentity(topic_id, image.offset), sync_dir=False)
                plog = PartitionLog.open(directory, cfg)  # (an existing one: judged, _judge_dir)
            p = Partition(tp.topic, tp.partition, plog, self.broker_id, self.events,
                          fsync_acks=rule.fsync_acks,
                          min_insync_replicas=cfg.min_insync_replicas,
                          replica_lag_time_max_ms=self.settings.get("replica.lag.time.max.ms", 30_000),
                          unsafe_ack_before_replication=self.unsafe_ack_before_replication,
                          deadlines=self.produce_deadlines)
            p.alter_poke = self._isr_poke_set
            p.set_flush_rule(rule)
            if rule != self._node_rule:
                log.info("%s: flush rule from its topic's config: %s", p.name, rule.describe())
            if rule.every_ms is not None:
                self._rules_changed.set()
            self.partitions[tp] = p
        p.apply_registration(reg)
        if p.is_leader and p.durable_end < p.log.log_end_offset:
            # a follower's tail not yet fsynced (its fetcher syncs before the next fetch, but
            # that fetch may never come now): the group commit takes it from here
            p.pending_flush = True
            self._dirty.set()
        if self.fetcher is not None:
            if p.is_leader or reg.leader < 0:
                self.fetcher.remove_partitions([tp])
            else:
                self.fetcher.add_partitions({tp: (reg.leader, reg.leader_epoch, p.log)})
                # a replica being added by a reassignment catches up throttled (kraft/reassign.py)
                adding = self.broker_id in reg.adding_replicas
                self.fetcher.set_throttle(tp, reg.throttle_bytes_per_s if adding else 0)
        if p.pending_alter is not None:
            self._isr_poke.set()

    def _delete(self, tp: TopicPartition, previous: MetadataImage) -> None:
        """``tp`` of the topic ``previous`` names is deleted here, or moved away from here."""
        p = self.partitions.pop(tp, None)
        undecided = tp in self.undecided  # the only kind that can hold another topic's id
        self.undecided.discard(tp)
        self.logs_to_open.pop(tp, None)  # never opened: nothing holds its files
        if self.fetcher is not None:
            self.fetcher.remove_partitions([tp])
        directory = self.data_dir / partition_dir_name(tp.topic, tp.partition)
        if tp == self._opening:  # a worker thread is recovering it: the opener removes it
            self._opening_deleted = True
            self.events.emit("delete-partition", tp=f"{tp.topic}/{tp.partition}")
            log.info("deleted partition %s/%d (its log was opening)", tp.topic, tp.partition)
            return
        if p is not None:
            p.deleted = True
            p.notify()
            try:
                p.log.close()
            except (LogError, OSError) as exc:
                log.warning("closing deleted %s: %s", p.name, exc)
        gone = previous.topics.by_name.get(tp.topic)
        identity = read_identity(directory) if undecided else None
        if identity is not None and gone is not None and identity.topic_id != gone.topic_id:
            # another topic of that name, newer than the image (Verdict.WAIT): not this delete's
            log.warning("%s/%d: the delete of topic id %s leaves the directory of topic id %s",
                        tp.topic, tp.partition, gone.topic_id, identity.topic_id)
            self.undecided.add(tp)
            return
        remove_dir(directory)
        self.events.emit("delete-partition", tp=f"{tp.topic}/{tp.partition}")
        log.info("deleted partition %s/%d", tp.topic, tp.partition)

    # -- appends ------------------------------------------------------------------------------

    def append(self, p: Partition, records: bytes, acks: int, *, from_coordinator: bool = False) -> Any:
        """Leader append (raises log / wire errors); pokes the flusher. ``from_coordinator``: a
        coordinator of this broker writes (transactional offsets, markers: base sequence -1)."""
        info = (p.append_as_leader(records, acks, from_coordinator=True) if from_coordinator
                else p.append_as_leader(records, acks))
        if not info.duplicate:
            self.appended(p, info.last_offset - info.base_offset + 1)
        return info

    def append_marker(self, p: Partition, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, txn_seq: int = -1) -> Any:
        """Leader append of a transaction marker (``acks=all``); pokes the flusher."""
        info = p.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, txn_seq)
        self.appended(p, 1)
        return info

    def marker_acknowledged(self, p: Partition, producer_id: int, commit: bool,
                            marker_offset: int) -> None:
        """Tell the marker listeners; one that fails is logged (the marker is in the log, and
        a listener's owner rebuilds its state from the log when it reloads)."""
        for listener in list(self.marker_listeners):
            try:
                listener(p.topic, p.partition, producer_id, commit, marker_offset)
            except Exception:
                log.exception("%s: marker listener %r failed for producer %d at offset %d",
                              p.name, listener, producer_id, marker_offset)

    def appended(self, p: Partition, records: int) -> None:
        rule = p.flush_rule
        if rule.fsync_acks:
            self._unflushed_messages += records
            # the next group-commit round fsyncs it: let the disk start now (log/writeback.py)
            p.log.start_writeback()
            self._dirty.set()
            return
        p.unflushed_records += records
        if rule.every_messages is not None and p.unflushed_records >= rule.every_messages:
            p.flush_due = True
            self._dirty.set()

    # -- follower callbacks (ReplicaFetcherManager, trio thread) -------------------------------

    def _on_follower_append(self, tp: tuple[str, int], info: Any) -> None:
        p = self.partitions.get(TopicPartition(*tp))
        if p is not None:
            p.after_append()
            self._follower_records += info.last_offset - info.base_offset + 1
            if not p.fsync_acks:
                self.appended(p, info.last_offset - info.base_offset + 1)
            # fsync_acks: the fetcher fsyncs (``_sync_follower_logs``) before its next fetch
            # reports the new log end offset; pending_flush stays set as a fallback for the
            # group commit in case this broker becomes leader first.

    def _follower_needs_sync(self, tp: tuple[str, int]) -> bool:
        """Whether the fetcher must have ``_sync_follower_logs`` fsync what it appended to
        ``tp`` before its next fetch reports it: the partition's rule has ``fsync_acks``."""
        p = self.partitions.get(TopicPartition(*tp))
        return p is not None and p.fsync_acks

    async def _sync_follower_logs(self, tps: list[tuple[str, int]]) -> set[tuple[str, int]]:
        """Follower group commit (rule ``fsync_acks``): one worker-thread round fsyncs every
        partition a fetch response appended to; returns those now durable (or gone). The
        fetcher reports a partition's new log end offset to its leader only after this, so a
        record counted in the leader's high watermark — and so every ``acks=all`` record — is
        on disk on every ISR member."""
        work: list[tuple[tuple[str, int], Partition]] = []
        ok: set[tuple[str, int]] = set()
        for tp in tps:
            p = self.partitions.get(TopicPartition(*tp))
            if p is None or p.deleted:
                ok.add(tp)
            else:
                work.append((tp, p))
        if not work:
            return ok
        self.flush_rounds += 1
        records, self._follower_records = self._follower_records, 0
        results = await self._run_flush([p for _, p in work], records,
                                        self.follower_flush_inline_max_records)
        for (tp, p), res in zip(work, results, strict=True):
            if isinstance(res, BaseException):
                log.error("follower flush of %s failed: %s", p.name, res)
                continue
            p.pending_flush = p.log.log_end_offset > res
            p.on_flushed(res)
            ok.add(tp)
        return ok

    def _on_follower_hw(self, tp: tuple[str, int], hw: int) -> None:
        p = self.partitions.get(TopicPartition(*tp))
        if p is not None:
            # never below what this follower already adopted (committed records stay
            # committed; a leader restarted from a lagging checkpoint reports less for a while);
            # only a truncation (Partition.on_truncated) lowers it
            p.follower_hw = max(p.follower_hw, hw)
            p.refresh_hw()

    def _on_follower_truncate(self, tp: tuple[str, int], from_offset: int, to_offset: int,
                              leader_epoch: int) -> None:
        p = self.partitions.get(TopicPartition(*tp))
        if p is not None:
            p.on_truncated(to_offset)
        self.events.truncate(tp[0], tp[1], to_offset, from_offset, leader_epoch, "diverging-epoch")

    # -- ISR changes (AlterPartition) ---------------------------------------------------------

    def _isr_poke_set(self) -> None:
        self._isr_poke.set()

    async def _isr_loop(self) -> None:
        """Every ``replica.lag.time.max.ms / 2`` (or at once when a state proposes a change):
        run ``maybe_shrink_isr`` on every led partition and send what the states ask for.
        Sends run concurrently (one slow answer must not hold back other partitions' shrink
        checks), at most one per leader state — the state never has two requests out."""
        period = self.settings.get("replica.lag.time.max.ms", 30_000) / 2000
        async with trio.open_nursery() as nursery:
            while True:
                with trio.move_on_at(grid_deadline(period)):
                    await self._isr_poke.wait()
                self._isr_poke = trio.Event()
                if self.channel is None:
                    continue
                for p in list(self.leader_partitions()):
                    taken = p.take_alter_request()
                    if taken is not None:
                        nursery.start_soon(self._send_alter, p, *taken)

    async def _send_alter(self, p: Partition, st: Any, req: Any) -> None:
        """One AlterPartition round trip; its fate goes back exactly once, and only into the
        leader state that asked (``Partition.on_alter_result`` drops it otherwise)."""
        body = req.to_body(self.broker_id, self.broker_epoch())
        answer: dict[str, Any] | None = None
        code = ErrorCode.REQUEST_TIMED_OUT
        try:
            with trio.fail_after(10):
                # per attempt: a paused or hung controller must not hold the ISR change for the
                # whole 10 s (acks=all produces wait on it); a cut attempt is safe to repeat —
                # the partition epoch guards AlterPartition and the outcome comes back as metadata
                answer = await self.channel.request(ApiKey.ALTER_PARTITION, body,
                                                    attempt_timeout_s=ALTER_ATTEMPT_TIMEOUT_S)
            code = ErrorCode(answer.get("error", 0) or 0)
        except RafkaError as exc:
            code = exc.code
        except trio.TooSlowError:
            pass
        except Exception as exc:  # noqa: BLE001 - must still answer the state (retriable)
            log.warning("%s: AlterPartition failed: %r", p.name, exc)
        log.info("%s: AlterPartition %s %s -> %s", p.name, req.reason, list(req.new_isr),
                 code.name if code else f"ISR {answer.get('isr') if answer else None}")
        p.on_alter_result(answer, code, st, req)
        if p.pending_alter is not None:
            self._isr_poke.set()

    # -- background tasks ---------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._flusher)
            nursery.start_soon(self.produce_deadlines.run)
            nursery.start_soon(self._interval_flusher)
            nursery.start_soon(self._retention_loop)
            nursery.start_soon(self._cleaner_loop)
            nursery.start_soon(self._isr_loop)
            nursery.start_soon(self._hw_checkpoint_loop)
            nursery.start_soon(self._open_queued)
            if self.fetcher is not None:
                await nursery.start(self.fetcher.run)
            task_status.started()

    async def _flusher(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = trio.Event()
            await self.flush_dirty()

    async def _run_flush(self, parts: list[Partition], records: int,
                         inline_max: int | None = None) -> list[int | BaseException]:
        """``_flush_all(parts)`` for a round covering ``records`` appended records: inline on the
        trio thread after one checkpoint when ``records <= inline_max`` (by default
        ``log.flush.inline.max.records``; a follower's sync passes its own limit), otherwise in
        a worker thread."""
        limit = self.flush_inline_max_records if inline_max is None else inline_max
        if 0 < records <= limit:
            await trio.lowlevel.cancel_shielded_checkpoint()
            self.inline_flushes += 1
            return _flush_all(parts)
        return await run_in_worker_thread(_flush_all, parts)

    async def _interval_flusher(self) -> None:
        """Fsyncs each partition whose rule has ``every_ms`` once that long has passed since its
        last flush, checking at the shortest such period. While no partition has such a rule
        (the default) it waits for one without a timer, so it costs an idle broker nothing."""
        while True:
            periods = [p.flush_rule.every_ms for p in self.partitions.values()
                       if p.flush_rule.every_ms is not None]
            if not periods:
                await self._rules_changed.wait()
                self._rules_changed = trio.Event()
                continue
            await trio.sleep(min(periods) / 1000)
            now = trio.current_time()
            due = False
            for p in self.partitions.values():
                ms = p.flush_rule.every_ms
                if ms is not None and p.pending_flush and (now - p.flushed_at) * 1000 >= ms:
                    p.flush_due = due = True
            if due:
                await self.flush_dirty()

    async def flush_dirty(self) -> None:
        """One group-commit round: fsync every partition whose rule wants it now. That is every
        ``fsync_acks`` partition appended to since the last round, and every other one whose
        ``every_messages`` / ``every_ms`` came due (``flush_due``)."""
        work = [p for p in self.partitions.values()
                if p.pending_flush and (p.fsync_acks or p.flush_due)]
        if not work:
            return
        records, self._unflushed_messages = self._unflushed_messages, 0
        now = trio.current_time()
        for p in work:
            p.pending_flush = p.flush_due = False
            p.flushed_at = now
            if not p.fsync_acks:  # (an fsync_acks partition's records are in _unflushed_messages)
                records += p.unflushed_records
            p.unflushed_records = 0
        self.flush_rounds += 1
        start = time.perf_counter()
        results = await self._run_flush(work, records)
        if self.flush_observer is not None:
            self.flush_observer(time.perf_counter() - start)
        for p, res in zip(work, results, strict=True):
            if isinstance(res, BaseException):
                log.error("flush of %s failed: %s", p.name, res)
                if p.log.offline is None:
                    p.pending_flush = True  # not durable yet: the next round tries again
                p.notify()  # an offline log answers its waiting produce requests
                continue
            p.on_flushed(res)

    async def _hw_checkpoint_loop(self) -> None:
        interval = self.settings.get("replica.high.watermark.checkpoint.interval.ms", 1000) / 1000
        while True:
            await sleep_on_grid(interval)
            await self.checkpoint_high_watermarks()

    async def checkpoint_high_watermarks(self) -> None:
        """One round: write the HW checkpoint of every partition whose HW moved (the values are
        taken on the trio thread, so each is a HW the partition really had)."""
        work = [(p, p.high_watermark) for p in self.partitions.values()
                if not p.deleted and p.high_watermark != p.checkpointed_hw]
        if not work:
            return
        results = await trio.to_thread.run_sync(_write_hw_checkpoints, work)
        for (p, hw), res in zip(work, results, strict=True):
            if isinstance(res, BaseException):
                if not p.deleted:
                    log.warning("HW checkpoint of %s failed: %s", p.name, res)
                continue
            p.checkpointed_hw = hw

    async def _retention_loop(self) -> None:
        interval = self.settings.get("log.retention.check.interval.ms", 300_000) / 1000
        while True:
            await sleep_on_grid(interval)
            for p in list(self.partitions.values()):
                if p.deleted:
                    continue
                try:
                    p.log.enforce_retention()
                except (LogError, OSError) as exc:
                    log.warning("retention of %s: %s", p.name, exc)
                await trio.lowlevel.checkpoint()

    async def _cleaner_loop(self) -> None:
        interval = self.settings.get("log.cleaner.backoff.ms", 15_000) / 1000
        while True:
            await sleep_on_grid(interval)
            for p in list(self.partitions.values()):
                if p.deleted or not p.log.config.compact:
                    continue
                try:
                    # never below the last stable offset: open transactions and records not
                    # yet committed (above the HW) stay as they are
                    compact(p.log, upper_bound=p.last_stable_offset)
                except (LogError, OSError) as exc:
                    log.warning("compaction of %s: %s", p.name, exc)
                await trio.lowlevel.checkpoint()

    # -- shutdown -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close every log cleanly (flush + clean-shutdown marker)."""
        for p in list(self.partitions.values()):
            try:
                p.checkpoint_hw()
            except OSError as exc:
                log.error("HW checkpoint of %s: %s", p.name, exc)
            try:
                p.log.close()
            except (LogError, OSError) as exc:
                log.error("closing %s: %s", p.name, exc)
        self.partitions.clear()

    def leader_partitions(self) -> Iterable[Partition]:
        return (p for p in self.partitions.values() if p.is_leader)


def _write_hw_checkpoints(work: list[tuple[Partition, int]]) -> list[None | BaseException]:
    out: list[None | BaseException] = []
    for p, hw in work:
        try:
            write_hw_checkpoint(p.log.directory, hw)
            out.append(None)
        except Exception as exc:  # reported per partition by the caller
            out.append(exc)
    return out


def _flush_all(parts: list[Partition]) -> list[int | BaseException]:
    out: list[int | BaseException] = []
    for p in parts:
        try:
            out.append(p.log.flush())
        except Exception as exc:  # reported per partition by the caller
            out.append(exc)
    return out
