"""Blocking ``Producer``, ``Consumer``, ``Admin``: thin facades over the async clients.

Theory of operation
-------------------
Each facade owns a ``_LoopThread``: a daemon thread running ``trio.run`` with the async client
entered as a context manager, parked on a stop event. Methods are forwarded with
``trio.from_thread.run`` (one thread hop per call) — there is no second implementation.

The producer's hot path is the exception: ``Producer.send`` appends straight from the caller's
thread into the (locked) record accumulator via ``AsyncProducer.send_threadsafe`` (a front of
the producer's one enqueue path, ``client/aio/enqueue.py``; or its C twin,
``client/aio/fast_send.py``) and only wakes the sender task; the first send to a topic
hops once to fetch its metadata. ``send`` returns a ``concurrent.futures.Future``
(``FutureRecordMetadata``).

``close()`` is idempotent; it exits the async context (the producer flushes first) and joins
the thread. Errors raised in the loop propagate to the calling thread unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Generic, TypeVar

import trio
from rafka.client.aio.admin import (
    AsyncAdmin,
    ClusterDescription,
    NewTopic,
    ProducerState,
    TopicDescription,
    TransactionDescription,
    TransactionListing,
)
from rafka.client.aio.batch_send import BatchFuture, HeadersList
from rafka.client.aio.consumer import AsyncConsumer
from rafka.client.aio.conveniences import ConsumerGroupListing
from rafka.client.aio.enqueue import Headers
from rafka.client.aio.fast_send import bind_send
from rafka.client.aio.futures import FutureRecordMetadata
from rafka.client.aio.producer import AsyncProducer
from rafka.client.aio.reassign_admin import PartitionReassignment
from rafka.client.columnar import ColumnBatch
from rafka.client.errors import IllegalStateError, RafkaError
from rafka.client.types import (
    CommitOffsets,
    ConsumerRecord,
    GroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
    commit_offsets,
)

__all__ = ["Producer", "Consumer", "Admin"]

T = TypeVar("T")
C = TypeVar("C", AsyncProducer, AsyncConsumer, AsyncAdmin)


class _LoopThread(Generic[C]):
    """A trio loop in a daemon thread, holding one entered async client."""

    def __init__(self, client: C, name: str) -> None:
        self.client: C = client
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            err, self._error = self._error, None
            self._closed = True
            raise err

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # reported to whoever waits (start or close)
            self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._stop = trio.Event()
        async with self.client:
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        return self._enter(trio.from_thread.run, fn, *args)

    def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        return self._enter(trio.from_thread.run_sync, fn, *args)

    def _enter(self, runner: Callable[..., T], fn: Callable[..., Any], *args: Any) -> T:
        """``runner(fn, *args)`` on the client's trio thread; a closed client is a named error."""
        if self._closed or self._token is None:
            raise IllegalStateError("client is closed")
        try:
            return runner(fn, *args, trio_token=self._token)
        except trio.RunFinishedError:
            raise IllegalStateError("client is closed") from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._token is not None and self._stop is not None:
            try:
                self._token.run_sync_soon(self._stop.set)
            except trio.RunFinishedError:
                pass
        self._thread.join()
        if self._error is not None:
            err, self._error = self._error, None
            raise err


