"""The one way records enter the producer: ``Enqueue`` (and the ``Gate`` every send checks).

Theory of operation
-------------------
Every send variant of ``AsyncProducer`` is a thin front of this module. A record goes in
through two steps, the same for all of them:

1. ``stage`` (no I/O, no lock): the estimated size (``record_size``) checked against
   ``max_request_size`` / ``buffer_memory``, the timestamp, the partition (explicit; the
   partitioner on the key; ``-1`` = the topic's sticky partition, chosen by the accumulator);
2. ``RecordAccumulator.append`` (under its lock): into the partition's open batch; ``None``
   when ``buffer_memory`` is full.

Before step 1 the front checks the ``Gate`` (``check_send``: open, not fenced, a
transactional producer inside a transaction) and finds the topic's partition count in the
cached metadata. The fronts differ only in what they do when something is missing:

==========================  ===========================  ===============================
front                       metadata not cached          buffer full
==========================  ===========================  ===============================
``send`` (loop, async)      awaits it (``max_block_ms``)  awaits room (``max_block_ms``)
``send_nowait`` (loop)      ``KafkaTimeoutError``         ``BufferExhaustedError``
``send_threadsafe`` (any    hops into the loop once       blocks the caller's thread
thread: the sync facade)                                  (``max_block_ms``)
==========================  ===========================  ===============================

``send_batch`` / ``send_batch_threadsafe`` take whole columns the same way: ``stage_batch``
(``client/aio/batch_send.py``'s plan) then ``RecordAccumulator.append_many``, waiting for
room between appends as above.

The C fast path (``client/_sendpath.c``, bound by ``client/aio/fast_send.py``) is the
common case of steps 1-2 — gate open, topic known, the partition's batch open with room —
done in one C call; whatever it does not handle it passes to ``send_threadsafe`` (or, in the
loop, back to ``send``) before changing anything. It reads this object's ``acc``, ``core``,
``txn``, ``hash_cache``, ``max_record_size`` once and the ``Gate``'s ``__dict__`` on every
call, so those stay plain attributes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import trio
from rafka.client.aio._core import ClientCore
from rafka.client.aio.accumulator import RecordAccumulator, RowGroup, record_size
from rafka.client.aio.batch_send import BatchFuture, HeadersList, plan_batch
from rafka.client.aio.futures import FutureRecordMetadata
from rafka.client.aio.producer_config import ProducerConfig
from rafka.client.aio.transactions import TransactionManager
from rafka.client.errors import (
    BufferExhaustedError,
    IllegalStateError,
    KafkaTimeoutError,
    RecordTooLargeError,
)
from rafka.client.partitioner import Murmur2Partitioner, Partitioner
from rafka.wire.errors import ErrorCode, error_for

__all__ = ["NO_HEADERS", "Enqueue", "Gate", "Headers", "Staged"]

Headers = Sequence[tuple[str, bytes]] | None
NO_HEADERS: Any = ()  # shared: a record without headers allocates nothing for them
# (topic, partition, key, value, headers, timestamp_ms, size, num_partitions): the arguments
# of RecordAccumulator.append
Staged = tuple[str, int, Any, Any, Any, int, int, int]

_NOT_OPEN = "producer is not open (use `async with AsyncProducer(...)`)"


class Gate:
    """Whether the producer takes records. ``closed``: ``close()`` began; ``fatal``: the error
    every call raises once the producer is fenced or its producer id was refused;
    ``txn_sending``: a transactional producer is IN_TRANSACTION (``TransactionManager._to``
    keeps it). The C send path reads these three from ``__dict__`` on every call."""

    def __init__(self) -> None:
        self.closed = False
        self.fatal: BaseException | None = None
        self.txn_sending = False

    def check_open(self) -> None:
        if self.closed:
            raise IllegalStateError(_NOT_OPEN)
        if self.fatal is not None:
            raise self.fatal


class Enqueue:
    """Stages records and appends them to the accumulator (module docstring); one per
    producer, built in its ``__init__`` and given the accumulator by ``start``."""

    def __init__(self, config: ProducerConfig, core: ClientCore, partitioner: Partitioner,
                 txn: TransactionManager | None, gate: Gate) -> None:
        self.config = config
        self.core = core
        self.partitioner = partitioner
        # the default partitioner's key -> hash cache (send_batch's plan and the C path read it)
        self.hash_cache = partitioner._cache if type(partitioner) is Murmur2Partitioner else None
        self.txn = txn
        self.gate = gate
        self.max_record_size = config.max_record_size
        self.acc: RecordAccumulator | None = None
        self.loop_thread = 0
        self.token: trio.lowlevel.TrioToken | None = None

    def start(self, acc: RecordAccumulator, loop_thread: int, token: trio.lowlevel.TrioToken) -> None:
        self.acc = acc
        self.loop_thread = loop_thread
        self.token = token

    # ------------------------------------------------------------------ checks and step 1

    def check_open(self) -> RecordAccumulator:
        if self.acc is None:
            raise IllegalStateError(_NOT_OPEN)
        self.gate.check_open()
        return self.acc

    def check_send(self) -> RecordAccumulator:
        """``check_open``, and a transactional producer must be in a transaction."""
        acc = self.check_open()
        if self.txn is not None:
            self.txn.check_send()
        return acc

    def check_size(self, size: int) -> None:
        cfg = self.config
        if size > cfg.max_request_size:
            raise RecordTooLargeError(f"record of ~{size} bytes exceeds max_request_size={cfg.max_request_size}")
        if size > cfg.buffer_memory:
            raise RecordTooLargeError(f"record of ~{size} bytes exceeds buffer_memory={cfg.buffer_memory}")

    def choose(self, topic: str, key: bytes | None, partition: int | None, n: int) -> int:
        if partition is not None:
            if not 0 <= partition < n:
                raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"topic {topic!r} has partitions 0..{n - 1}, not {partition}")
            return partition
        return self.partitioner(key, n) if key is not None else -1

    def stage(self, topic: str, value: bytes | None, key: bytes | None, headers: Headers,
              partition: int | None, timestamp_ms: int | None, n: int) -> Staged:
        """Step 1 for one record of a topic with ``n`` partitions."""
        hdrs = list(headers) if headers else NO_HEADERS
        size = record_size(key, value, hdrs)
        if size > self.max_record_size:
            self.check_size(size)
        ts = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        if partition is None:  # choose()'s common case without its frame
            p = self.partitioner(key, n) if key is not None else -1
        else:
            p = self.choose(topic, key, partition, n)
        return topic, p, key, value, hdrs, ts, size, n

    def _num_partitions_threadsafe(self, topic: str) -> int:
        n = self.core.metadata.num_partitions(topic)
        if n is None:
            n = trio.from_thread.run(self.core.wait_for_topic, topic, self.config.max_block_ms,
                                     trio_token=self.token)
        return n

    def _full(self, block_ms: float | None = None) -> BufferExhaustedError:
        cfg = self.config
        if block_ms is None:
            return BufferExhaustedError(f"buffer_memory={cfg.buffer_memory} bytes is full")
        return BufferExhaustedError(f"buffer_memory={cfg.buffer_memory} bytes stayed full for "
                                    f"max_block_ms={block_ms:.0f}")

    # ------------------------------------------------------------------ one record: the fronts

    async def send(self, topic: str, value: bytes | None, key: bytes | None, headers: Headers,
                   partition: int | None, timestamp_ms: int | None) -> FutureRecordMetadata:
        """Loop thread; waits for metadata and buffer room (``AsyncProducer.send``)."""
        if self.txn is not None:  # a suspected fence: fenced sends raise ProducerFencedError
            await self.txn.suspicion_settled()
        acc = self.check_send()
        n = self.core.metadata.num_partitions(topic)
        if n is None:
            n = await self.core.wait_for_topic(topic, self.config.max_block_ms)
        staged = self.stage(topic, value, key, headers, partition, timestamp_ms, n)
        fut = acc.append(*staged)
        if fut is None:
            with trio.move_on_after(self.config.max_block_ms / 1000):
                while fut is None:
                    await acc.wait_for_memory(staged[6])
                    fut = acc.append(*staged)
            if fut is None:
                raise self._full(self.config.max_block_ms)
        return fut

    def send_nowait(self, topic: str, value: bytes | None, key: bytes | None, headers: Headers,
                    partition: int | None, timestamp_ms: int | None) -> FutureRecordMetadata:
        """Loop thread, never waits (``AsyncProducer.send_nowait``)."""
        acc = self.check_send()
        n = self.core.metadata.num_partitions(topic)
        if n is None:
            raise KafkaTimeoutError(f"no metadata for topic {topic!r} yet (await wait_for_topic)")
        fut = acc.append(*self.stage(topic, value, key, headers, partition, timestamp_ms, n))
        if fut is None:
            raise self._full()
        return fut

    def send_threadsafe(self, topic: str, value: bytes | None, key: bytes | None, headers: Headers,
                        partition: int | None, timestamp_ms: int | None) -> FutureRecordMetadata:
        """Any thread but the loop's; blocks it for metadata and buffer room
        (``AsyncProducer.send_threadsafe``, the C path's fallback, and without the C extension
        the sync ``Producer.send``: so the open gate and cached metadata are tested inline)."""
        acc, gate, txn = self.acc, self.gate, self.txn
        if acc is None or gate.closed or gate.fatal is not None or txn is not None:
            if txn is not None and txn.resolving:
                trio.from_thread.run(txn.suspicion_settled, trio_token=self.token)
            acc = self.check_send()
        parts = self.core.metadata.topics.get(topic)
        n = len(parts) if parts else self._num_partitions_threadsafe(topic)
        staged = self.stage(topic, value, key, headers, partition, timestamp_ms, n)
        fut = acc.append(*staged)
        if fut is not None:
            return fut
        block_ms = self.config.max_block_ms
        deadline = time.monotonic() + block_ms / 1000
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not acc.wait_for_memory_sync(staged[6], left):
                raise self._full(block_ms)
            self.check_open()
            fut = acc.append(*staged)
            if fut is not None:
                return fut

    # ------------------------------------------------------------------ whole batches

    def stage_batch(self, topic: str, values: Sequence[bytes | None],
                    keys: Sequence[bytes | None] | None, headers: HeadersList,
                    partition: int | None, timestamp_ms: int | None,
                    n: int) -> tuple[BatchFuture, list[RowGroup]]:
        """Step 1 for a whole ``send_batch`` (``batch_send.plan_batch``)."""
        return plan_batch(self, topic, values, keys, headers, partition, timestamp_ms, n)

    def _append_batch(self, acc: RecordAccumulator, topic: str, fut: BatchFuture,
                      groups: list[RowGroup], n: int) -> bool:
        return acc.append_many(topic, groups, fut._ts, n, self.config.max_request_size)

    async def send_batch(self, topic: str, values: Sequence[bytes | None],
                         keys: Sequence[bytes | None] | None, headers: HeadersList,
                         partition: int | None, timestamp_ms: int | None) -> BatchFuture:
        """Loop thread; waits for metadata and buffer room (``AsyncProducer.send_batch``)."""
        acc = self.check_send()
        n = self.core.metadata.num_partitions(topic)
        if n is None:
            n = await self.core.wait_for_topic(topic, self.config.max_block_ms)
        fut, groups = self.stage_batch(topic, values, keys, headers, partition, timestamp_ms, n)
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while not self._append_batch(acc, topic, fut, groups, n):
            with trio.move_on_after(max(0.0, deadline - time.monotonic())):
                await acc.wait_for_memory(_next_size(groups))
            if self._batch_wait_over(fut, groups, deadline):
                break
        fut._watch()
        return fut

    def send_batch_threadsafe(self, topic: str, values: Sequence[bytes | None],
                              keys: Sequence[bytes | None] | None, headers: HeadersList,
                              partition: int | None, timestamp_ms: int | None) -> BatchFuture:
        """Any thread but the loop's (``AsyncProducer.send_batch_threadsafe``)."""
        acc = self.check_send()
        n = self._num_partitions_threadsafe(topic)
        fut, groups = self.stage_batch(topic, values, keys, headers, partition, timestamp_ms, n)
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while not self._append_batch(acc, topic, fut, groups, n):
            acc.wait_for_memory_sync(_next_size(groups), max(0.0, deadline - time.monotonic()))
            if self._batch_wait_over(fut, groups, deadline):
                break
        fut._watch()
        return fut

    def _batch_wait_over(self, fut: BatchFuture, groups: list[RowGroup], deadline: float) -> bool:
        """Between two appends of one call (buffer full): is it over? Still open, and before
        the deadline: ``False`` (append the rest). After it: ``BufferExhaustedError`` if no
        record was queued; otherwise the records not queued fail in the future's results
        (the queued ones are on their way) and ``True``."""
        self.check_open()
        if time.monotonic() < deadline:
            return False
        queued = sum(g.done for g in groups)
        cfg = self.config
        err = BufferExhaustedError(
            f"buffer_memory={cfg.buffer_memory} bytes stayed full for "
            f"max_block_ms={cfg.max_block_ms:.0f} ({queued} of {fut._count} records queued)")
        if not queued:
            raise err
        fut._unqueued = err
        return True


def _next_size(groups: list[RowGroup]) -> int:
    for g in groups:
        if g.done < len(g.cum) - 1:
            return g.cum[g.done + 1] - g.cum[g.done]
    return 0
