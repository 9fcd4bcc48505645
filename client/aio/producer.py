"""AsyncProducer: trio-native, batching, pipelined, idempotent producer.

Theory of operation
-------------------
``send`` partitions the record (explicit partition; murmur2 of the key; or sticky for keyless
records — see ``rafka.client.partitioner``) and appends a tuple to the partition's open batch in the
``RecordAccumulator``; that is all the per-record work. One *sender* task, in the producer's
nursery, loops:

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

Defaults differ from Kafka in one place: ``batch_size`` is 256 KiB (Kafka: 16 KiB). A rafka
broker pays a fixed cost per produce request (Python dispatch, flush policy), so bigger batches
move several times more records per second; ``linger_ms`` still bounds the latency of slow
streams, since a batch is sent when it is full *or* has lingered.

Idempotence (default on when ``acks='all'``, as in Kafka) gets a producer id and epoch with
INIT_PRODUCER_ID before the first send.

Transactions (``transactional_id``; docs/transactions.md, ``client/aio/transactions.py``):
the ``TransactionManager`` holds the transaction's state; ``init_transactions`` /
``begin_transaction`` / ``send_offsets_to_transaction`` / ``commit_transaction`` /
``abort_transaction`` / ``transaction()`` delegate to it. The sender keeps a partition's batches
queued until the coordinator acknowledged the partition (``_dispatch`` asks the manager, which
batches the partitions waiting into one ADD_PARTITIONS_TO_TXN); transactional batches carry
attributes bit 4 and PRODUCE carries the ``transactional_id``. Without a transactional id none of
this runs: ``send`` pays one ``is None`` test.

Thread model: every method except ``send_threadsafe`` must run in the producer's trio loop.
``send_threadsafe`` is the sync facade's hot path: it appends straight from the caller's
thread (the accumulator is locked) and wakes the sender with ``run_sync_soon``.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Literal

import trio
from rafka.broker.errors import ErrorCode, RafkaError, error_for
from rafka.broker.protocol import ApiKey, Response
from rafka.client.aio._core import REFRESH_CODES, ClientCore
from rafka.client.aio.accumulator import (
    PartitionState,
    ProducerBatch,
    RecordAccumulator,
    record_size,
)
from rafka.client.aio.batch_send import BatchSendApi
from rafka.client.aio.conveniences import SendAndWaitApi, Serializer, install_serializers
from rafka.client.aio.futures import FutureRecordMetadata
from rafka.client.aio.transactions import TransactionalApi, TransactionManager
from rafka.client.connection import PendingResponse, backoff_ms
from rafka.client.errors import (
    BufferExhaustedError,
    IllegalStateError,
    KafkaTimeoutError,
    RecordTooLargeError,
)
from rafka.client.partitioner import Murmur2Partitioner, Partitioner, make_partitioner
from rafka.client.throttle_stats import ThrottleMeter
from rafka.client.types import TopicPartition
from rafka.security.client import ClientSecurity

__all__ = ["AsyncProducer"]

_time_ns = time.time_ns
_new_future = object.__new__  # a FutureRecordMetadata without an __init__ frame (see futures.py)

Acks = Literal[0, 1, -1, "all"]
Headers = Sequence[tuple[str, bytes]] | None
_NO_HEADERS: Any = ()  # shared: a record without headers allocates nothing for them


class AsyncProducer(TransactionalApi, BatchSendApi, SendAndWaitApi):
    """``async with AsyncProducer(bootstrap_servers=...) as p: fut = await p.send(...)``.

    With ``transactional_id``: ``init_transactions()``, ``begin_transaction()``,
    ``send_offsets_to_transaction()``, ``commit_transaction()``, ``abort_transaction()``,
    ``transaction()`` (``TransactionalApi``). Whole batches: ``send_batch`` (``BatchSendApi``).
    ``key_serializer`` / ``value_serializer`` (``f(obj) -> bytes``; ``None`` is passed through)
    and ``send_and_wait``: ``rafka.client.aio.conveniences``."""

    def __init__(
        self,
        bootstrap_servers: str | list[str] = "127.0.0.1:9092",
        *,
        client_id: str = "rafka-producer",
        acks: Acks | str = "all",
        enable_idempotence: bool | None = None,
        compression_type: str | None = None,
        batch_size: int = 256 * 1024,
        linger_ms: float = 5,
        buffer_memory: int = 32 * 1024 * 1024,
        max_block_ms: float = 60000,
        max_request_size: int = 1024 * 1024,
        retries: int = 2**31 - 1,
        retry_backoff_ms: int = 100,
        delivery_timeout_ms: int = 120000,
        request_timeout_ms: int = 30000,
        max_in_flight_requests_per_connection: int = 5,
        partitioner: str | Partitioner | None = None,
        metadata_max_age_ms: int = 300000,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60000,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        **security: Any,  # security_protocol, sasl_*, ssl_* as kafka-python (security/client.py)
    ) -> None:
        self.acks = _parse_acks(acks)
        self._txn: TransactionManager | None = None
        if transactional_id is not None:  # transactions imply idempotence and acks=all
            if enable_idempotence is False or self.acks != -1:
                raise error_for(ErrorCode.INVALID_CONFIG, "a transactional producer needs acks='all' and "
                                f"idempotence (got acks={acks!r}, enable_idempotence={enable_idempotence!r})")
            enable_idempotence = True
            self._txn = TransactionManager(transactional_id, transaction_timeout_ms,
                                           request_timeout_ms=request_timeout_ms,
                                           retry_backoff_ms=retry_backoff_ms)
            self._txn.bind(self)
        if enable_idempotence is None:
            enable_idempotence = self.acks == -1
        elif enable_idempotence and self.acks != -1:
            raise ValueError("enable_idempotence=True requires acks='all' (or -1)")
        if enable_idempotence and max_in_flight_requests_per_connection > 5:
            raise ValueError("enable_idempotence allows at most 5 in-flight requests per connection")
        if compression_type not in (None, "none", "lz4"):
            raise ValueError(f"unknown compression_type {compression_type!r} (None | 'lz4')")
        self.enable_idempotence = enable_idempotence
        self.compression = "lz4" if compression_type == "lz4" else "none"
        self.max_block_ms = max_block_ms
        self.max_request_size = max_request_size
        self.buffer_memory = buffer_memory
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight_requests_per_connection
        self._partitioner = make_partitioner(partitioner)
        # the default partitioner's key -> hash cache, read inline by send_threadsafe
        self._hash_cache = (self._partitioner._cache
                            if type(self._partitioner) is Murmur2Partitioner else None)
        self._core = ClientCore(bootstrap_servers, client_id=client_id,
                                request_timeout_ms=request_timeout_ms,
                                retry_backoff_ms=retry_backoff_ms,
                                metadata_max_age_ms=metadata_max_age_ms,
                                security=ClientSecurity.from_kwargs(security))
        self._batch_size = batch_size
        self._linger_ms = linger_ms
        self._acc: RecordAccumulator | None = None
        self._parts: dict[TopicPartition, PartitionState] = {}
        self._node_inflight: dict[int, int] = {}
        self._sent_to: dict[TopicPartition, int] = {}  # node of a partition's last attempt
        self._backoff_refresh_at = 0.0
        self._producer_id = -1
        self._producer_epoch = -1
        self._wake = trio.Event()
        self._flushing = 0
        self._closed = False
        self._started = False
        self._nursery: trio.Nursery | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._loop_thread = 0
        self._fatal: BaseException | None = None
        self._max_record_size = min(max_request_size, buffer_memory)
        self._batches_split = 0  # batches split after MESSAGE_TOO_LARGE (statistics)
        self._throttle = ThrottleMeter()  # the brokers' throttle_time_ms (byte-rate quotas)
        install_serializers(self, key_serializer, value_serializer)  # a no-op without them

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> AsyncProducer:
        if self._started:
            raise IllegalStateError("a producer can be started once; create a new one")
        self._started = True
        self._loop_thread = threading.get_ident()
        self._token = trio.lowlevel.current_trio_token()
        self._acc = RecordAccumulator(batch_size=self._batch_size, buffer_memory=self.buffer_memory,
                                      linger_ms=self._linger_ms, wakeup=self._wakeup,
                                      loop_thread=self._loop_thread)
        stack = contextlib.AsyncExitStack()
        self._nursery = await stack.enter_async_context(trio.open_nursery())
        self._core.open(self._nursery)
        self._stack = stack
        self._nursery.start_soon(self._sender)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        await self.close(flush=exc_type is None)
        return None

    async def close(self, *, flush: bool = True) -> None:
        """Flush (unless ``flush=False``: unsent records fail) and stop. Idempotent."""
        if self._closed or self._stack is None:
            self._closed = True
            return
        try:
            if flush:
                with contextlib.suppress(RafkaError):
                    await self.flush()
        finally:
            self._closed = True
            assert self._nursery is not None and self._acc is not None
            stack, self._stack = self._stack, None
            await self._core.aclose()
            self._nursery.cancel_scope.cancel()
            await stack.aclose()
            self._fail_everything(IllegalStateError("producer closed before the record was sent"))

    def _fail_everything(self, err: BaseException) -> None:
        self._drop_unsent(err)
        assert self._acc is not None
        for st in self._parts.values():
            for b in st.inflight:
                b.result.complete(error=err)
                self._acc.release(b)
            st.inflight.clear()

    def _drop_unsent(self, err: BaseException) -> None:
        """Fail every batch not in flight: still in the accumulator, queued, or to retry."""
        assert self._acc is not None
        for batch in self._acc.drain(0, force=True):
            self._settle(batch, error=err)
        for st in self._parts.values():
            for b in [*st.pending, *st.retry]:
                self._settle(b, error=err)
            st.pending.clear()
            st.retry.clear()

    # ------------------------------------------------------------------ send

    async def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                   headers: Headers = None, partition: int | None = None,
                   timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue a record; returns its future (``await fut`` → ``RecordMetadata``).

        Waits up to ``max_block_ms`` for topic metadata and for buffer room, then raises
        ``KafkaTimeoutError`` / ``BufferExhaustedError``.
        """
        acc = self._check_send()
        n = self._core.metadata.num_partitions(topic)
        if n is None:
            n = await self._core.wait_for_topic(topic, self.max_block_ms)
        hdrs = list(headers) if headers else _NO_HEADERS
        size = record_size(key, value, hdrs)
        self._check_size(size)
        ts = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        p = self._choose(topic, key, partition, n)
        fut = acc.append(topic, p, key, value, hdrs, ts, size, n)
        if fut is None:
            with trio.move_on_after(self.max_block_ms / 1000):
                while fut is None:
                    await acc.wait_for_memory(size)
                    fut = acc.append(topic, p, key, value, hdrs, ts, size, n)
            if fut is None:
                raise BufferExhaustedError(
                    f"buffer_memory={self.buffer_memory} bytes stayed full for max_block_ms={self.max_block_ms:.0f}"
                )
        return fut

    def send_threadsafe(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                        headers: Headers = None, partition: int | None = None,
                        timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """``send`` from a thread other than the loop's (the sync facade's hot path).

        Appends under the accumulator's lock without entering the loop; the first send to a
        topic hops into the loop once for its metadata. Blocks up to ``max_block_ms`` on a full
        buffer. Kept flat on purpose: it is the whole per-record cost of the sync ``send``.
        ``client/_sendpath.c`` does this fast path in C (``client/aio/fast_send.py``) and calls
        this method for everything else: a change to the accumulator's row, size or locking
        rules changes both.
        """
        acc = self._acc
        if acc is None or self._closed or self._fatal is not None or self._txn is not None:
            acc = self._check_send()
        parts = self._core.metadata.topics.get(topic)
        if not parts:
            trio.from_thread.run(self.wait_for_topic, topic, trio_token=self._token)
            parts = self._core.metadata.topics[topic]
        n = len(parts)
        if headers:
            hdrs = list(headers)
            size = record_size(key, value, hdrs)
        else:
            hdrs = _NO_HEADERS
            size = 12 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
        if size > self._max_record_size:
            self._check_size(size)
        ts = _time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        if partition is not None:
            p = self._choose(topic, key, partition, n)
        elif key is None:
            p = -1
        else:
            cache = self._hash_cache
            h = cache.get(key) if cache is not None else None
            p = h % n if h is not None else self._partitioner(key, n)
        # Fast path, RecordAccumulator.append inlined: the partition's batch is open and has
        # room for this record without closing. Everything else (new batch, sticky choice,
        # batch full, buffer full) takes the accumulator's own path.
        lock = acc._lock
        lock.acquire()
        by_part = acc._open.get(topic)
        batch = by_part.get(p if p >= 0 else acc._sticky.get(topic, -1)) if by_part else None
        if (batch is not None and batch.segs is None and batch.size + size < acc.batch_size
                and acc.used + size <= acc.buffer_memory):
            records = batch._rows
            index = len(records)
            records.append((index, ts - batch.ts0, key, value, hdrs))
            batch.size += size
            acc.used += size
            lock.release()
            fut = _new_future(FutureRecordMetadata)
            fut._batch = batch.result
            fut._index = index
            fut._ts = ts
            return fut
        lock.release()
        slow = acc.append(topic, p, key, value, hdrs, ts, size, n)
        if slow is None:
            return self._append_blocking(acc, topic, p, key, value, hdrs, ts, size, n,
                                         self.max_block_ms / 1000)
        return slow

    def send_nowait(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                    headers: Headers = None, partition: int | None = None,
                    timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Non-blocking ``send`` (loop thread): raises ``BufferExhaustedError`` at once when the
        buffer is full, ``KafkaTimeoutError`` when the topic's metadata is not cached yet."""
        acc = self._check_send()
        n = self._core.metadata.num_partitions(topic)
        if n is None:
            raise KafkaTimeoutError(f"no metadata for topic {topic!r} yet (await wait_for_topic)")
        hdrs = list(headers) if headers else _NO_HEADERS
        size = record_size(key, value, hdrs)
        self._check_size(size)
        ts = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        p = self._choose(topic, key, partition, n)
        fut = acc.append(topic, p, key, value, hdrs, ts, size, n)
        if fut is None:
            raise BufferExhaustedError(f"buffer_memory={self.buffer_memory} bytes is full")
        return fut

    def _append_blocking(self, acc: RecordAccumulator, topic: str, p: int, key: bytes | None,
                         value: bytes | None, hdrs: Any, ts: int, size: int, n: int,
                         block_s: float) -> FutureRecordMetadata:
        deadline = time.monotonic() + block_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not acc.wait_for_memory_sync(size, left):
                raise BufferExhaustedError(
                    f"buffer_memory={self.buffer_memory} bytes stayed full for "
                    f"max_block_ms={block_s * 1000:.0f}")
            self._check_open()
            fut = acc.append(topic, p, key, value, hdrs, ts, size, n)
            if fut is not None:
                return fut

    async def wait_for_topic(self, topic: str) -> int:
        """Make sure ``topic``'s metadata is cached; returns its partition count."""
        return await self._core.wait_for_topic(topic, self.max_block_ms)

    async def partitions_for(self, topic: str) -> set[int]:
        await self.wait_for_topic(topic)
        return set(self._core.metadata.topics.get(topic) or ())

    def _check_open(self) -> RecordAccumulator:
        if self._acc is None or self._closed:
            raise IllegalStateError("producer is not open (use `async with AsyncProducer(...)`)")
        if self._fatal is not None:
            raise self._fatal
        return self._acc

    def _check_send(self) -> RecordAccumulator:
        """``_check_open``, and a transactional producer must be in a transaction."""
        acc = self._check_open()
        if self._txn is not None:
            self._txn.check_send()
        return acc

    def _check_size(self, size: int) -> None:
        if size > self.max_request_size:
            raise RecordTooLargeError(f"record of ~{size} bytes exceeds max_request_size={self.max_request_size}")
        if size > self.buffer_memory:
            raise RecordTooLargeError(f"record of ~{size} bytes exceeds buffer_memory={self.buffer_memory}")

    def _choose(self, topic: str, key: bytes | None, partition: int | None, n: int) -> int:
        if partition is not None:
            if not 0 <= partition < n:
                raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"topic {topic!r} has partitions 0..{n - 1}, not {partition}")
            return partition
        return self._partitioner(key, n) if key is not None else -1

    async def flush(self) -> None:
        """Wait until every record sent before this call is acknowledged or has failed."""
        acc = self._check_open()
        pending = list(acc.incomplete)
        if not pending:
            return
        self._flushing += 1
        self._wakeup()
        try:
            for res in pending:
                await res.wait_async()
        finally:
            self._flushing -= 1

    def statistics(self) -> dict[str, Any]:
        acc = self._acc
        return {
            "buffer_used_bytes": acc.used if acc else 0,
            "incomplete_batches": len(acc.incomplete) if acc else 0,
            "requests_in_flight": sum(self._node_inflight.values()),
            "producer_id": self._producer_id,
            "producer_epoch": self._producer_epoch,
            "batches_split": self._batches_split,
            **self._throttle.statistics(),
            **(self._txn.statistics() if self._txn is not None else {}),
        }

    # ------------------------------------------------------------------ transactions

    def _set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id / epoch (transactions): every partition's sequences restart at 0."""
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        for st in self._parts.values():
            st.next_seq = 0

    def _set_fatal(self, err: RafkaError) -> None:
        """Fenced: every later call raises ``err``; batches not sent yet fail with it."""
        self._fatal = err
        self._drop_unsent(err)

    # ------------------------------------------------------------------ sender

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
                    f"{tp.topic}-{tp.partition}: {len(b.records)} records expired after "
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
        if exc.code == ErrorCode.MESSAGE_TOO_LARGE and len(b.records) > 1 and not expired:
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
            self._txn.batch_failed(error, b.base_sequence >= 0)
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


def _parse_acks(acks: Acks | str) -> int:
    if acks in ("all", -1, "-1"):
        return -1
    if acks in (0, 1, "0", "1"):
        return int(acks)
    raise ValueError(f"acks must be 0, 1, 'all' or -1, not {acks!r}")