class _Facade(Generic[C]):
    _loop: _LoopThread[C]

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop the client and its thread. Idempotent."""
        self._loop.close()


class Producer(_Facade[AsyncProducer]):
    """Blocking producer; same options as ``AsyncProducer``."""

    def __init__(self, bootstrap_servers: str | list[str] = "127.0.0.1:9092", **options: Any) -> None:
        self._async = AsyncProducer(bootstrap_servers, **options)
        self._loop = _LoopThread(self._async, "rafka-producer")
        # The hot path, bound once: ``send`` is one C call into the accumulator when the C
        # fast path is built (``client/aio/fast_send.py``), else ``send_threadsafe``.
        self.send = bind_send(self._async)  # type: ignore[method-assign]

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             headers: Headers = None, partition: int | None = None,
             timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue a record; returns a ``concurrent.futures.Future`` of ``RecordMetadata``.

        (Replaced per instance by ``fast_send.bind_send``: the C fast path or
        ``AsyncProducer.send_threadsafe``; this is its signature.)
        """
        return self._async.send_threadsafe(topic, value, key, headers, partition, timestamp_ms)

    def send_batch(self, topic: str, values: Sequence[bytes | None],
                   keys: Sequence[bytes | None] | None = None, headers: HeadersList = None,
                   partition: int | None = None, timestamp_ms: int | None = None) -> BatchFuture:
        """Queue many records at once (``AsyncProducer.send_batch``); returns one
        ``concurrent.futures.Future`` of their ``RecordMetadata`` sequence, in input order (a
        lazy ``RecordMetadataList``: built on first access; ``BatchSendError`` with
        ``.results`` when some failed)."""
        return self._async.send_batch_threadsafe(topic, values, keys, headers, partition, timestamp_ms)

    def send_and_wait(self, topic: str, value: Any = None, key: Any = None, headers: Headers = None,
                      partition: int | None = None, timestamp_ms: int | None = None) -> RecordMetadata:
        """``send(...).result()``: block until the record is acknowledged (its
        ``RecordMetadata``) or raise its error — ``AsyncProducer.send_and_wait``'s sync twin."""
        return self.send(topic, value, key, headers, partition, timestamp_ms).result()

    def flush(self, timeout: float | None = None) -> None:
        """Block until every record sent so far is acknowledged or failed."""
        if timeout is None:
            self._loop.run(self._async.flush)
        else:
            self._loop.run(_with_timeout, self._async.flush, timeout)

    def partitions_for(self, topic: str) -> set[int]:
        return self._loop.run(self._async.partitions_for, topic)

    def statistics(self) -> dict[str, Any]:
        return self._loop.run_sync(self._async.statistics)

    # transactions (``transactional_id``): the async producer's methods, blocking

    def init_transactions(self) -> None:
        self._loop.run(self._async.init_transactions)

    def begin_transaction(self) -> None:
        self._loop.run(self._async.begin_transaction)

    def send_offsets_to_transaction(self, offsets: CommitOffsets,
                                    group_metadata: GroupMetadata | str) -> None:
        """Offsets as ints or ``OffsetAndMetadata`` (their metadata strings are committed too)."""
        self._loop.run(self._async.send_offsets_to_transaction, commit_offsets(offsets), group_metadata)

    def commit_transaction(self) -> None:
        self._loop.run(self._async.commit_transaction)

    def abort_transaction(self) -> None:
        self._loop.run(self._async.abort_transaction)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """``with producer.transaction():`` — begin; commit on normal exit, abort when the block
        raises (the exception propagates); a commit that fails is aborted, then raised."""
        self.begin_transaction()
        try:
            yield
        except BaseException:
            self._loop.run(self._async._end_block, True)
            raise
        self._loop.run(self._async._end_block, False)


