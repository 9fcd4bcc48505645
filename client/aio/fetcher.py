"""The consumer's fetching: which partitions to FETCH, when, and what to do with the answers.

Theory of operation
-------------------
``Fetcher`` is a mixin of ``AsyncConsumer`` (``client/aio/consumer.py``), which owns the state
it reads: per partition a ``PartitionState`` (position, fetch offset, buffered
``CompletedFetch`` objects, paused flag, epoch, in-flight flag, error, retry time), the client core
and the fetch options.

A partition is *fetchable* when it is assigned, not paused, has a position, no FETCH in flight,
no error and fewer than ``max_buffered_fetches`` completed fetches waiting. ``_start_fetches``
groups the fetchable partitions by leader and sends at most ``FETCHES_PER_NODE`` FETCHes in
flight per broker (1, as Kafka's consumer), spreading the partitions over the free slots; a
partition is never in two requests at once (its next fetch offset is only known from the
previous answer). With 2, three partitions on one broker alternate between requests for two of
them and one, so the broker has the next request queued while it sends an answer: faster when a
core is free for it, slower on a loaded machine, where the extra requests cost more CPU per
record than the overlap saves (docs/performance.md, "Consumer prefetch") — hence 1 by default.
Each FETCH body is built when it is
sent (``_Fetch``), from the fetch offsets and leader epochs of that moment, with the
partitions' epochs: ``seek``, a reset or a reassignment bumps an epoch, so an answer to an
older epoch is dropped (``_take_answer``) — seeking during a prefetch never yields the old
position's records.

Prefetching, without a scheduling race: the task that receives an answer buffers it and then —
before it wakes ``poll`` — writes the next FETCH itself, with ``Connection.send_request_nowait``
(one non-blocking write, nothing awaited, so no other task runs in between); ``poll`` does the
same when it frees a buffer slot. The broker therefore prepares the next answer while the
caller decodes the previous one. Before, the fetch loop sent it whenever trio scheduled that
loop, which was after the decode half of the time (trio runs a batch of ready tasks in random
order; docs/performance.md). Where no write can be made at once (TLS, no connection yet, a
write in progress) the fetch loop sends the request the ordinary way.

Memory stays bounded: per partition at most ``max_buffered_fetches`` answers buffered and one
in flight, each at most ``max_partition_fetch_bytes`` (bigger only when the first batch is:
Kafka's rule), and ``fetch_max_bytes`` per request.

Errors per partition: OFFSET_OUT_OF_RANGE is first validated (``_validate_out_of_range``): the
partition is held back, metadata is refreshed, and if the leader or its epoch changed since the
fetch was sent the fetch is retried at the same position against the new leader; only when the
same leader in the same epoch still leads does it reset the position (or raise from ``poll``
with ``auto_offset_reset='none'``). Leadership errors refresh metadata and back off; a
CORRUPT_MESSAGE becomes ``CorruptRecordError``; anything else is raised from the next ``poll``.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from typing import TYPE_CHECKING, Any, ClassVar

import trio
from rafka.client.aio._core import REFRESH_CODES, ClientCore
from rafka.client.aio.fetch import CompletedFetch, PartitionData, split_fetch_response
from rafka.client.aio.offsets import EARLIEST, LATEST, list_offsets
from rafka.client.errors import CorruptRecordError, RecordTooLargeError
from rafka.client.throttle_stats import ThrottleMeter
from rafka.client.types import TopicPartition
from rafka.wire.connection import PendingResponse, backoff_ms
from rafka.wire.errors import ErrorCode, RafkaError, error_for
from rafka.wire.protocol import ApiKey

if TYPE_CHECKING:
    from rafka.client.aio.consumer import Coordinator

__all__ = ["Fetcher", "PartitionState"]


class PartitionState:
    __slots__ = ("position", "fetch_offset", "buffered", "paused", "epoch", "inflight",
                 "high_watermark", "last_stable_offset", "log_start_offset", "error", "retry_at")

    def __init__(self) -> None:
        self.position: int | None = None
        self.fetch_offset: int | None = None
        self.buffered: deque[CompletedFetch] = deque()
        self.paused = False
        self.epoch = 0
        self.inflight = False
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.error: BaseException | None = None
        self.retry_at = 0.0

    def seek(self, offset: int | None) -> None:
        self.position = offset
        self.fetch_offset = offset
        self.buffered.clear()
        self.epoch += 1


class _Fetch:
    """One FETCH to ``node`` for ``tps``: its body, built from the partitions' fetch offsets
    and leader epochs at this moment, with the consumer epochs it answers to."""

    __slots__ = ("node", "tps", "body", "epochs", "leader_epochs", "pending")

    def __init__(self, consumer: Fetcher, node: int, tps: list[TopicPartition]) -> None:
        states, meta = consumer._states, consumer._core.metadata
        self.node = node
        self.tps = tps
        self.epochs = {tp: states[tp].epoch for tp in tps}
        self.leader_epochs: dict[TopicPartition, int] = {}
        self.pending: PendingResponse | None = None  # written by send_request_nowait
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp in tps:
            pm = meta.partition(tp)
            self.leader_epochs[tp] = -1 if pm is None else pm.leader_epoch
            topics.setdefault(tp.topic, []).append({
                "partition": tp.partition,
                "fetch_offset": states[tp].fetch_offset,
                "partition_max_bytes": consumer.max_partition_fetch_bytes,
                "current_leader_epoch": self.leader_epochs[tp],  # < 0: unknown, not checked
            })
        self.body = {"replica_id": -1, "max_wait_ms": consumer.fetch_max_wait_ms,
                     "min_bytes": consumer.fetch_min_bytes, "max_bytes": consumer.fetch_max_bytes,
                     "isolation_level": consumer._isolation,
                     "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}



class Fetcher:
    """The fetching methods of ``AsyncConsumer`` (see the module docstring)."""

    # FETCHes in flight per broker (module docstring)
    FETCHES_PER_NODE: ClassVar[int] = 1

    _states: dict[TopicPartition, PartitionState]
    _core: ClientCore
    _coordinator: Coordinator | None
    _nursery: trio.Nursery | None
    _node_fetches: dict[int, int]
    _fetch_wake: trio.Event
    _data: trio.Event
    _throttle: ThrottleMeter
    _isolation: int
    auto_offset_reset: str
    fetch_max_wait_ms: int
    fetch_min_bytes: int
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    max_buffered_fetches: int

    async def _fetch_loop(self) -> None:
        while True:
            self._fetch_wake = trio.Event()
            unknown = [tp for tp, st in self._states.items() if st.position is None and st.error is None]
            if unknown:
                with contextlib.suppress(RafkaError):
                    await self._reset(unknown)
            need_meta, next_retry = self._start_fetches(nowait=False)
            timeout = 1.0
            if need_meta or self._core.stale:
                with contextlib.suppress(RafkaError):
                    await self._core.refresh_metadata()
                if need_meta:
                    timeout = self._core.retry_backoff_ms / 1000
            if next_retry is not None:
                timeout = min(timeout, max(0.0, next_retry - time.monotonic()))
            with trio.move_on_after(timeout):
                await self._fetch_wake.wait()

    def _start_fetches(self, *, nowait: bool) -> tuple[bool, float | None]:
        """Start FETCHes for the fetchable partitions, at most ``FETCHES_PER_NODE`` in flight
        per leader, the partitions spread over its free slots (module docstring,
        "Prefetching"). ``nowait`` (``poll`` and a FETCH answer): only where
        ``send_request_nowait`` writes the request at once — the others are left to the fetch
        loop, woken. Returns (a partition needs metadata, earliest retry time)."""
        assert self._nursery is not None
        now = time.monotonic()
        need_meta = False
        by_node: dict[int, list[TopicPartition]] = {}
        next_retry: float | None = None
        for tp, st in self._states.items():
            if (st.paused or st.position is None or st.inflight or st.error is not None
                    or len(st.buffered) >= self.max_buffered_fetches):
                continue
            if st.retry_at > now:
                next_retry = st.retry_at if next_retry is None else min(next_retry, st.retry_at)
                continue
            leader = self._core.metadata.leader(tp)
            if leader < 0:
                need_meta = True
                continue
            by_node.setdefault(leader, []).append(tp)
        for node, tps in by_node.items():
            free = self.FETCHES_PER_NODE - self._node_fetches.get(node, 0)
            k = min(free, len(tps))
            for group in (tps[i::k] for i in range(k)):  # spread over the free slots
                fetch = _Fetch(self, node, group)
                if nowait:
                    pending = self._send_nowait(node, fetch.body)
                    if pending is None:
                        self._fetch_wake.set()  # the fetch loop sends it the ordinary way
                        break
                    fetch.pending = pending
                self._node_fetches[node] = self._node_fetches.get(node, 0) + 1
                for tp in group:
                    self._states[tp].inflight = True
                self._nursery.start_soon(self._fetch_node, fetch)
        if nowait and need_meta:
            self._fetch_wake.set()
        return need_meta, next_retry

    def _send_nowait(self, node: int, body: dict[str, Any]) -> PendingResponse | None:
        b = self._core.metadata.brokers.get(node)
        pool = self._core.pool
        if b is None or pool is None:
            return None
        conn = pool.get_nowait(b.host, b.port)
        return None if conn is None else conn.send_request_nowait(ApiKey.FETCH, body)

    async def _fetch_node(self, fetch: _Fetch) -> None:
        node, tps = fetch.node, fetch.tps
        try:
            resp = await self._core.request_node(node, ApiKey.FETCH, fetch.body,
                                                 extra_timeout_ms=self.fetch_max_wait_ms,
                                                 pending=fetch.pending)
            resp.raise_for_error()
            self._throttle.observe(resp.body)
            parts = split_fetch_response(resp.body, resp.raw)
        except RafkaError as exc:
            retry_at = time.monotonic() + self._core.retry_backoff_ms / 1000
            for tp in tps:
                st = self._states.get(tp)
                if st is not None and st.epoch == fetch.epochs[tp]:
                    if exc.retriable or exc.code in REFRESH_CODES:
                        st.retry_at = retry_at
                        self._core.metadata.invalidate_leader(tp)
                    else:
                        st.error = exc
            self._data.set()
            return
        finally:
            self._node_fetches[node] -= 1
            for tp in tps:
                st = self._states.get(tp)
                if st is not None:
                    st.inflight = False
            self._fetch_wake.set()
        got = self._take_answer(fetch, parts)
        # the next FETCH goes out before anyone decodes this one (module docstring)
        self._start_fetches(nowait=True)
        if got:
            self._data.set()

    def _take_answer(self, fetch: _Fetch, parts: list[PartitionData]) -> bool:
        """Buffer a FETCH answer's data per partition; True if ``poll`` has something new."""
        got = False
        for pd in parts:
            st = self._states.get(pd.tp)
            if st is None or st.epoch != fetch.epochs.get(pd.tp):
                continue  # unassigned or sought meanwhile: stale data
            if pd.high_watermark >= 0:
                st.high_watermark = pd.high_watermark
            if pd.log_start_offset >= 0:
                st.log_start_offset = pd.log_start_offset
            if pd.last_stable_offset >= 0:
                st.last_stable_offset = pd.last_stable_offset
            if pd.error:
                if pd.error == ErrorCode.OFFSET_OUT_OF_RANGE and self._nursery is not None:
                    # validate against a fresh leader/epoch before any reset (KIP-320)
                    st.inflight = True  # held back from fetching until validated
                    self._nursery.start_soon(self._validate_out_of_range, pd.tp, st, fetch.node,
                                             fetch.leader_epochs.get(pd.tp, -1), pd.message)
                    continue
                self._partition_error(pd.tp, st, pd.error, pd.message)
                got = True
                continue
            if not len(pd.raw):
                continue
            cf = CompletedFetch(pd.tp, pd.raw, st.epoch, pd.aborted)
            if cf.end_offset < 0:
                if len(pd.raw) >= self.max_partition_fetch_bytes:
                    st.error = RecordTooLargeError(
                        f"{pd.tp.topic}-{pd.tp.partition}: the batch at offset {st.fetch_offset} is larger "
                        f"than max_partition_fetch_bytes={self.max_partition_fetch_bytes}")
                    got = True
                continue
            st.fetch_offset = cf.end_offset
            st.buffered.append(cf)
            got = True
        return got

    def _partition_error(self, tp: TopicPartition, st: PartitionState, code: int, message: str) -> None:
        exc = error_for(code, f"{tp.topic}-{tp.partition}: {message}" if message else f"{tp.topic}-{tp.partition}")
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self.auto_offset_reset == "none":
                st.error = exc
            else:
                st.seek(None)
            return
        if code == ErrorCode.CORRUPT_MESSAGE:
            # stored data damaged on the broker (it names the range): retrying would hide it
            # forever; raise it from poll (the application may seek past the range)
            st.error = CorruptRecordError(str(exc.message))
            return
        if exc.retriable or code in REFRESH_CODES:
            self._core.metadata.invalidate_leader(tp)
            self._core.invalidate()
            st.retry_at = time.monotonic() + self._core.retry_backoff_ms / 1000
            return
        st.error = exc

    async def _validate_out_of_range(self, tp: TopicPartition, st: PartitionState, node: int,
                                     leader_epoch: int, message: str) -> None:
        """OFFSET_OUT_OF_RANGE from ``node`` (leader in ``leader_epoch`` when the fetch was sent):
        reset only if a metadata refresh shows the same leader in the same epoch; otherwise
        retry the fetch at the same position (a stale or deposed leader answered)."""
        epoch = st.epoch
        refreshed = False
        try:
            self._core.invalidate()
            with contextlib.suppress(RafkaError):
                await self._core.refresh_metadata()
                refreshed = True
        finally:
            if self._states.get(tp) is st:
                st.inflight = False
            self._fetch_wake.set()
        if self._states.get(tp) is not st or st.epoch != epoch:
            return  # unassigned, sought or reset meanwhile
        pm = self._core.metadata.partition(tp)
        if (not refreshed or pm is None or self._core.metadata.leader(tp) != node
                or pm.leader_epoch != leader_epoch):
            # leadership moved (or is unknown): fetch again at the same position
            if not refreshed or pm is None or pm.leader < 0:
                st.retry_at = time.monotonic() + self._core.retry_backoff_ms / 1000
            return
        self._partition_error(tp, st, ErrorCode.OFFSET_OUT_OF_RANGE, message)
        self._data.set()
        self._fetch_wake.set()

    async def _reset(self, tps: list[TopicPartition]) -> None:
        """Give positions to partitions that have none: committed, else auto_offset_reset."""
        if self._coordinator is not None:
            committed = await self._coordinator.committed(tps)
            for tp, off in committed.items():
                st = self._states.get(tp)
                if off is not None and st is not None and st.position is None:
                    st.seek(off)
            tps = [tp for tp in tps if tp in self._states and self._states[tp].position is None]
        if not tps:
            return
        if self.auto_offset_reset == "none":
            for tp in tps:
                self._states[tp].error = error_for(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"{tp.topic}-{tp.partition}: no position and auto_offset_reset='none'")
            self._data.set()
            return
        ts = EARLIEST if self.auto_offset_reset == "earliest" else LATEST
        epochs = {tp: self._states[tp].epoch for tp in tps}
        try:
            found = await list_offsets(self._core, {tp: ts for tp in tps}, attempts=3,
                                       isolation_level=self._isolation)
        except RafkaError:
            await trio.sleep(backoff_ms(1, self._core.retry_backoff_ms, 1000) / 1000)
            raise
        for tp, (off, _) in found.items():
            st = self._states.get(tp)
            if st is not None and st.position is None and st.epoch == epochs[tp]:
                st.seek(off)
        self._fetch_wake.set()
