"""Committed offsets: data in ``__consumer_offsets``, served by the broker that leads its partition.

Theory of operation
-------------------
Committed offsets are high-rate data, not metadata, so they live in the internal compacted topic
``__consumer_offsets`` (``offsets.topic.num.partitions``, default 10 — Kafka's 50 is heavy for a
small local cluster; replication factor ``min(3, brokers)``; ``cleanup.policy=compact``), as in
Kafka. A group's offsets all live in partition ``crc32(group_id) % partitions``
(:func:`offsets_partition`); the leader of that partition is the group's *coordinator* for
offsets and the admin APIs. Finding it needs no extra API: it is the METADATA of
``__consumer_offsets`` (the client creates the topic when it is missing).

Record format and the in-memory map key → value per offsets partition (:class:`OffsetsCache`):
``broker/groups/offsets_cache.py``. The coordinator keeps one cache per offsets partition it
leads (placement, leadership and the per-epoch state table as every internal topic's:
``broker/internal_topic.py``). It is rebuilt lazily: the first request after this broker became
leader in a new leader epoch reads the whole (compacted) partition, synchronously (no await in
between, so no append can interleave). A commit is appended with ``acks=all`` and enters the map
only once it is acknowledged, so OFFSET_FETCH never returns an offset that a leader failover could
lose. Reads answered from the map (OFFSET_FETCH, DESCRIBE_GROUPS) first pass a read barrier
(``broker/read_barrier.py``: an ``acks=all`` tombstone of the key ``["", "", -1]``), so a broker
that was paused or cut off while it led the partition, and does not know yet that it was deposed,
answers ``NOT_COORDINATOR`` instead of offsets its successor has since overwritten (txn chaos
seed 25).

Validation of OFFSET_COMMIT against this broker's metadata image (the group's membership is
metadata, decided by the controller): a member commit (``member_epoch >= 0``) first waits
(bounded) until the image includes ``min_metadata_offset`` — the offset of the member's last
heartbeat — then: unknown member → ``UNKNOWN_MEMBER_ID``; epoch neither the member's epoch nor
its previous one (a commit racing the heartbeat that advanced it) → ``FENCED_MEMBER_EPOCH``; a partition the member does not own (``assigned ∪ pending_revocation``)
→ ``STALE_MEMBER`` for that partition. A commit from outside the group (``member_epoch -1``, e.g.
``assign()`` consumers, admin resets) is accepted only while the group has no members.

That image can lag the controller (a broker cut off from the controllers while clients still
reach it), so a member the controller has expired can go on committing here. What keeps the
committed offset from moving back is OFFSET_FETCH: a member's fetch carries its epoch and
``min_metadata_offset`` too, waits for the image the same way and is validated the same way;
then — as every read from the cache does (``_confirmed``) — it passes the read barrier and waits
for the commits that were in flight when it arrived (``_inflight``). Once a new owner has read
the offsets, the image here includes its assignment, hence the old owner's expiry or
revocation, and the old owner's commits are refused; every commit accepted before was
acknowledged and is in what it read (queue chaos seed 3, session 28; docs/groups.md).

Offsets in a transaction (docs/transactions.md): TXN_OFFSET_COMMIT is validated like
OFFSET_COMMIT and appended as a *transactional* batch (the producer's id and epoch, base sequence
-1, appended by this coordinator: ``from_coordinator``). Its offsets stay pending per producer id
(:attr:`OffsetsCache.pending`, invisible to OFFSET_FETCH) until that producer's COMMIT marker is
acknowledged in the partition (the replica manager's marker listener: applied at the marker's
offset) or dropped by its ABORT marker. Loading a partition replays the same rules from the
batches and markers it reads.

Expiry (Kafka's ``offsets.retention.minutes``, KIP-211): every
``offsets.retention.check.interval.ms`` the coordinator tombstones all offsets of each group it
leads that has no members, no offsets pending in a transaction and no commit in flight, once
``offsets.retention.minutes`` have passed since the later of its newest commit timestamp and
the moment this coordinator saw its last member leave (remembered in memory only: after a
failover the commit timestamps alone decide, which can only make an expiry later than
KIP-211's, never earlier). A group with members never loses its offsets, however old. The
decision and the tombstones' append happen with no await in between, and a commit appended
before the decision holds the group back (``_inflight``), so an expiry never overwrites a
newer commit; the cache's offset order does the rest (:meth:`OffsetsCache.apply`).

Broker seam (what the broker calls; see :class:`GroupOffsetsManager`)::

    groups = GroupOffsetsManager(replica_manager, publisher)   # broker/replica_manager.py, broker/metadata_listener.py
    # dispatch: api keys OFFSET_COMMIT, OFFSET_FETCH, LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS,
    # ALTER_GROUP_OFFSETS (31-36) -> await groups.handlers[api_key](body)
    # CONSUMER_GROUP_HEARTBEAT (30) is forwarded to the active controller like the other controller APIs.

It needs of the replica manager only ``get_leader(topic, partition)`` (a ``Partition`` or a raised
wire error), ``append(partition, batch, acks)`` and ``image``; of a ``Partition``
``topic``, ``partition``, ``leader_epoch``, ``high_watermark``,
``wait_produce(last_offset, acks, leader_epoch=None)`` and ``log``
(``log_start_offset``, ``log_end_offset``, ``read_bytes(offset, max_bytes)``); of the publisher
``wait_for_offset(offset)``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import trio
from rafka.broker.groups.offsets_cache import (
    OFFSETS_TOPIC,
    Key,
    OffsetsCache,
    OffsetValue,
    encode_key,
    encode_value,
    offsets_partition,
    offsets_topic_spec,
)
from rafka.broker.internal_topic import (
    InternalTopic,
    InternalTopicStatistics,
    LedPartition,
    replay_chunk,
)
from rafka.broker.read_barrier import ReadBarrier, ReadBarrierStatistics
from rafka.broker.txn.opening import TxnVerifier, opens_transaction, verify_opening
from rafka.kraft.groups.coordinator import assignment_body
from rafka.log.batch import build_batch
from rafka.metadata.groups import GroupImage
from rafka.metadata.image import MetadataImage
from rafka.wire.errors import ErrorCode, Handler, RafkaError, answer_errors, error_for
from rafka.wire.protocol import ApiKey

# The record format's names are re-exported: ``offsets`` is where the broker looks them up.
__all__ = ["CommittedOffset", "GroupOffsetsManager", "GroupOffsetsStatistics", "OFFSETS_TOPIC",
           "offsets_partition", "offsets_topic_spec"]

log = logging.getLogger("rafka.groups.offsets")

MAX_METADATA_LEN: Final = 4096
MAX_COMMIT_PARTITIONS: Final = 10_000
_ACKS_ALL: Final = -1
DEFAULT_RETENTION_MS: Final = 7 * 24 * 3600 * 1000  # Kafka's offsets.retention.minutes: 10080

# --------------------------------------------------------------------------- broker seam


class _ReplicaManager(Protocol):
    image: MetadataImage

    def get_leader(self, topic: str, partition: int) -> Any: ...
    def append(self, p: Any, records: bytes, acks: int, *, from_coordinator: bool = False) -> Any: ...


class _Publisher(Protocol):
    async def wait_for_offset(self, offset: int) -> MetadataImage: ...


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    group_id: str
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class GroupOffsetsStatistics:
    """A snapshot of :class:`GroupOffsetsManager` (``statistics()``), for metrics and tests."""

    offsets_topic: InternalTopicStatistics
    committed: tuple[CommittedOffset, ...]  # of every group whose offsets partition it leads
    commits_in_flight: int  # appended, not acknowledged yet
    offsets_expired: int  # tombstoned by expiry since start
    read_barrier: ReadBarrierStatistics


class GroupOffsetsManager:
    """The broker side of groups: ``handlers[api_key](body) -> body`` for api keys 31–36."""

    def __init__(
        self,
        replica_manager: _ReplicaManager,
        publisher: _Publisher,
        *,
        wall_clock_ms: Callable[[], int] | None = None,
        metadata_wait_ms: int = 5000,
        append_timeout_ms: int = 10_000,
        retention_ms: int = DEFAULT_RETENTION_MS,
        retention_check_interval_ms: int = 600_000,
    ) -> None:
        self.rm = replica_manager
        self.publisher = publisher
        self._wall_ms = wall_clock_ms or (lambda: int(time.time() * 1000))
        self.metadata_wait_ms = metadata_wait_ms
        self.append_timeout_ms = append_timeout_ms
        self.retention_ms = retention_ms
        self.retention_check_interval_ms = retention_check_interval_ms
        # the led partitions of __consumer_offsets (broker/internal_topic.py); ``caches`` is
        # its state table: partition index -> the cache of the leader epoch it was loaded in
        self.offsets_topic: InternalTopic[OffsetsCache] = InternalTopic(replica_manager, OFFSETS_TOPIC)
        self.caches = self.offsets_topic.states
        # group -> its commits appended and not acknowledged yet, each with the event its
        # ``_append`` sets when it ends (a read waits for those it finds on arrival: _confirmed)
        self._inflight: dict[str, set[trio.Event]] = {}
        self._had_members: set[str] = set()  # groups seen with members at the last expiry pass
        self._empty_since: dict[str, int] = {}  # group -> wall ms its last member was seen gone
        self.expired = 0  # offsets tombstoned by expiry since start (metrics, tests)
        # the node's verifier (broker/handlers/__init__.py sets it): a transaction's first
        # offsets in a partition are verified with its coordinator, as PRODUCE's batches are
        self.txn_verifier: TxnVerifier | None = None
        # the barrier's tombstone: no group "" has a partition -1, the load folds it as a no-op
        self.barrier = ReadBarrier(replica_manager, encode_key("", "", -1), timeout_s=append_timeout_ms / 1000,
                                   wall_clock_ms=self._wall_ms)
        self.handlers: dict[int, Handler] = {
            ApiKey.OFFSET_COMMIT: answer_errors(self.offset_commit),
            ApiKey.OFFSET_FETCH: answer_errors(self.offset_fetch),
            ApiKey.LIST_GROUPS: answer_errors(self.list_groups),
            ApiKey.DESCRIBE_GROUPS: answer_errors(self.describe_groups),
            ApiKey.DELETE_GROUPS: answer_errors(self.delete_groups),
            ApiKey.ALTER_GROUP_OFFSETS: answer_errors(self.alter_group_offsets),
            ApiKey.OFFSET_DELETE: answer_errors(self.offset_delete),
            ApiKey.TXN_OFFSET_COMMIT: answer_errors(self.txn_offset_commit),
        }
        listeners = getattr(replica_manager, "marker_listeners", None)
        if listeners is not None:
            listeners.append(self.on_marker)

    # -- coordinator lookup -----------------------------------------------------------------

    def _num_partitions(self) -> int:
        n = self.offsets_topic.num_partitions()
        if not n:
            raise error_for(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} does not exist yet"
            )
        return n

    def _coordinator(self, group_id: str) -> tuple[LedPartition, OffsetsCache]:
        """The offsets partition of ``group_id`` (we must lead it) and its loaded cache."""
        n = offsets_partition(group_id, self._num_partitions())
        p = self.offsets_topic.leader(n, repr(group_id))
        return p, self._cache(n, p)

    async def _confirmed(self, group_id: str) -> OffsetsCache:
        """The group's cache, for a read: only after a read barrier (``broker/read_barrier.py``)
        proved this broker still leads the offsets partition — a broker paused or cut off while
        it led it would answer from a stale cache (txn chaos seed 25) — and after the group's
        commits that were in flight when the read arrived have been answered, so the read holds
        every commit accepted before it (a new owner must not start below one: queue chaos
        seed 3, session 28)."""
        p, _ = self._coordinator(group_id)
        settling = list(self._inflight.get(group_id, ()))
        await self.barrier.confirm(p)
        for done in settling:
            await done.wait()
        return self._coordinator(group_id)[1]

    def _cache(self, n: int, p: LedPartition) -> OffsetsCache:
        cache = self.offsets_topic.current(n, p)
        if cache is None:
            cache = self.caches[n] = self._load(p)
        return cache

    def _led_caches(self) -> list[OffsetsCache]:
        """The loaded caches of every ``__consumer_offsets`` partition this broker leads now."""
        return [self._cache(i, p) for i, p in self.offsets_topic.led()]

    def _load(self, p: LedPartition) -> OffsetsCache:
        """Replay ``p`` into a new cache, in one go: no await, so no append interleaves."""
        cache = OffsetsCache(p.leader_epoch)
        off = p.log.log_start_offset
        while (nxt := replay_chunk(p.log, off, cache.load)) is not None:
            off = nxt
        cache.loaded_to = off
        log.info(
            "loaded %d committed offsets (%d groups) up to offset %d",
            len(cache.values),
            len(cache.by_group),
            off,
        )
        return cache

    async def _append(self, group_id: str, entries: list[tuple[Key, OffsetValue | None]],
                      producer: tuple[int, int] | None = None) -> None:
        """Append ``entries`` as one batch with acks=all; then (only then) update the cache —
        for a transaction's ``producer`` (id, epoch): its pending offsets."""
        p, cache = self._coordinator(group_id)
        now = self._wall_ms()
        records = [(encode_key(*k), encode_value(v), [], now) for k, v in entries]
        if producer is None:
            info = self.rm.append(p, build_batch(records), _ACKS_ALL)
        else:
            if self.txn_verifier is not None and opens_transaction(p, *producer):
                raise error_for(ErrorCode.INVALID_TXN_STATE,
                                f"{OFFSETS_TOPIC}/{p.partition}: the producer's transaction is not "
                                "verified to include this group (or its marker arrived meanwhile)")
            batch = build_batch(records, producer_id=producer[0], producer_epoch=producer[1],
                                base_sequence=-1, transactional=True)
            info = self.rm.append(p, batch, _ACKS_ALL, from_coordinator=True)
        done = trio.Event()
        self._inflight.setdefault(group_id, set()).add(done)
        try:
            await self._acknowledged(group_id, p, cache, entries, info, producer)
        finally:
            done.set()
            left = self._inflight[group_id]
            left.discard(done)
            if not left:
                del self._inflight[group_id]

    async def _acknowledged(self, group_id: str, p: LedPartition, cache: OffsetsCache,
                            entries: list[tuple[Key, OffsetValue | None]], info: Any,
                            producer: tuple[int, int] | None) -> None:
        with trio.move_on_after(self.append_timeout_ms / 1000):
            code = await p.wait_produce(info.last_offset, _ACKS_ALL)
            if code:
                raise error_for(code, f"{OFFSETS_TOPIC}: {code.name}")
            if cache is self.caches.get(offsets_partition(group_id, self._num_partitions())):
                if producer is not None:
                    cache.add_pending(producer[0], [(k, v) for k, v in entries if v is not None])
                    return
                for i, (k, v) in enumerate(entries):
                    cache.apply(k, v, info.base_offset + i)
            return
        raise error_for(
            ErrorCode.REQUEST_TIMED_OUT, "the offsets commit was not replicated in time"
        )

    def statistics(self) -> GroupOffsetsStatistics:
        """What this coordinator holds now. ``committed`` covers every ``__consumer_offsets``
        partition this broker leads, so a partition newly led is loaded first (one synchronous
        replay, as its first request would do)."""
        committed = tuple(
            CommittedOffset(gid, topic, partition, value.offset)
            for cache in self._led_caches()
            for (gid, topic, partition), (value, _log_offset) in cache.values.items()
        )
        return GroupOffsetsStatistics(
            offsets_topic=self.offsets_topic.statistics(),
            committed=committed,
            commits_in_flight=sum(len(s) for s in self._inflight.values()),
            offsets_expired=self.expired,
            read_barrier=self.barrier.statistics(),
        )

    # -- expiry (offsets.retention.minutes) -------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Expire the offsets of long-empty groups every ``retention_check_interval_ms``."""
        task_status.started()
        while True:
            await trio.sleep(self.retention_check_interval_ms / 1000)
            await self.expire_offsets()

    def _due(self, cache: OffsetsCache, gid: str, now: int) -> bool:
        """Whether ``gid``'s offsets in ``cache`` expire at wall time ``now`` (module docstring)."""
        g = self.rm.image.groups.get(gid)
        if g is not None and g.members:
            self._had_members.add(gid)
            self._empty_since.pop(gid, None)
            return False
        if gid in self._had_members:
            self._had_members.discard(gid)
            self._empty_since[gid] = now
        keys = cache.by_group.get(gid)
        if not keys or self._inflight.get(gid) or cache.pending_partitions(gid):
            return False
        newest = max(cache.values[k][0].commit_timestamp for k in keys)
        return max(newest, self._empty_since.get(gid, -1)) + self.retention_ms <= now

    async def expire_offsets(self) -> int:
        """One expiry pass over the offsets partitions this broker leads; returns how many
        offsets it tombstoned. Each group is decided right before its tombstones are appended
        (no await in between), against the partition's current cache. A group whose tombstones
        fail (lost leadership, a timeout) is logged and tried again at the next pass."""
        expired = 0
        for cache in self._led_caches():
            for gid in list(cache.by_group):
                try:
                    if self._coordinator(gid)[1] is not cache or not self._due(cache, gid, self._wall_ms()):
                        continue
                    keys = sorted(cache.by_group[gid])
                    await self._append(gid, [(k, None) for k in keys])
                except RafkaError as exc:
                    log.warning("expiring the offsets of group %r failed: %s", gid, exc.message)
                    continue
                self._empty_since.pop(gid, None)
                expired += len(keys)
                log.info("expired %d committed offsets of empty group %r", len(keys), gid)
        self.expired += expired
        return expired

    # -- OFFSET_COMMIT / OFFSET_FETCH -------------------------------------------------------

    async def offset_commit(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._commit(body, None)

    async def txn_offset_commit(self, body: dict[str, Any]) -> dict[str, Any]:
        """TXN_OFFSET_COMMIT: validated as OFFSET_COMMIT; pending until the transaction's marker.
        The transaction's first offsets in the group's partition are verified with its
        coordinator first (``broker/txn/opening.py``): so a late marker of the producer's
        previous transaction is refused instead of committing or dropping these offsets."""
        pid, epoch = body["producer_id"], body["producer_epoch"]
        if pid < 0 or epoch < 0:
            raise error_for(ErrorCode.INVALID_REQUEST, "a transactional commit needs a producer id and epoch")
        if self.txn_verifier is not None:
            p, _ = self._coordinator(body["group_id"])
            if opens_transaction(p, pid, epoch):
                code, message = await verify_opening(self.txn_verifier, body["transactional_id"],
                                                     p, pid, epoch)
                if code:
                    raise error_for(code, message)
        return await self._commit(body, (pid, epoch))

    def on_marker(self, topic: str, partition: int, producer_id: int, commit: bool,
                  marker_offset: int) -> None:
        """The replica manager's marker listener: a marker was acknowledged in ``topic``."""
        if topic != OFFSETS_TOPIC:
            return
        cache = self.caches.get(partition)
        if cache is not None:  # not loaded: the load replays the marker from the log
            n = cache.end_txn(producer_id, commit, marker_offset)
            if n:
                log.info("%s/%d: %s %d offsets of producer %d", topic, partition,
                         "committed" if commit else "dropped", n, producer_id)

    async def _member_image(self, body: Mapping[str, Any]) -> MetadataImage:
        """The image to validate a member's request against: with ``min_metadata_offset``, once
        the image includes it (bounded wait), else now's."""
        wanted = body.get("min_metadata_offset")
        if wanted is None:
            return self.rm.image
        image = self.rm.image
        with trio.move_on_after(self.metadata_wait_ms / 1000):
            image = await self.publisher.wait_for_offset(wanted)
        if image.offset < wanted:
            raise error_for(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                "this broker's metadata is behind the group's",
            )
        return image

    async def _commit(self, body: dict[str, Any], producer: tuple[int, int] | None) -> dict[str, Any]:
        group_id: str = body["group_id"]
        epoch = body.get("member_epoch")
        epoch = -1 if epoch is None else epoch
        member_id = body.get("member_id") or ""
        image = await self._member_image(body)
        self._coordinator(group_id)  # NOT_COORDINATOR before anything else
        group = image.groups.get(group_id)
        owns = _validate_member(group, group_id, member_id, epoch)
        out: list[dict[str, Any]] = []
        entries: list[tuple[Key, OffsetValue | None]] = []
        now = self._wall_ms()
        count = 0
        for t in body["topics"]:
            parts: list[dict[str, Any]] = []
            out.append({"name": t["name"], "partitions": parts})
            for pd in t["partitions"]:
                count += 1
                entry = {"partition": pd["partition"], "error": 0, "message": ""}
                parts.append(entry)
                meta = pd.get("metadata") or ""
                if (
                    count > MAX_COMMIT_PARTITIONS
                    or len(meta) > MAX_METADATA_LEN
                    or pd["offset"] < 0
                ):
                    entry.update(
                        error=int(ErrorCode.INVALID_REQUEST),
                        message="bad offset, metadata or too many partitions",
                    )
                elif owns is not None and not owns(t["name"], pd["partition"]):
                    entry.update(
                        error=int(ErrorCode.STALE_MEMBER),
                        message=f"member {member_id} does not own {t['name']}-{pd['partition']}",
                    )
                else:
                    entries.append(
                        (
                            (group_id, t["name"], pd["partition"]),
                            OffsetValue(pd["offset"], meta, now, epoch,
                                        _leader_epoch(pd)),
                        )
                    )
        if entries:
            await self._append(group_id, entries, producer)
        return {"topics": out}

    async def offset_fetch(self, body: dict[str, Any]) -> dict[str, Any]:
        group_id: str = body["group_id"]
        # a member reading the offsets of partitions it was just given: first this broker's
        # image must include the assignment (hence the previous owner's expiry or revocation),
        # so that owner's later commits are refused here (module docstring)
        image = await self._member_image(body)
        epoch = body.get("member_epoch")
        if epoch is not None and epoch >= 0:
            self._coordinator(group_id)
            _validate_member(image.groups.get(group_id), group_id, body.get("member_id") or "", epoch)
        cache = await self._confirmed(group_id)
        committed = cache.group(group_id)
        wanted = body.get("topics")
        if wanted is None:
            keys = sorted(committed)
        else:
            keys = [(t["name"], p) for t in wanted for p in t["partitions"]]
        topics = _offsets_body(committed, keys, with_error=True)
        if body.get("require_stable"):
            unstable = cache.pending_partitions(group_id)
            for t in topics:
                for p in t["partitions"]:
                    if (t["name"], p["partition"]) in unstable:
                        p["error"] = int(ErrorCode.UNSTABLE_OFFSET_COMMIT)
        return {"topics": topics}

    # -- admin ------------------------------------------------------------------------------

    async def list_groups(self, body: dict[str, Any]) -> dict[str, Any]:
        image = self.rm.image
        out: dict[str, dict[str, Any]] = {}
        for g in image.groups.groups.values():
            out[g.group_id] = {
                "group_id": g.group_id,
                "state": g.state,
                "members": len(g.members),
                "group_epoch": g.group_epoch,
            }
        for cache in self._led_caches():
            for gid in cache.by_group:
                out.setdefault(
                    gid, {"group_id": gid, "state": "Empty", "members": 0, "group_epoch": 0}
                )
        return {"groups": [out[k] for k in sorted(out)]}

    async def describe_groups(self, body: dict[str, Any]) -> dict[str, Any]:
        out = []
        for gid in body["groups"][:1000]:
            try:
                cache = await self._confirmed(gid)
            except RafkaError as exc:
                out.append({"group_id": gid, "error": int(exc.code), "message": exc.message})
                continue
            g = self.rm.image.groups.get(gid)
            committed = cache.group(gid)
            if g is None and not committed:
                out.append(
                    {
                        "group_id": gid,
                        "error": int(ErrorCode.GROUP_ID_NOT_FOUND),
                        "message": f"no group {gid!r}",
                    }
                )
                continue
            out.append(
                {
                    "group_id": gid,
                    "error": 0,
                    "message": "",
                    "state": g.state if g else "Empty",
                    "group_epoch": g.group_epoch if g else 0,
                    "assignment_epoch": g.assignment_epoch if g else 0,
                    "members": [_member_body(m) for m in g.members.values()] if g else [],
                    "offsets": _offsets_body(committed, sorted(committed), with_error=False),
                }
            )
        return {"groups": out}

    async def delete_groups(self, body: dict[str, Any]) -> dict[str, Any]:
        out = []
        for gid in body["groups"][:1000]:
            try:
                _, cache = self._coordinator(gid)
                self._check_empty(gid)
                keys = sorted(cache.by_group.get(gid, ()))
                if not keys:
                    raise error_for(
                        ErrorCode.GROUP_ID_NOT_FOUND, f"no committed offsets for {gid!r}"
                    )
                await self._append(gid, [(k, None) for k in keys])
                out.append({"group_id": gid, "error": 0, "message": ""})
            except RafkaError as exc:
                out.append({"group_id": gid, "error": int(exc.code), "message": exc.message})
        return {"groups": out}

    async def alter_group_offsets(self, body: dict[str, Any]) -> dict[str, Any]:
        gid = body["group_id"]
        self._coordinator(gid)
        if not body.get("force"):  # forced (`reset-offsets --force`): members may commit over it
            self._check_empty(gid)
        now = self._wall_ms()
        out, entries = [], []
        for t in body["topics"]:
            parts = []
            out.append({"name": t["name"], "partitions": parts})
            for pd in t["partitions"]:
                if pd["offset"] < 0:
                    parts.append(
                        {
                            "partition": pd["partition"],
                            "error": int(ErrorCode.INVALID_REQUEST),
                            "message": "offset must be >= 0",
                        }
                    )
                    continue
                parts.append({"partition": pd["partition"], "error": 0, "message": ""})
                entries.append(
                    ((gid, t["name"], pd["partition"]),
                     OffsetValue(pd["offset"], pd.get("metadata") or "", now, -1,
                                 _leader_epoch(pd)))
                )
        if entries:
            await self._append(gid, entries[:MAX_COMMIT_PARTITIONS])
        return {"topics": out}

    async def offset_delete(self, body: dict[str, Any]) -> dict[str, Any]:
        """OFFSET_DELETE (Kafka's OffsetDelete): tombstone the named partitions' committed
        offsets; a topic some member of the group subscribes to is GROUP_SUBSCRIBED_TO_TOPIC,
        a partition without a committed offset is no error (as Kafka)."""
        gid = body["group_id"]
        _, cache = self._coordinator(gid)
        g = self.rm.image.groups.get(gid)
        committed = cache.group(gid)
        if g is None and not committed:
            raise error_for(ErrorCode.GROUP_ID_NOT_FOUND, f"no group {gid!r}")
        subscribed = {t for m in (g.members.values() if g else ()) for t in m.subscribed_topics}
        out, doomed = [], []
        for t in body["topics"]:
            parts: list[dict[str, Any]] = []
            out.append({"name": t["name"], "partitions": parts})
            for p in t["partitions"]:
                if t["name"] in subscribed:
                    parts.append({"partition": p, "error": int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC),
                                  "message": f"members of {gid!r} subscribe to {t['name']!r}"})
                    continue
                parts.append({"partition": p, "error": 0, "message": ""})
                if (t["name"], p) in committed:
                    doomed.append(((gid, t["name"], p), None))
        if doomed:
            await self._append(gid, doomed[:MAX_COMMIT_PARTITIONS])
        return {"topics": out}

    def _check_empty(self, group_id: str) -> None:
        g = self.rm.image.groups.get(group_id)
        if g is not None and g.members:
            raise error_for(
                ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} has {len(g.members)} members"
            )