class Consumer(_Facade[AsyncConsumer]):
    """Blocking consumer; same options as ``AsyncConsumer``. Iterate it for records."""

    def __init__(self, *topics: str, bootstrap_servers: str | list[str] = "127.0.0.1:9092",
                 **options: Any) -> None:
        self._async = AsyncConsumer(*topics, bootstrap_servers=bootstrap_servers, **options)
        self._loop = _LoopThread(self._async, "rafka-consumer")
        self._buf: list[ConsumerRecord] = []
        self._pos = 0

    def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        return self._loop.run(self._async.poll, timeout_ms, max_records)

    def poll_batch(self, timeout_ms: float = 0, max_records: int | None = None) -> dict[TopicPartition, ColumnBatch]:
        """Columnar ``poll`` (``AsyncConsumer.poll_batch``): a ``ColumnBatch`` per partition."""
        return self._loop.run(self._async.poll_batch, timeout_ms, max_records)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records one by one, fetched in chunks (one thread hop per chunk); stops after
        ``consumer_timeout_ms`` without records (never, by default). Breaking out and iterating
        again resumes where it stopped."""
        while True:
            buf = self._buf
            pos = self._pos
            while pos < len(buf):
                rec = buf[pos]
                pos += 1
                self._pos = pos
                yield rec
            self._buf = self._loop.run(_next_chunk, self._async)
            self._pos = 0
            if not self._buf:
                return

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:
            self._async.exit_error = True  # the group commits only what earlier polls returned
        self.close()

    def close(self) -> None:
        """Records the iterator took but did not yield go back first, so that a group's
        commit on close covers exactly the records the application was given."""
        if not self._loop._closed:
            try:
                self._drop_chunk()
            except IllegalStateError:
                pass
        self._loop.close()

    def _drop_chunk(self) -> None:
        """Records taken by the iterator but not yet yielded go back (seek/pause semantics)."""
        rest = self._buf[self._pos:]
        self._buf, self._pos = [], 0
        if rest:
            self._loop.run_sync(_rewind, self._async, rest)

    def subscribe(self, topics: Iterable[str]) -> None:
        self._drop_chunk()
        self._loop.run(self._async.subscribe, list(topics))

    def subscription(self) -> set[str]:
        return self._loop.run_sync(self._async.subscription)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._drop_chunk()
        self._loop.run_sync(self._async.assign, list(partitions))

    def assignment(self) -> set[TopicPartition]:
        return self._loop.run_sync(self._async.assignment)

    def unsubscribe(self) -> None:
        self._drop_chunk()
        self._loop.run_sync(self._async.unsubscribe)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._drop_chunk()
        self._loop.run_sync(self._async.seek, partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._drop_chunk()
        self._loop.run(self._async.seek_to_beginning, *partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._drop_chunk()
        self._loop.run(self._async.seek_to_end, *partitions)

    def position(self, partition: TopicPartition) -> int:
        self._drop_chunk()
        return self._loop.run(self._async.position, partition)

    def highwater(self, partition: TopicPartition) -> int | None:
        return self._loop.run_sync(self._async.highwater, partition)

    def statistics(self) -> dict[str, Any]:
        return self._loop.run_sync(self._async.statistics)

    def current_lag(self, partition: TopicPartition) -> int | None:
        return self._loop.run_sync(self._async.current_lag, partition)

    def pause(self, *partitions: TopicPartition) -> None:
        self._drop_chunk()
        self._loop.run_sync(self._async.pause, *partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._loop.run_sync(self._async.resume, *partitions)

    def paused(self) -> set[TopicPartition]:
        return self._loop.run_sync(self._async.paused)

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._loop.run(self._async.offsets_for_times, dict(timestamps))

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._loop.run(self._async.beginning_offsets, list(partitions))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._loop.run(self._async.end_offsets, list(partitions))

    def partitions_for_topic(self, topic: str) -> set[int]:
        return self._loop.run(self._async.partitions_for_topic, topic)

    def topics(self) -> set[str]:
        return self._loop.run(self._async.topics)

    def commit(self, offsets: CommitOffsets | None = None) -> None:
        """Commit ``offsets`` (ints or ``OffsetAndMetadata``); by default, the offset after the
        last record this consumer returned (yielded by iteration, or returned by ``poll``) in
        each partition."""
        if offsets is None:
            offsets = self._loop.run_sync(self._async.consumed_positions, self._buf[self._pos:])
        self._loop.run(self._async.commit, commit_offsets(offsets))

    def committed(self, partition: TopicPartition, metadata: bool = False) -> int | OffsetAndMetadata | None:
        """The group's committed offset (``metadata=True``: an ``OffsetAndMetadata``)."""
        return self._loop.run(self._async.committed, partition, metadata)

    def group_metadata(self) -> GroupMetadata:
        """For ``Producer.send_offsets_to_transaction`` (see ``AsyncConsumer.group_metadata``)."""
        return self._loop.run_sync(self._async.group_metadata)


