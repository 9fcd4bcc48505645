"""AsyncConsumer: trio-native consumer with prefetching (manual assignment; groups plug in).

Theory of operation
-------------------
Per assigned partition the consumer keeps a ``PartitionState``: the *position* (next offset
``poll`` returns), the *fetch offset* (next offset to ask the broker for; ahead of the position
while data is buffered), up to ``max_buffered_fetches`` ``CompletedFetch`` objects, a paused
flag and an *epoch* bumped by every seek / reset / unassign so that in-flight responses for an
old position are dropped.

One fetch loop task (in the consumer's nursery) resets unknown positions (committed offset
from the group coordinator if any, else ``auto_offset_reset`` via LIST_OFFSETS); which
partitions are fetched, when, and how answers are buffered is ``rafka.client.aio.fetcher``
(the ``Fetcher`` mixin): one FETCH in flight per broker, the next one written as soon as an
answer is buffered — before ``poll`` decodes it — and the buffer bounded (≤ partitions ×
``max_buffered_fetches`` × ``max_partition_fetch_bytes``, plus one FETCH in flight per
partition). ``poll`` only decodes buffered batches (``rafka.client.aio.fetch``); ``poll_batch``
does the same into columns (``client.columnar.ColumnBatch``), one object per partition instead
of one per record — same positions, pausing, seeking and filtering.

Leader epochs (KIP-320, kept small): every FETCH partition entry carries
``current_leader_epoch``, the partition's leader epoch from the metadata cache, so a deposed or
stale leader answers FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH instead of serving it; those
(like NOT_LEADER_OR_FOLLOWER) refresh metadata and retry at the same position. Errors per
partition, and the validation of OFFSET_OUT_OF_RANGE before any reset: ``fetcher``.

Isolation (docs/transactions.md): ``isolation_level`` is ``"read_uncommitted"`` (default, as in
Kafka: every record up to the high watermark) or ``"read_committed"``: FETCH asks for data below
the last stable offset only, and the records of aborted transactions are dropped client-side
from the response's ``aborted_transactions`` (``rafka.client.txn_filter``, per batch). In both modes
control batches (transaction markers) are never returned, but the position moves past them.
``end_offsets``, ``seek_to_end``, ``auto_offset_reset='latest'`` and ``current_lag`` use the
last stable offset in read_committed (LIST_OFFSETS with ``isolation_level`` 1).

Consumer groups: ``group_id`` needs a coordinator. ``AsyncConsumer.coordinator_factory`` (set by
the group module) builds one per consumer; it runs in the consumer's nursery, assigns
partitions via ``_set_assignment`` and provides committed offsets and ``commit``. Without one,
``group_id`` raises ``NotImplementedError``; ``AsyncConsumer("t1", "t2")`` without a group
assigns every partition of the topics (a standalone subscription).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, ClassVar, Protocol

import trio
from rafka.client.aio._core import ClientCore
from rafka.client.aio.conveniences import Deserializer, GetManyApi, deserializing_take
from rafka.client.aio.fetch import CompletedFetch
from rafka.client.aio.fetcher import Fetcher, PartitionState
from rafka.client.aio.offsets import EARLIEST, LATEST, list_offsets
from rafka.client.columnar import ColumnBatch
from rafka.client.errors import IllegalStateError
from rafka.client.throttle_stats import ThrottleMeter
from rafka.client.txn_filter import READ_UNCOMMITTED, isolation_level_code
from rafka.client.types import (
    CommitOffsets,
    ConsumerRecord,
    GroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from rafka.security.client import SECURITY_OPTIONS, ClientSecurity
from rafka.wire.errors import RafkaError

__all__ = ["AsyncConsumer", "Coordinator"]

# CompletedFetch.take or .take_columns: (fetch, position, max records) -> (records, position)
_Take = Callable[[CompletedFetch, int, int], tuple[Any, int]]


class Coordinator(Protocol):
    """What a consumer-group implementation provides (see the module docstring)."""

    async def run(self, *, task_status: Any = ...) -> None: ...
    async def committed(self, tps: list[TopicPartition], *, metadata: bool = False
                        ) -> dict[TopicPartition, Any]: ...
    async def commit(self, offsets: CommitOffsets) -> None: ...
    async def subscribe(self, topics: list[str]) -> None: ...
    async def close(self) -> None: ...


class AsyncConsumer(Fetcher, GetManyApi):
    """``async with AsyncConsumer(bootstrap_servers=...) as c: c.assign([...]); await c.poll()``.

    ``key_deserializer`` / ``value_deserializer`` (``f(bytes) -> obj``; ``None`` passes through)
    and ``getmany``: ``rafka.client.aio.conveniences``."""

    coordinator_factory: ClassVar[Callable[[AsyncConsumer], Coordinator] | None] = None

    def __init__(
        self,
        *topics: str,
        bootstrap_servers: str | list[str] = "127.0.0.1:9092",
        client_id: str = "rafka-consumer",
        group_id: str | None = None,
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        max_partition_fetch_bytes: int = 1024 * 1024,
        max_poll_records: int = 500,
        max_buffered_fetches: int = 2,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300000,
        connection_setup_timeout_ms: int | None = None,
        consumer_timeout_ms: float | None = None,
        isolation_level: str = READ_UNCOMMITTED,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        **group_options: Any,
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError("auto_offset_reset must be 'earliest', 'latest' or 'none'")
        self._isolation = isolation_level_code(isolation_level)  # ValueError on a bad value
        self.isolation_level = isolation_level.strip().lower()
        if group_id is not None and type(self).coordinator_factory is None:
            raise NotImplementedError(
                "consumer groups are not supported yet: omit group_id and use assign() "
                "(or pass topics to consume every partition without a group)")
        self.group_id = group_id
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.group_options = group_options
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.max_buffered_fetches = max(1, max_buffered_fetches)
        self.consumer_timeout_ms = consumer_timeout_ms
        # CompletedFetch.take itself without deserializers: no per-record call
        self._take = deserializing_take(CompletedFetch.take, key_deserializer, value_deserializer)
        # security_protocol, sasl_*, ssl_* as kafka-python names them (security/client.py)
        security = {k: group_options.pop(k) for k in SECURITY_OPTIONS if k in group_options}
        self._core = ClientCore(bootstrap_servers, client_id=client_id,
                                request_timeout_ms=request_timeout_ms,
                                retry_backoff_ms=retry_backoff_ms,
                                metadata_max_age_ms=metadata_max_age_ms,
                                connection_setup_timeout_ms=connection_setup_timeout_ms,
                                security=ClientSecurity.from_kwargs(security))
        self._initial_topics = list(topics)
        self._subscription: list[str] = []
        self._states: dict[TopicPartition, PartitionState] = {}
        self._node_fetches: dict[int, int] = {}  # node -> FETCHes in flight to it
        self._fetch_wake = trio.Event()
        self._data = trio.Event()
        self._rr = 0
        self._throttle = ThrottleMeter()  # the brokers' throttle_time_ms (byte-rate quotas)
        self._iter_buf: deque[ConsumerRecord] = deque()
        self._coordinator: Coordinator | None = None
        self._nursery: trio.Nursery | None = None
        self._started = False
        self._closed = False
        # set when the ``async with`` block (or the sync facade's ``with``) exits by an exception:
        # the group then commits on close only what earlier polls returned (see client/groups.py)
        self.exit_error = False
        # an error a background task met that ends the consumer (a bootstrap never reached):
        # raised by the next / a waiting poll
        self._fatal: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> AsyncConsumer:
        if self._started:
            raise IllegalStateError("a consumer can be started once; create a new one")
        self._started = True
        self._nursery = await self._core.start()
        try:
            if self.group_id is not None:
                factory = type(self).coordinator_factory
                assert factory is not None
                self._coordinator = factory(self)
                await self._nursery.start(self._coordinator.run)
            self._nursery.start_soon(self._fetch_loop)
            if self._initial_topics:
                await self.subscribe(self._initial_topics)
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        if exc is not None:
            self.exit_error = True
        await self.close()
        return None

    async def close(self) -> None:
        """Stop fetching and close connections. Idempotent."""
        if self._closed or self._nursery is None:  # closed, or never started
            self._closed = True
            return
        self._closed = True
        try:
            if self._coordinator is not None:
                with contextlib.suppress(RafkaError):
                    await self._coordinator.close()
        finally:
            await self._core.shutdown()

    def fail(self, exc: BaseException) -> None:
        """A background task (the group membership) met ``exc``, which ends the consumer:
        every ``poll`` from now on raises it, a waiting one at once."""
        self._fatal = exc
        self._data.set()

    def _check_open(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._nursery is None or self._closed:
            raise IllegalStateError("consumer is not open (use `async with AsyncConsumer(...)`)")

    # ------------------------------------------------------------------ assignment

    async def subscribe(self, topics: Iterable[str]) -> None:
        """With a group: join it for ``topics``. Without: assign every partition of them."""
        self._check_open()
        names = list(topics)
        self._subscription = names
        if self._coordinator is not None:
            await self._coordinator.subscribe(names)
            return
        tps: list[TopicPartition] = []
        for t in names:
            await self._core.wait_for_topic(t, self._core.request_timeout_ms)
            tps.extend(self._core.metadata.partitions_for(t))
        self.assign(tps)

    def subscription(self) -> set[str]:
        return set(self._subscription)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replaces the assignment)."""
        if self._coordinator is not None and self._subscription:
            raise IllegalStateError("assign() and a group subscription cannot be mixed")
        self._set_assignment([TopicPartition(*tp) for tp in partitions])

    def _set_assignment(self, partitions: list[TopicPartition],
                        offsets: dict[TopicPartition, int] | None = None) -> None:
        """Hook for coordinators: new assignment, with optional starting offsets."""
        new = set(partitions)
        for tp in list(self._states):
            if tp not in new:
                self._states.pop(tp).epoch += 1
        for tp in partitions:
            if tp not in self._states:
                self._states[tp] = PartitionState()
            if offsets and tp in offsets:
                self._states[tp].seek(offsets[tp])
        self._core.wanted_topics.update(tp.topic for tp in partitions)
        if self._iter_buf:  # keep fetched-but-unyielded records of partitions still assigned
            self._iter_buf = deque(r for r in self._iter_buf if (r.topic, r.partition) in new)
        self._fetch_wake.set()

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def unsubscribe(self) -> None:
        self._subscription = []
        self._set_assignment([])

    def _state(self, tp: TopicPartition) -> PartitionState:
        st = self._states.get(tp)
        if st is None:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return st

    # ------------------------------------------------------------------ positions

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self._state(partition).seek(offset)
        self._drop_iter(partition)
        self._fetch_wake.set()

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        await self._seek_to(EARLIEST, partitions)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """To the high watermark (read_uncommitted) or the last stable offset (read_committed)."""
        await self._seek_to(LATEST, partitions)

    async def _seek_to(self, ts: int, partitions: tuple[TopicPartition, ...]) -> None:
        self._check_open()
        tps = list(partitions) or list(self._states)
        for tp in tps:
            self._state(tp)
        found = await list_offsets(self._core, {tp: ts for tp in tps}, isolation_level=self._isolation)
        for tp, (off, _) in found.items():
            if tp in self._states:
                self.seek(tp, off)

    async def position(self, partition: TopicPartition) -> int:
        """Offset of the next record ``poll`` returns (resolves a pending reset first)."""
        st = self._state(partition)
        if st.position is None:
            await self._reset([partition])
        st = self._state(partition)
        if st.error is not None:
            raise st.error
        assert st.position is not None
        return st.position

    def highwater(self, partition: TopicPartition) -> int | None:
        """High watermark seen in the last fetch of ``partition`` (None before any)."""
        hw = self._state(partition).high_watermark
        return None if hw < 0 else hw

    def current_lag(self, partition: TopicPartition) -> int | None:
        """Records between the position and the end seen in the last fetch — the high
        watermark, or in read_committed the last stable offset (None before any fetch)."""
        st = self._state(partition)
        end = st.last_stable_offset if self._isolation else st.high_watermark
        if end < 0 or st.position is None:
            return None
        return max(0, end - st.position)

    def statistics(self) -> dict[str, Any]:
        """Counters of this consumer: the brokers' fetch throttling (byte-rate quotas)."""
        return self._throttle.statistics()

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = True
            self._drop_iter(tp, rewind=True)

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = False
        self._fetch_wake.set()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self._states.items() if st.paused}

    def _drop_iter(self, tp: TopicPartition, *, rewind: bool = False) -> None:
        """Forget records of ``tp`` already taken by the iterator; ``rewind`` = seek back to
        the first of them (pause: they will be returned after resume)."""
        if not self._iter_buf:
            return
        mine = [r for r in self._iter_buf if r.topic == tp.topic and r.partition == tp.partition]
        if mine:
            self._iter_buf = deque(r for r in self._iter_buf
                                   if not (r.topic == tp.topic and r.partition == tp.partition))
            if rewind:
                self._states[tp].seek(mine[0].offset)

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        self._check_open()
        found = await list_offsets(self._core, {TopicPartition(*tp): ts for tp, ts in timestamps.items()})
        return {tp: (OffsetAndTimestamp(off, ts) if off >= 0 else None) for tp, (off, ts) in found.items()}

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        self._check_open()
        found = await list_offsets(self._core, {TopicPartition(*tp): EARLIEST for tp in partitions})
        return {tp: off for tp, (off, _) in found.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """High watermarks, or last stable offsets in read_committed (as Kafka's consumer)."""
        self._check_open()
        found = await list_offsets(self._core, {TopicPartition(*tp): LATEST for tp in partitions},
                                   isolation_level=self._isolation)
        return {tp: off for tp, (off, _) in found.items()}

    async def partitions_for_topic(self, topic: str) -> set[int]:
        self._check_open()
        await self._core.wait_for_topic(topic, self._core.request_timeout_ms)
        return set(self._core.metadata.topics.get(topic) or ())

    async def topics(self) -> set[str]:
        self._check_open()
        meta = await self._core.refresh_metadata(all_topics=True)
        return set(meta.topics)

    # ------------------------------------------------------------------ groups

    async def commit(self, offsets: CommitOffsets | None = None) -> None:
        """Commit ``offsets`` (default: the current positions) to the group; an offset may be
        an ``OffsetAndMetadata`` carrying a metadata string."""
        if self._coordinator is None:
            raise IllegalStateError("commit() needs a group_id (consumer groups)")
        if offsets is None:
            offsets = self.consumed_positions()
        await self._coordinator.commit(offsets)

    def consumed_positions(self, unyielded: Iterable[ConsumerRecord] = ()) -> dict[TopicPartition, int]:
        """Per partition, the offset after the last record handed to the application: the
        position, less records the iterator took but has not yielded (``_iter_buf`` and
        ``unyielded``) — what ``commit()`` commits by default."""
        out = {tp: st.position for tp, st in self._states.items() if st.position is not None}
        for recs in (self._iter_buf, unyielded):
            for r in recs:
                tp = TopicPartition(r.topic, r.partition)
                if tp in out and r.offset < out[tp]:
                    out[tp] = r.offset
        return out

    def group_metadata(self) -> GroupMetadata:
        """This member's identity for ``Producer.send_offsets_to_transaction`` (KIP-447): group,
        member id and epoch, and the metadata offset its commits carry; ``("g", "", -1, -1)``
        outside the membership (not joined yet, or left): a commit from outside the group."""
        m = self._coordinator
        if m is None or self.group_id is None:
            raise IllegalStateError("group_metadata() needs a group_id (consumer groups)")
        epoch = int(getattr(m, "member_epoch", 0) or 0)
        if epoch <= 0:
            return GroupMetadata(self.group_id)
        return GroupMetadata(self.group_id, str(m.member_id), epoch, int(m.metadata_offset))  # type: ignore[attr-defined]

    async def committed(self, partition: TopicPartition, metadata: bool = False
                        ) -> int | OffsetAndMetadata | None:
        """The group's committed offset of ``partition`` (None: none); ``metadata=True``: an
        ``OffsetAndMetadata`` with the metadata string committed with it (kafka-python's flag)."""
        if self._coordinator is None:
            raise IllegalStateError("committed() needs a group_id (consumer groups)")
        return (await self._coordinator.committed([partition], metadata=metadata)).get(partition)

    # ------------------------------------------------------------------ poll

    async def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition; waits up to ``timeout_ms`` for some (``{}`` if none came)."""
        return await self._poll(timeout_ms, max_records or self.max_poll_records, self._take)

    async def poll_batch(self, timeout_ms: float = 0, max_records: int | None = None) -> dict[TopicPartition, ColumnBatch]:
        """``poll`` in columns: per partition a ``ColumnBatch`` (offsets, timestamps, keys,
        values, headers as lists; ``.to_arrow()``), built without an object per record. Same
        positions, pause/seek and isolation as ``poll``; ``max_records`` (default: all that is
        buffered) bounds the records of the whole call."""
        return await self._poll(timeout_ms, max_records or sys.maxsize, CompletedFetch.take_columns)

    async def _poll(self, timeout_ms: float, limit: int, take: _Take,
                    only: frozenset[TopicPartition] | None = None) -> dict[TopicPartition, Any]:
        self._check_open()
        on_poll = getattr(self._coordinator, "on_poll", None)  # groups: processed offsets, max_poll_interval
        if on_poll is not None:
            on_poll()
        out = self._collect(limit, take, only)
        if out or timeout_ms <= 0:
            return out
        with trio.move_on_after(timeout_ms / 1000):
            while not out:
                self._data = trio.Event()
                await self._data.wait()
                self._check_open()
                out = self._collect(limit, take, only)
        return out

    def _collect(self, limit: int, take: _Take = CompletedFetch.take,
                 only: frozenset[TopicPartition] | None = None) -> dict[TopicPartition, Any]:
        out: dict[TopicPartition, Any] = {}
        tps = list(self._states) if only is None else [tp for tp in self._states if tp in only]
        if not tps:
            return out
        self._rr = (self._rr + 1) % len(tps)
        n = 0
        freed = False
        for tp in tps[self._rr:] + tps[: self._rr]:
            st = self._states[tp]
            if st.error is not None:
                if out:
                    break
                err, st.error = st.error, None
                raise err
            if st.paused or st.position is None:
                continue
            while st.buffered and n < limit:
                cf = st.buffered[0]
                if cf.epoch != st.epoch:
                    st.buffered.popleft()
                    continue
                try:
                    recs, st.position = take(cf, st.position, limit - n)
                except RafkaError as exc:
                    st.buffered.clear()
                    st.fetch_offset = st.position
                    st.epoch += 1
                    if out:
                        st.error = exc
                        return out
                    raise
                if recs:
                    prev = out.get(tp)
                    if prev is None:
                        out[tp] = recs
                    else:
                        prev.extend(recs)
                    n += len(recs)
                if cf.exhausted:
                    st.buffered.popleft()
                    freed = True
            if n >= limit:
                break
        if freed:  # room in a buffer: its next FETCH goes out now, before the caller's work
            self._start_fetches(nowait=True)
        return out

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        if not self._iter_buf:
            deadline = None if self.consumer_timeout_ms is None else time.monotonic() + self.consumer_timeout_ms / 1000
            while not self._iter_buf:
                wait_ms = 1000.0 if deadline is None else max(0.0, (deadline - time.monotonic()) * 1000)
                for recs in (await self.poll(timeout_ms=wait_ms)).values():
                    self._iter_buf.extend(recs)
                if not self._iter_buf and deadline is not None and time.monotonic() >= deadline:
                    raise StopAsyncIteration
        return self._iter_buf.popleft()
