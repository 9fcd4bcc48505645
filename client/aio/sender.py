"""The producer's sender: one trio task that turns closed batches into PRODUCE requests.

Theory of operation
-------------------
``SenderLoop`` is mixed into ``AsyncProducer`` (``client/aio/producer.py``, which holds the
configuration, the lifecycle and the ``send`` family); its ``_sender`` task runs in the
producer's nursery and loops:

1. drain closed and lingered batches from the accumulator into per-partition ``PartitionState``
   queues;
2. for every partition whose leader is known and that may send (``max_in_flight``, retry
   ordering), take one batch, assign its idempotent sequence and build its bytes once
   (``log.batch.build_batch``, lz4 when asked);
3. group the batches by leader broker — all partitions led by one broker travel in one PRODUCE
   request (up to ``max_request_size``) — and start one request task per group; a broker has at
   most ``max_in_flight_requests_per_connection`` requests in flight, pipelined on one
   connection;
4. sleep until woken (a batch closed or was created, a response came back) or until the next
   linger / retry deadline.

Response handling per partition: success settles the batch (``BatchResult``) and frees its
memory; DUPLICATE_SEQUENCE_NUMBER counts as success (the broker already has it);
OUT_OF_ORDER_SEQUENCE_NUMBER is retried when an earlier batch of the partition is still
unacknowledged (the usual consequence of that earlier batch failing) and fatal otherwise;
retriable errors (NOT_LEADER_OR_FOLLOWER, timeouts, broken connections…) invalidate the
metadata and retry the batch with the same sequence after ``retry_backoff_ms``, as long as
``retries`` and ``delivery_timeout_ms`` allow; anything else fails the batch. ``acks=0``
requests get no response: their batches settle as sent, with offset -1.

MESSAGE_TOO_LARGE (the topic's ``max.message.bytes``; the leader checks it before appending, so
nothing of the batch was written and none of its sequences used) on a batch of several records
splits it, as Kafka's producer does (``_split``): into parts that fit the broker's limit when
its answer names it ("record batch of N bytes exceeds max.message.bytes=L", which also gives the
ratio of wire bytes to the accumulator's estimate), else into halves; the parts keep record
order, take over the original's sequences, and go ahead of every later batch of the partition
(``PartitionState.requeue_split``); a part refused again is split again. The futures already
returned follow their records into the parts (``BatchResult.split_into``). Only a single-record
batch fails, with ``MessageTooLargeError`` (code MESSAGE_TOO_LARGE); its sequence is given back and later batches of the
partition renumbered (``PartitionState.release_sequences``), so later records still go
through.

Leader changes during a retry backoff (the backoff doubles per attempt, up to 1 s): while a
batch waits out a backoff longer than ``_BACKOFF_REFRESH_S``, the sender refreshes the
metadata that often, and a batch whose partition is now led by another broker than the one its
last attempt went to is retried at once (as Kafka's KIP-951). Without it a producer that had
met a dead leader for a while learned of the new one only at its next attempt, up to a second
after the failover, and then still waited out one more backoff.

Everything here runs in the producer's trio loop; ``_wakeup`` is the one entry other threads
use (``send_threadsafe`` and the C send path wake the sender through it).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import trio
from rafka.client.aio._core import REFRESH_CODES, ClientCore
from rafka.client.aio.accumulator import (
    PartitionState,
    ProducerBatch,
    RecordAccumulator,
    record_size,
)
from rafka.client.aio.transactions import TransactionManager
from rafka.client.errors import KafkaTimeoutError
from rafka.client.throttle_stats import ThrottleMeter
from rafka.client.types import TopicPartition
from rafka.wire.connection import PendingResponse, backoff_ms
from rafka.wire.errors import ErrorCode, RafkaError, error_for
from rafka.wire.protocol import ApiKey, Response

__all__ = ["SenderLoop"]


class SenderLoop:
    """The sender task and the answer handling of ``AsyncProducer`` (mixed in; the attributes
    below are the producer's, set in its ``__init__``)."""

    acks: int
    enable_idempotence: bool
    compression: str
    max_request_size: int
    retries: int
    retry_backoff_ms: int
    delivery_timeout_ms: int
    request_timeout_ms: int
    max_in_flight: int
    _core: ClientCore
    _txn: TransactionManager | None
    _acc: RecordAccumulator | None
    _parts: dict[TopicPartition, PartitionState]
    _node_inflight: dict[int, int]
    _sent_to: dict[TopicPartition, int]
    _backoff_refresh_at: float
    _producer_id: int
    _producer_epoch: int
    _wake: trio.Event
    _flushing: int
    _closed: bool
    _nursery: trio.Nursery | None
    _token: trio.lowlevel.TrioToken | None
    _loop_thread: int
    _fatal: BaseException | None
    _batches_split: int
    _throttle: ThrottleMeter
    _fail_everything: Callable[[BaseException], None]

    def _wakeup(self) -> None:
        if threading.get_ident() == self._loop_thread:
            self._wake.set()
        elif self._token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._wake.set)

    @staticmethod
    def _open_partitions(acc: RecordAccumulator) -> list[TopicPartition]:
        """The partitions with a batch still open (lingering) in the accumulator."""
        with acc._lock:
            return [TopicPartition(t, p) for t, by_part in acc._open.items() for p in by_part]

    async def _sender(self) -> None:
        assert self._acc is not None and self._nursery is not None
        acc = self._acc
        if self.enable_idempotence and self._txn is None:  # transactions: init_transactions()
            await self._init_producer_id()
            if self._fatal is not None:
                return
        while True:
            self._wake = trio.Event()
            now = time.monotonic()
            for batch in acc.drain(now, force=self._flushing > 0 or self._closed, hold=self._hold):
                tp = TopicPartition(batch.topic, batch.partition)
                st = self._parts.get(tp)
                if st is None:
                    st = self._parts[tp] = PartitionState()
                st.pending.append(batch)
            if self._txn is not None:
                self._txn.want_open(self._open_partitions(acc))
            self._expire(now)
            need_meta = await self._dispatch(now)
            if need_meta:
                self._nursery.start_soon(self._refresh_for_sender)
            deadline = self._next_deadline()
            timeout = 1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            if need_meta:
                timeout = min(timeout, self.retry_backoff_ms / 1000)
            elif self._waiting_out_backoff(now):  # has its leader changed meanwhile?
                if now >= self._backoff_refresh_at:
                    self._backoff_refresh_at = now + _BACKOFF_REFRESH_S
                    self._nursery.start_soon(self._refresh_for_sender)
                timeout = min(timeout, max(0.0, self._backoff_refresh_at - now))
            acc.wake_armed = True
            if acc.has_closed():
                acc.wake_armed = False
                continue
            with trio.move_on_after(timeout):
                await self._wake.wait()
            acc.wake_armed = False

    def _waiting_out_backoff(self, now: float) -> bool:
        """Does a batch wait for a retry more than ``_BACKOFF_REFRESH_S`` from now?"""
        return any((t := st.next_ready_time()) is not None and t - now > _BACKOFF_REFRESH_S
                   for st in self._parts.values())

    def _hold(self, topic: str, partition: int) -> bool:
        """Keep this partition's open batch filling: it could not be sent now anyway (earlier
        batches of the partition are queued, or its leader has ``max_in_flight`` requests out).
        Draining it would queue a small batch; holding it lets the backlog travel in big ones
        (as Kafka's accumulator drains only partitions whose node is ready)."""
        st = self._parts.get(TopicPartition(topic, partition))
        if st is not None and (st.pending or st.retry):
            return True
        leader = self._core.metadata.leader(TopicPartition(topic, partition))
        return leader >= 0 and self._node_inflight.get(leader, 0) >= self.max_in_flight

    def _next_deadline(self) -> float | None:
        assert self._acc is not None
        candidates = [d for d in (self._acc.next_deadline(self._hold),) if d is not None]
        for st in self._parts.values():
            t = st.next_ready_time()
            if t is not None:
                candidates.append(t)
        return min(candidates) if candidates else None

    async def _refresh_for_sender(self) -> None:
        with contextlib.suppress(RafkaError):
            await self._core.refresh_metadata()
        self._wake.set()

    async def _init_producer_id(self) -> None:
        attempt = 0
        while True:
            try:
                resp = await self._core.request_any(ApiKey.INIT_PRODUCER_ID, {})
                resp.raise_for_error()
                self._producer_id = int(resp.body["producer_id"])
                self._producer_epoch = int(resp.body["producer_epoch"])
                return
            except RafkaError as exc:
                if not exc.retriable and not isinstance(exc, KafkaTimeoutError) and exc.code not in REFRESH_CODES:
                    self._fatal = exc  # later sends raise it; the sender stops
                    self._fail_everything(exc)
                    return
                attempt += 1
                await trio.sleep(backoff_ms(attempt, self.retry_backoff_ms, 1000) / 1000)

    def _expire(self, now: float) -> None:
        """Fail batches older than delivery_timeout_ms that are not in flight."""
        limit = now - self.delivery_timeout_ms / 1000
        for tp, st in self._parts.items():
            expired = [b for b in (*st.pending, *st.retry) if b.created < limit]
            for b in expired:
                if b in st.retry:
                    st.retry.remove(b)
                else:
                    st.pending.remove(b)
                self._settle(b, error=KafkaTimeoutError(
                    f"{tp.topic}-{tp.partition}: {b.record_count} records expired after "
                    f"delivery_timeout_ms={self.delivery_timeout_ms} ({b.attempts} attempts)"))

    async def _dispatch(self, now: float) -> bool:
        """Start produce requests for every sendable batch; True if some leader is unknown.

        Rounds: each takes at most one batch per partition (one partition entry per request),
        grouped by leader; repeat while something was sendable. Requests are *written* here,
        in order (so a partition's batches reach its leader in sequence order), and their
        responses awaited by one task per request.
        """
        assert self._nursery is not None
        meta = self._core.metadata
        need_meta = False
        txn = self._txn
        while True:
            by_node: dict[int, list[tuple[PartitionState, ProducerBatch]]] = {}
            for tp, st in self._parts.items():
                if not (st.pending or st.retry):
                    continue
                if txn is not None and tp not in txn.partitions:  # not in the transaction yet
                    if not txn.want(tp):  # and never will be: the transaction failed
                        err = txn.error or error_for(ErrorCode.INVALID_TXN_STATE, "no open transaction")
                        for b in [*st.pending, *st.retry]:
                            self._settle(b, error=type(err)(err.message, **err.details))
                        st.pending.clear()
                        st.retry.clear()
                    continue
                leader = meta.leader(tp)
                if leader < 0:
                    need_meta = True
                    continue
                if self._node_inflight.get(leader, 0) >= self.max_in_flight:
                    continue
                if st.retry and self._sent_to.get(tp, leader) != leader:
                    for b in st.retry:  # a new leader: no backoff for it (Kafka's KIP-951)
                        b.retry_at = min(b.retry_at, now)
                batch = st.next_to_send(now, self.max_in_flight)
                if batch is not None:
                    self._sent_to[tp] = leader
                    by_node.setdefault(leader, []).append((st, batch))
            if txn is not None and (adds := txn.take_wanted()):  # one ADD_PARTITIONS for them all
                self._nursery.start_soon(txn.add_partitions, adds)
            if not by_node:
                return need_meta
            for node, items in by_node.items():
                while items:
                    if self._node_inflight.get(node, 0) >= self.max_in_flight:
                        for st, batch in reversed(items):  # not prepared yet: put back in front
                            if batch.attempts:
                                st.retry.insert(0, batch)
                            else:
                                st.pending.appendleft(batch)
                        break
                    group: list[tuple[PartitionState, ProducerBatch]] = []
                    size = 0
                    while items and (not group or size + items[0][1].size <= self.max_request_size):
                        st, batch = items.pop(0)
                        self._prepare(st, batch)
                        size += len(batch.payload or b"")
                        group.append((st, batch))
                    self._node_inflight[node] = self._node_inflight.get(node, 0) + 1
                    for st, batch in group:
                        batch.after_earlier = bool(st.inflight)
                        st.sent(batch)
                    await self._produce(node, group)

    def _prepare(self, st: PartitionState, batch: ProducerBatch) -> None:
        if batch.payload is None:
            if self.enable_idempotence:
                st.assign_sequence(batch)
                batch.producer_epoch = self._producer_epoch
            batch.payload = batch.encode(
                compression=self.compression,
                producer_id=self._producer_id if self.enable_idempotence else -1,
                producer_epoch=self._producer_epoch if self.enable_idempotence else -1,
                base_sequence=batch.base_sequence, transactional=self._txn is not None)
        batch.attempts += 1

    async def _produce(self, node: int, group: list[tuple[PartitionState, ProducerBatch]]) -> None:
        """Write one PRODUCE request (in the sender task); a child task awaits the answer."""
        assert self._nursery is not None and self._core.pool is not None
        topics: dict[str, list[dict[str, Any]]] = {}
        for _, b in group:
            topics.setdefault(b.topic, []).append({"partition": b.partition, "records": b.payload})
        body = {"acks": self.acks, "timeout_ms": self.request_timeout_ms,
                "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}
        if self._txn is not None:
            body["transactional_id"] = self._txn.transactional_id
        try:
            host, port = self._core.send_only_node(node)
            with trio.fail_after(self.request_timeout_ms / 1000):
                conn = await self._core.pool.get(host, port)
                if self.acks == 0:
                    await conn.send_only(int(ApiKey.PRODUCE), body)
                else:
                    pending = await conn.send_request(int(ApiKey.PRODUCE), body)
        except (RafkaError, KeyError, trio.TooSlowError) as exc:
            err = exc if isinstance(exc, RafkaError) else error_for(
                ErrorCode.NETWORK_EXCEPTION, f"cannot send to broker {node}: {exc!r}")
            self._node_inflight[node] -= 1
            for st, b in group:
                self._failed(st, b, err)
            return
        if self.acks == 0:
            self._node_inflight[node] -= 1
            for st, b in group:
                st.done(b)
                self._settle(b, base_offset=-1)
            return
        self._nursery.start_soon(self._await_response, node, (host, port), group, pending)

    async def _await_response(self, node: int, addr: tuple[str, int],
                              group: list[tuple[PartitionState, ProducerBatch]], pending: PendingResponse) -> None:
        resp: Response | None = None
        try:
            with trio.move_on_after(self.request_timeout_ms / 1000):
                resp = await pending.wait()
            if resp is not None:
                resp.raise_for_error()
            else:
                pending.abandon()
                assert self._core.pool is not None
                self._core.pool.discard(*addr)
                raise error_for(ErrorCode.REQUEST_TIMED_OUT,
                                f"PRODUCE to broker {node} got no answer within {self.request_timeout_ms} ms")
        except RafkaError as exc:
            if exc.code in REFRESH_CODES:
                self._core.invalidate()
            for st, b in group:
                self._failed(st, b, exc)
            return
        finally:
            self._node_inflight[node] -= 1
            self._wake.set()
        assert resp is not None
        self._throttle.observe(resp.body)
        results = {(t["name"], p["partition"]): p for t in resp.body.get("topics") or []
                   for p in t.get("partitions") or []}
        for st, b in group:
            r = results.get((b.topic, b.partition))
            if r is None:
                self._failed(st, b, error_for(ErrorCode.UNKNOWN_SERVER_ERROR, "partition missing from the produce response"))
                continue
            code = r.get("error") or 0
            if code == 0 or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                st.done(b)
                self._settle(b, base_offset=int(r.get("base_offset", -1)),
                             log_append_time=int(r.get("log_append_time") or -1))
            else:
                self._failed(st, b, error_for(code, r.get("message") or ""))

    def _failed(self, st: PartitionState, b: ProducerBatch, exc: RafkaError) -> None:
        tp = TopicPartition(b.topic, b.partition)
        now = time.monotonic()
        retriable = exc.retriable or exc.code in REFRESH_CODES
        if exc.code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID):
            # an earlier batch was unacknowledged when this one was sent (or still is): it
            # probably failed first, so go again in sequence order; otherwise it is fatal
            retriable = b.after_earlier or st.has_earlier(b)
        if exc.code in REFRESH_CODES:
            self._core.metadata.invalidate_leader(tp)
            self._core.invalidate()
        expired = now - b.created > self.delivery_timeout_ms / 1000
        if exc.code == ErrorCode.MESSAGE_TOO_LARGE and b.record_count > 1 and not expired:
            self._split(st, b, exc, now)
            return
        if retriable and b.attempts <= self.retries and not expired:
            st.requeue(b, now + backoff_ms(b.attempts - 1, self.retry_backoff_ms, 1000) / 1000)
            return
        st.done(b)
        if exc.code in _NOT_APPENDED:
            # the broker refused the batch without appending it: give its sequences back (and
            # move later batches' down), or the partition's next batch would leave a gap the
            # broker refuses for good (UNKNOWN_PRODUCER_ID / OUT_OF_ORDER_SEQUENCE_NUMBER)
            st.release_sequences(b)
        if exc.message and f"{b.topic}-{b.partition}" not in exc.message:
            exc = type(exc)(f"{b.topic}-{b.partition}: {exc.message}", **exc.details)
        self._settle(b, error=exc)

    def _split(self, st: PartitionState, b: ProducerBatch, exc: RafkaError, now: float) -> None:
        """Split a batch the broker refused as too large (nothing appended) and queue the parts
        ahead of the partition's later batches; see the module docstring."""
        assert self._acc is not None
        st.done(b)
        starts = _split_points(b, exc.message or "")
        parts = self._acc.split(b, starts)
        self._batches_split += 1
        st.requeue_split(parts, now)
        self._wake.set()

    def _settle(self, b: ProducerBatch, *, base_offset: int = -1, log_append_time: int = -1,
                error: BaseException | None = None) -> None:
        assert self._acc is not None
        if error is not None and self._txn is not None:
            if self._txn.batch_failed(error, b.base_sequence >= 0, b.result):
                self._acc.release(b)  # completed once the coordinator says whether we are fenced
                return
        b.result.complete(base_offset, log_append_time, error)
        self._acc.release(b)