class Admin(_Facade[AsyncAdmin]):
    """Blocking admin client; same methods as ``AsyncAdmin``."""

    def __init__(self, bootstrap_servers: str | list[str] = "127.0.0.1:9092", **options: Any) -> None:
        self._async = AsyncAdmin(bootstrap_servers, **options)
        self._loop = _LoopThread(self._async, "rafka-admin")

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     config: Mapping[str, str] | None = None, *, validate_only: bool = False,
                     exist_ok: bool = False) -> bool:
        """True if created; with ``exist_ok`` an existing topic is no error (False)."""
        return self._loop.run(_kw(self._async.create_topic, validate_only=validate_only, exist_ok=exist_ok),
                              name, partitions, replication_factor, config)

    def create_topics(self, topics: Iterable[NewTopic | tuple[Any, ...]], *, validate_only: bool = False,
                      raise_on_error: bool = True) -> dict[str, RafkaError | None]:
        return self._loop.run(_kw(self._async.create_topics, validate_only=validate_only,
                                  raise_on_error=raise_on_error), list(topics))

    def delete_topic(self, name: str) -> None:
        self._loop.run(self._async.delete_topic, name)

    def delete_topics(self, names: Iterable[str], *, raise_on_error: bool = True) -> dict[str, RafkaError | None]:
        return self._loop.run(_kw(self._async.delete_topics, raise_on_error=raise_on_error), list(names))

    def create_partitions(self, topic: str, total_count: int) -> None:
        self._loop.run(self._async.create_partitions, topic, total_count)

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        return self._loop.run(_kw(self._async.list_topics, include_internal=include_internal))

    def describe_topic(self, name: str) -> TopicDescription:
        return self._loop.run(self._async.describe_topic, name)

    def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        return self._loop.run(self._async.describe_topics, None if names is None else list(names))

    def describe_configs(self, topic: str) -> dict[str, Any]:
        return self._loop.run(self._async.describe_configs, topic)

    def alter_configs(self, topic: str, configs: Mapping[str, str | None]) -> None:
        self._loop.run(self._async.alter_configs, topic, dict(configs))

    def describe_cluster(self) -> ClusterDescription:
        return self._loop.run(self._async.describe_cluster)

    def describe_quorum(self) -> dict[str, Any]:
        return self._loop.run(self._async.describe_quorum)

    def add_raft_voter(self, voter_id: int, address: str) -> list[dict[str, Any]]:
        return self._loop.run(self._async.add_raft_voter, voter_id, address)

    def remove_raft_voter(self, voter_id: int) -> list[dict[str, Any]]:
        return self._loop.run(self._async.remove_raft_voter, voter_id)

    def list_offsets(self, timestamps: Mapping[TopicPartition, int], *,
                     isolation_level: int = 0) -> dict[TopicPartition, tuple[int, int]]:
        return self._loop.run(_kw(self._async.list_offsets, isolation_level=isolation_level), dict(timestamps))

    def delete_records(self, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return self._loop.run(self._async.delete_records, dict(before))

    # consumer groups (client.aio.conveniences.GroupAdminApi)

    def list_consumer_groups(self) -> list[ConsumerGroupListing]:
        return self._loop.run(self._async.list_consumer_groups)

    def describe_consumer_groups(self, group_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        return self._loop.run(self._async.describe_consumer_groups, list(group_ids))

    def list_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                                    ) -> dict[TopicPartition, int]:
        return self._loop.run(self._async.list_consumer_group_offsets, group_id,
                              None if partitions is None else list(partitions))

    def delete_consumer_groups(self, group_ids: Iterable[str], *,
                               raise_on_error: bool = True) -> dict[str, RafkaError | None]:
        return self._loop.run(_kw(self._async.delete_consumer_groups, raise_on_error=raise_on_error),
                              list(group_ids))

    def list_transactions(self, states: Iterable[str] | None = None) -> list[TransactionListing]:
        return self._loop.run(self._async.list_transactions, None if states is None else list(states))

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        return self._loop.run(self._async.describe_transactions, list(transactional_ids))

    def describe_producers(self, topic: str, partition: int) -> list[ProducerState]:
        return self._loop.run(self._async.describe_producers, topic, partition)

    def abort_transaction(self, topic: str, partition: int, producer_id: int,
                          producer_epoch: int | None = None) -> ProducerState:
        return self._loop.run(self._async.abort_transaction, topic, partition, producer_id, producer_epoch)

    def alter_partition_reassignments(self, reassignments: Mapping[Any, Sequence[int] | None], *,
                                      throttle_bytes_per_s: int = 0) -> None:
        self._loop.run(functools.partial(self._async.alter_partition_reassignments, dict(reassignments),
                                         throttle_bytes_per_s=throttle_bytes_per_s))

    def list_partition_reassignments(self, partitions: Iterable[Any] | None = None
                                     ) -> dict[TopicPartition, PartitionReassignment]:
        return self._loop.run(self._async.list_partition_reassignments,
                              None if partitions is None else list(partitions))

    def decommission_broker(self, broker_id: int, *, throttle_bytes_per_s: int = 0,
                            cancel: bool = False) -> dict[TopicPartition, tuple[int, ...]]:
        return self._loop.run(functools.partial(self._async.decommission_broker, broker_id,
                                                throttle_bytes_per_s=throttle_bytes_per_s, cancel=cancel))

    def unregister_broker(self, broker_id: int) -> None:
        self._loop.run(self._async.unregister_broker, broker_id)


# ---------------------------------------------------------------------- helpers (loop side)


async def _with_timeout(fn: Callable[[], Awaitable[T]], timeout: float) -> T:
    from rafka.client.errors import KafkaTimeoutError

    with trio.move_on_after(timeout):
        return await fn()
    raise KafkaTimeoutError(f"not done within {timeout} s")


def _kw(fn: Callable[..., Awaitable[T]], **kw: Any) -> Callable[..., Awaitable[T]]:
    async def call(*args: Any) -> T:
        return await fn(*args, **kw)

    return call


async def _next_chunk(consumer: AsyncConsumer) -> list[ConsumerRecord]:
    """Records for the sync iterator: waits like ``__anext__`` (consumer_timeout_ms)."""
    out: list[ConsumerRecord] = []
    try:
        out.append(await consumer.__anext__())
    except StopAsyncIteration:
        return out
    out.extend(consumer._iter_buf)
    consumer._iter_buf.clear()
    return out


def _rewind(consumer: AsyncConsumer, records: list[ConsumerRecord]) -> None:
    firsts: dict[TopicPartition, int] = {}
    for r in records:
        firsts.setdefault(TopicPartition(r.topic, r.partition), r.offset)
    for tp, off in firsts.items():
        if tp in consumer._states:
            consumer.seek(tp, off)
