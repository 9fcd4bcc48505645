"""AsyncProducer: trio-native, batching, pipelined, idempotent producer.

Theory of operation
-------------------
``send`` partitions the record (explicit partition; murmur2 of the key; or sticky for keyless
records — see ``rafka.client.partitioner``) and appends it to the partition's open batch in the
``RecordAccumulator`` (packed as it comes with the C codec); that is all the per-record work.
With the C extension the common case (open batch with room) is one C call
(``fast_send.bind_loop_send``), transactional producers included; the rest is Python.
One *sender* task, in the producer's nursery, drains closed batches, encodes them once, sends
them to their leaders in pipelined PRODUCE requests and handles the answers — retries, splits
of too-large batches, leader changes: ``rafka.client.aio.sender`` (``SenderLoop``, mixed in
here), whose docstring says how.

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
attributes bit 4 and PRODUCE carries the ``transactional_id``. ``send`` checks only the state
(IN_TRANSACTION; ``_txn_sending`` is the C path's copy of it). Without a transactional id none of
this runs.

Thread model: every method except ``send_threadsafe`` must run in the producer's trio loop.
``send_threadsafe`` is the sync facade's hot path: it appends straight from the caller's
thread (the accumulator is locked) and wakes the sender with ``run_sync_soon``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Literal

import trio
from rafka.client.aio._core import ClientCore
from rafka.client.aio.accumulator import (
    PartitionState,
    RecordAccumulator,
    record_size,
)
from rafka.client.aio.batch_send import BatchSendApi
from rafka.client.aio.conveniences import SendAndWaitApi, Serializer, install_serializers
from rafka.client.aio.futures import FutureRecordMetadata
from rafka.client.aio.sender import SenderLoop
from rafka.client.aio.transactions import TransactionalApi, TransactionManager
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
from rafka.wire.errors import ErrorCode, RafkaError, error_for

__all__ = ["AsyncProducer"]

_time_ns = time.time_ns
_new_future = object.__new__  # a FutureRecordMetadata without an __init__ frame (see futures.py)

Acks = Literal[0, 1, -1, "all"]
Headers = Sequence[tuple[str, bytes]] | None
_NO_HEADERS: Any = ()  # shared: a record without headers allocates nothing for them


class AsyncProducer(SenderLoop, TransactionalApi, BatchSendApi, SendAndWaitApi):
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
        connection_setup_timeout_ms: int | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60000,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        **security: Any,  # security_protocol, sasl_*, ssl_* as kafka-python (security/client.py)
    ) -> None:
        self.acks = _parse_acks(acks)
        self._txn: TransactionManager | None = None
        self._txn_sending = False  # in a transaction (kept by TransactionManager._to; read by C)
        # AsyncProducer.send's C append (client/aio/fast_send.py), once started
        self._loop_send: Callable[..., FutureRecordMetadata | None] | None = None
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
                                connection_setup_timeout_ms=connection_setup_timeout_ms,
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
        from rafka.client.aio.fast_send import bind_loop_send  # fast_send imports this module

        self._loop_send = bind_loop_send(self)
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
        fast = self._loop_send  # the common case in one C call (client/aio/fast_send.py)
        if fast is not None and (done := fast(topic, value, key, headers, partition,
                                              timestamp_ms)) is not None:
            return done
        if self._txn is not None:  # a suspected fence: fenced sends raise ProducerFencedError
            await self._txn.suspicion_settled()
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
        this method for everything else: a change to the accumulator's record layout
        (``ProducerBatch.add``: packed or rows), size or locking rules changes both.
        """
        acc = self._acc
        if acc is None or self._closed or self._fatal is not None or self._txn is not None:
            if self._txn is not None and self._txn.resolving:
                trio.from_thread.run(self._txn.suspicion_settled, trio_token=self._token)
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
            index = batch.add(ts - batch.ts0, key, value, hdrs)
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
        if pending:
            self._flushing += 1
            self._wakeup()
            try:
                for res in pending:
                    await res.wait_async()
            finally:
                self._flushing -= 1
        if self._txn is not None:  # a fenced transactional producer's flush says so
            await self._txn.suspicion_settled()
            self._txn.raise_if_fenced()

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

    def _start_soon(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` in the producer's nursery (the transaction manager's fence check)."""
        assert self._nursery is not None
        self._nursery.start_soon(fn)

    def _set_fatal(self, err: RafkaError) -> None:
        """Fenced: every later call raises ``err``; batches not sent yet fail with it."""
        self._fatal = err
        self._drop_unsent(err)


def _parse_acks(acks: Acks | str) -> int:
    if acks in ("all", -1, "-1"):
        return -1
    if acks in (0, 1, "0", "1"):
        return int(acks)
    raise ValueError(f"acks must be 0, 1, 'all' or -1, not {acks!r}")
