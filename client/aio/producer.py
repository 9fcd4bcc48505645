"""AsyncProducer: trio-native, batching, pipelined, idempotent producer.

Theory of operation
-------------------
The producer is a composition root: ``__init__`` checks the settings once (``ProducerConfig``,
``client/aio/producer_config.py``) and builds its collaborators, each owning the state it uses:

* ``Enqueue`` (``client/aio/enqueue.py``) — the one path every record takes in. ``send``,
  ``send_nowait``, ``send_threadsafe``, ``send_batch``, ``send_batch_threadsafe`` and
  ``send_and_wait`` are thin fronts of it that differ only in how they wait for metadata and
  buffer room. ``send`` partitions the record (explicit partition; murmur2 of the key; or
  sticky for keyless records — see ``rafka.client.partitioner``) and appends it to the
  partition's open batch in the ``RecordAccumulator`` (packed as it comes with the C codec);
  that is all the per-record work. With the C extension the common case (open batch with room)
  is one C call (``fast_send.bind_loop_send``; the sync ``Producer.send``: ``bind_send``),
  transactional producers included; the rest is Python.
* ``Gate`` — closed / fatal / in a transaction: what every send checks first, shared by the
  enqueue path, the sender and the transaction manager.
* ``Sender`` (``client/aio/sender.py``), built at start from the accumulator, the client core
  and the transaction manager: one task in the producer's nursery that drains closed batches,
  encodes them once, sends them to their leaders in pipelined PRODUCE requests and handles the
  answers — retries, splits of too-large batches, leader changes.
* ``TransactionManager`` (``client/aio/transactions.py``, docs/transactions.md), only with a
  ``transactional_id``: ``init_transactions`` / ``begin_transaction`` /
  ``send_offsets_to_transaction`` / ``commit_transaction`` / ``abort_transaction`` /
  ``transaction()`` delegate to it. The sender keeps a partition's batches queued until the
  coordinator acknowledged the partition; transactional batches carry attributes bit 4 and
  PRODUCE carries the ``transactional_id``. ``send`` checks only the state (IN_TRANSACTION;
  ``Gate.txn_sending`` is the C path's copy of it). Without a transactional id none of this runs.

Defaults differ from Kafka in one place: ``batch_size`` is 256 KiB (Kafka: 16 KiB). A rafka
broker pays a fixed cost per produce request (Python dispatch, flush policy), so bigger batches
move several times more records per second; ``linger_ms`` still bounds the latency of slow
streams, since a batch is sent when it is full *or* has lingered.

Idempotence (default on when ``acks='all'``, as in Kafka) gets a producer id and epoch with
INIT_PRODUCER_ID before the first send.

Thread model: every method except ``send_threadsafe`` / ``send_batch_threadsafe`` must run in
the producer's trio loop. Those two are the sync facade's paths: they append straight from the
caller's thread (the accumulator is locked) and the accumulator wakes the sender with
``run_sync_soon``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Any

import trio
from rafka.client.aio._core import ClientCore
from rafka.client.aio.accumulator import RecordAccumulator
from rafka.client.aio.batch_send import BatchFuture, HeadersList
from rafka.client.aio.conveniences import Serializer, install_serializers
from rafka.client.aio.enqueue import Enqueue, Gate, Headers
from rafka.client.aio.futures import FutureRecordMetadata
from rafka.client.aio.producer_config import Acks, ProducerConfig
from rafka.client.aio.sender import Sender, Wakeup
from rafka.client.aio.transactions import TransactionManager
from rafka.client.errors import IllegalStateError
from rafka.client.partitioner import Partitioner, make_partitioner
from rafka.client.throttle_stats import ThrottleMeter
from rafka.client.types import CommitOffsets, GroupMetadata, RecordMetadata, commit_offsets
from rafka.security.client import ClientSecurity
from rafka.wire.errors import RafkaError

__all__ = ["AsyncProducer"]


class AsyncProducer:
    """``async with AsyncProducer(bootstrap_servers=...) as p: fut = await p.send(...)``.

    With ``transactional_id``: ``init_transactions()``, ``begin_transaction()``,
    ``send_offsets_to_transaction()``, ``commit_transaction()``, ``abort_transaction()``,
    ``transaction()``. Whole batches: ``send_batch``. ``key_serializer`` / ``value_serializer``
    (``f(obj) -> bytes``; ``None`` is passed through; ``rafka.client.aio.conveniences``) and
    ``send_and_wait``."""

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
        cfg = self.config = ProducerConfig.build(
            acks=acks, enable_idempotence=enable_idempotence,
            transactional=transactional_id is not None, compression_type=compression_type,
            max_in_flight=max_in_flight_requests_per_connection, batch_size=batch_size,
            linger_ms=linger_ms, buffer_memory=buffer_memory, max_block_ms=max_block_ms,
            max_request_size=max_request_size, retries=retries, retry_backoff_ms=retry_backoff_ms,
            delivery_timeout_ms=delivery_timeout_ms, request_timeout_ms=request_timeout_ms)
        # the settings, as before the composition (public attributes; the collaborators read cfg)
        self.acks, self.enable_idempotence, self.compression = cfg.acks, cfg.enable_idempotence, cfg.compression
        self.max_block_ms, self.max_request_size, self.buffer_memory = (
            cfg.max_block_ms, cfg.max_request_size, cfg.buffer_memory)
        self.retries, self.retry_backoff_ms, self.delivery_timeout_ms, self.request_timeout_ms = (
            cfg.retries, cfg.retry_backoff_ms, cfg.delivery_timeout_ms, cfg.request_timeout_ms)
        self.max_in_flight = cfg.max_in_flight
        self._txn: TransactionManager | None = None
        if transactional_id is not None:
            self._txn = TransactionManager(transactional_id, transaction_timeout_ms,
                                           request_timeout_ms=request_timeout_ms,
                                           retry_backoff_ms=retry_backoff_ms)
        self._core = ClientCore(bootstrap_servers, client_id=client_id,
                                request_timeout_ms=request_timeout_ms,
                                retry_backoff_ms=retry_backoff_ms,
                                metadata_max_age_ms=metadata_max_age_ms,
                                connection_setup_timeout_ms=connection_setup_timeout_ms,
                                security=ClientSecurity.from_kwargs(security))
        self._gate = Gate()
        self._enqueue = Enqueue(cfg, self._core, make_partitioner(partitioner), self._txn, self._gate)
        self._wakeup = Wakeup()
        self._sender: Sender | None = None  # built by __aenter__, with the accumulator
        # AsyncProducer.send's C append (client/aio/fast_send.py), once started
        self._loop_send: Callable[..., FutureRecordMetadata | None] | None = None
        self._started = False
        install_serializers(self, key_serializer, value_serializer)  # a no-op without them

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> AsyncProducer:
        if self._started:
            raise IllegalStateError("a producer can be started once; create a new one")
        self._started = True
        loop_thread = threading.get_ident()
        token = trio.lowlevel.current_trio_token()
        cfg = self.config
        acc = RecordAccumulator(batch_size=cfg.batch_size, buffer_memory=cfg.buffer_memory,
                                linger_ms=cfg.linger_ms, wakeup=self._wakeup,
                                loop_thread=loop_thread)
        self._wakeup.start(loop_thread, token)
        self._enqueue.start(acc, loop_thread, token)
        self._sender = Sender(acc, self._core, self._txn, config=cfg, gate=self._gate,
                              wakeup=self._wakeup)
        if self._txn is not None:
            self._txn.bind(self._sender)
        from rafka.client.aio.fast_send import bind_loop_send  # fast_send imports this module

        self._loop_send = bind_loop_send(self)
        self._sender.start(await self._core.start())
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        await self.close(flush=exc_type is None)
        return None

    async def close(self, *, flush: bool = True) -> None:
        """Flush (unless ``flush=False``: unsent records fail) and stop. Idempotent."""
        if self._gate.closed or self._sender is None:  # closed, or never started
            self._gate.closed = True
            return
        try:
            if flush:
                with contextlib.suppress(RafkaError):
                    await self.flush()
        finally:
            self._gate.closed = True
            await self._core.shutdown()
            self._sender.fail_everything(IllegalStateError("producer closed before the record was sent"))

    # ------------------------------------------------------------------ send: fronts of Enqueue

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
        return await self._enqueue.send(topic, value, key, headers, partition, timestamp_ms)

    def send_nowait(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                    headers: Headers = None, partition: int | None = None,
                    timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Non-blocking ``send`` (loop thread): raises ``BufferExhaustedError`` at once when the
        buffer is full, ``KafkaTimeoutError`` when the topic's metadata is not cached yet."""
        return self._enqueue.send_nowait(topic, value, key, headers, partition, timestamp_ms)

    def send_threadsafe(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                        headers: Headers = None, partition: int | None = None,
                        timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """``send`` from a thread other than the loop's (the sync facade's path).

        Appends under the accumulator's lock without entering the loop; the first send to a
        topic hops into the loop once for its metadata. Blocks up to ``max_block_ms`` on a full
        buffer. ``client/_sendpath.c`` does the common case in C (``client/aio/fast_send.py``)
        and calls this method for everything else.
        """
        return self._enqueue.send_threadsafe(topic, value, key, headers, partition, timestamp_ms)

    async def send_batch(self, topic: str, values: Sequence[bytes | None],
                         keys: Sequence[bytes | None] | None = None, headers: HeadersList = None,
                         partition: int | None = None,
                         timestamp_ms: int | None = None) -> BatchFuture:
        """Queue ``values`` (with the aligned ``keys`` / ``headers``) as ``send`` would each of
        them; returns one ``BatchFuture`` (``await fut`` → a ``Sequence`` of ``RecordMetadata``,
        input order, built on access). Waits up to ``max_block_ms`` for metadata and buffer
        room. See ``client/aio/batch_send.py``."""
        return await self._enqueue.send_batch(topic, values, keys, headers, partition, timestamp_ms)

    def send_batch_threadsafe(self, topic: str, values: Sequence[bytes | None],
                              keys: Sequence[bytes | None] | None = None,
                              headers: HeadersList = None, partition: int | None = None,
                              timestamp_ms: int | None = None) -> BatchFuture:
        """``send_batch`` from a thread other than the loop's (the sync ``Producer``)."""
        return self._enqueue.send_batch_threadsafe(topic, values, keys, headers, partition,
                                                   timestamp_ms)

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None,
                            headers: Headers = None, partition: int | None = None,
                            timestamp_ms: int | None = None) -> RecordMetadata:
        """``send`` and wait for the acknowledgement: the record's ``RecordMetadata``, or its
        error raised (aiokafka's name; ``await (await p.send(...))`` does the same)."""
        fut = await self.send(topic, value, key, headers, partition, timestamp_ms)
        return await fut

    # ------------------------------------------------------------------ the rest

    async def wait_for_topic(self, topic: str) -> int:
        """Make sure ``topic``'s metadata is cached; returns its partition count."""
        return await self._core.wait_for_topic(topic, self.config.max_block_ms)

    async def partitions_for(self, topic: str) -> set[int]:
        await self.wait_for_topic(topic)
        return set(self._core.metadata.topics.get(topic) or ())

    def _started_sender(self) -> Sender:
        self._enqueue.check_open()
        assert self._sender is not None
        return self._sender

    async def flush(self) -> None:
        """Wait until every record sent before this call is acknowledged or has failed."""
        await self._started_sender().flush()

    def statistics(self) -> dict[str, Any]:
        if self._sender is not None:
            return self._sender.statistics()
        return {"buffer_used_bytes": 0, "incomplete_batches": 0, "requests_in_flight": 0,  # not started
                "producer_id": -1, "producer_epoch": -1, "batches_split": 0,
                **ThrottleMeter().statistics(),
                **(self._txn.statistics() if self._txn is not None else {})}

    # ------------------------------------------------------------------ transactions

    def _transactional(self) -> TransactionManager:
        if self._txn is None:
            raise IllegalStateError("transactions need a producer with a transactional_id")
        if self._sender is None or self._gate.closed:
            raise IllegalStateError("producer is not open (use `async with AsyncProducer(...)`)")
        return self._txn

    async def init_transactions(self) -> None:
        """Get the transactional id's producer id and epoch from its coordinator — fencing older
        producers with the same id, and ending what they left open. Once, before anything else."""
        await self._transactional().init()

    async def begin_transaction(self) -> None:
        """Start a transaction: the records sent until commit/abort belong to it."""
        self._transactional().begin()

    async def send_offsets_to_transaction(
            self, offsets: CommitOffsets, group_metadata: GroupMetadata | str) -> None:
        """Commit a consumer group's ``offsets`` (the next offset to read, per partition; an int
        or an ``OffsetAndMetadata``) as part of the transaction: visible when it commits,
        dropped if it aborts."""
        await self._transactional().send_offsets(commit_offsets(offsets), group_metadata)

    async def commit_transaction(self) -> None:
        """Flush, then commit. A batch that failed fails the commit with its error (then
        ``abort_transaction()``); a ``KafkaTimeoutError`` can be retried by calling again."""
        await self._transactional().commit()

    async def abort_transaction(self) -> None:
        """Drop the records not sent yet and abort the transaction (its records stay invisible
        to read_committed consumers)."""
        await self._transactional().abort()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """``async with producer.transaction():`` — begin; commit on normal exit, abort when the
        block raises (the exception propagates). A commit that fails is aborted, then raised."""
        self._transactional().begin()
        try:
            yield
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._end_block(True)
            raise
        await self._end_block(False)

    async def _end_block(self, failed: bool) -> None:
        """The end of a ``transaction()`` block (also the sync facade's)."""
        await self._transactional().end_block(failed)