# while a batch waits out a longer retry backoff, refresh the metadata this often (seconds)
_BACKOFF_REFRESH_S = 0.1

# answers that mean the leader validated the batch and appended nothing
_NOT_APPENDED = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE,
                           ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_RECORD,
                           ErrorCode.INVALID_TIMESTAMP})


_TOO_LARGE_RE = re.compile(r"batch of (\d+) bytes exceeds max\.message\.bytes=(\d+)")
_BATCH_OVERHEAD = 61 + 16  # v2 batch header + the records array's msgpack framing, roughly


def _split_points(b: ProducerBatch, message: str) -> list[int]:
    """First record index of each part of a too-large batch of at least two records: parts of
    at most the broker's limit (scaled by the answer's wire bytes / our estimate, with a margin)
    when the answer names it, else two halves by estimated size. At least two parts, never an
    empty one, record order kept."""
    rows = b.records
    sizes = [record_size(r[2], r[3], r[4]) for r in rows]
    m = _TOO_LARGE_RE.search(message)
    if m is not None and b.size > 0:
        wire, limit = int(m.group(1)), int(m.group(2))
        ratio = max(wire / b.size, 0.01)
        target = (limit - _BATCH_OVERHEAD) / ratio * 0.9
        starts = [0]
        acc = 0
        for i, sz in enumerate(sizes):
            if acc and acc + sz > target:
                starts.append(i)
                acc = 0
            acc += sz
        if len(starts) > 1:
            return starts
    half = sum(sizes) / 2
    acc = 0
    for i, sz in enumerate(sizes[:-1]):
        acc += sz
        if acc >= half:
            return [0, i + 1]
    return [0, len(rows) - 1]