# --------------------------------------------------------------------------- helpers


def _validate_member(
    group: GroupImage | None, group_id: str, member_id: str, epoch: int
) -> Callable[[str, int], bool] | None:
    """None: a commit from outside the group (allowed while it is empty); else the ownership test."""
    if epoch < 0:
        if group is not None and group.members:
            raise error_for(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"group {group_id!r} has members: commit as a member (with its epoch)",
            )
        return None
    m = group.members.get(member_id) if group is not None else None
    if m is None:
        raise error_for(
            ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id!r}"
        )
    # the previous epoch is accepted too (as for heartbeats): a commit sent just before the
    # heartbeat that advanced the member's epoch; ownership is still checked per partition
    if epoch != m.member_epoch and epoch != m.previous_member_epoch:
        raise error_for(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"member epoch {epoch} is not the member's epoch {m.member_epoch}",
        )
    return m.owns


def _leader_epoch(pd: Mapping[str, Any]) -> int:
    epoch = pd.get("leader_epoch")
    return epoch if isinstance(epoch, int) and epoch >= 0 else -1


def _offsets_body(
    committed: Mapping[tuple[str, int], OffsetValue],
    keys: Iterable[tuple[str, int]],
    *,
    with_error: bool,
) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for t, p in keys:
        v = committed.get((t, p))
        entry: dict[str, Any] = {
            "partition": p,
            "offset": -1 if v is None else v.offset,
            "metadata": "" if v is None else v.metadata,
            "commit_timestamp": -1 if v is None else v.commit_timestamp,
            "leader_epoch": -1 if v is None else v.leader_epoch,
        }
        if with_error:
            entry["error"] = 0
        by_topic.setdefault(t, []).append(entry)
    return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


def _member_body(m: Any) -> dict[str, Any]:
    return {
        "member_id": m.member_id,
        "member_epoch": m.member_epoch,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "instance_id": m.instance_id or None,
        "subscribed_topics": list(m.subscribed_topics),
        "assignment": assignment_body(m.assigned),
        "target": assignment_body(m.target),
        "pending_revocation": assignment_body(m.pending_revocation),
    }
