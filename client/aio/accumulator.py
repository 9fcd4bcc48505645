"""Record accumulator and per-partition send state of the producer (no I/O).

Theory of operation
-------------------
``RecordAccumulator.append`` is the whole per-record cost of ``send``: under one lock it picks
the open batch of the partition (creating it if needed), appends the record in its final wire
form — ``[offset_delta, timestamp_delta, key, value, headers]``, the items of the batch's
msgpack array (``docs/internals.md`` §1), deltas against the batch's first record — and
charges an estimated size to ``buffer_memory``. It is thread safe, so the sync facade appends
from the user's thread without crossing into the event loop (``AsyncProducer.send_threadsafe``,
through ``client/aio/enqueue.py``; ``client/_sendpath.c`` does the common case — the
partition's batch is open and has room — in C, a mirror of this method). A batch *closes* when its estimated size reaches ``batch_size``; the
sender *drains* closed batches and open ones older than ``linger_ms``, give or take half a
millisecond (``LINGER_TIMER_SLACK_S``), or all of them while flushing, and builds their bytes
once (``log.batch.build_batch_rows``).

Packed records (with the C codec): ``ProducerBatch.add`` packs each record as it comes,
msgpack bytes appended to the batch's ``packed`` bytearray (``_codec.pack_record``; the C
``send`` writes the same bytes itself), counts it (``npacked``) and keeps the greatest timestamp
delta (``max_dt``). No object per record stays behind, so closing a batch is framing only:
``build_batch_rows`` copies the packed bytes behind the array header — no row tuple to build in
the caller, and none to scan for the max timestamp, pack and free in the sender's thread
(measured: ~0.48 → ~0.32 µs of the I/O thread's CPU per ``send``, docs/performance.md). A
record outside the packer's subset (a float, a ``bytearray``), a ``send`` after ``send_batch``
segments, a split or anything reading ``records`` turns the batch into *rows mode* for good:
``records`` unpacks the packed bytes into row tuples (``log.batch.packed_rows``) and later
records are appended as rows. Without the codec every batch is in rows mode: one tuple per
record, packed at drain time with one ``Packer.pack``. Row tuples, not lists: tuples of bytes
and ints drop out of the cyclic GC's view after one collection, lists never do. Memory is
released when the batch's fate is settled; ``append`` refuses (returns ``None``) while the
buffer is full and the producer waits on ``wait_for_memory*`` up to ``max_block_ms``.

GC: ``append_many`` (``send_batch``) makes one row tuple per record, thousands per call, all
alive until their batch is sent; the cyclic GC's allocation-triggered collections would scan
them again and again as they age through the generations (measured: ~145 → ~60 ns per record
for 10,000-record calls). With the C codec (``rafka.log.speedups``) there are no such tuples:
``append_many`` queues a *segment* per run — ``(first index, timestamp delta, keys, values,
headers, a, k)``, slices of the call's own lists (``log.batch.segment_rows``) — after the
batch's rows, and ``ProducerBatch.encode`` packs rows and segments in one C call
(``_codec.pack_batch``); reading ``ProducerBatch.records`` turns segments into rows (a split,
a later ``send`` into the same open batch). Without the extension the rows are built and the
collector is paused for the call (bounded: one call's rows) and restored right after, unless
the application had it off — as the consumer's fetch does (``client/aio/fetch.py``).

Keyless records with no explicit partition use the sticky partitioner: ``partition = -1`` makes
the accumulator reuse the topic's sticky partition until that partition's batch closes or is
drained, then pick a new random one (KIP-480).

``PartitionState`` orders the sends of one partition: FIFO ``pending`` batches, the sorted
``inflight`` list (at most ``max_in_flight``), and ``retry`` — batches sent before that must go
again. With idempotence a batch gets its base sequence the first time it is sent and keeps it
on every retry, so the broker can drop duplicates; while retries are outstanding the partition
sends one batch at a time, lowest sequence first, so sequences reach the broker in order.

Batches the broker refused before appending anything (MESSAGE_TOO_LARGE and the other
``_NOT_APPENDED`` answers of the producer): their sequences were not consumed.
``RecordAccumulator.split`` cuts a too-large batch of several records into smaller ones, in
record order, that take over the original's sequence range (base sequence, base + n1, …) and
its creation time and attempt count; the producer queues them in ``retry`` ahead of every
later batch of the partition (their sequences are lower). The original's memory is now
accounted to the parts, its ``BatchResult`` maps each record to its part (``client/aio/
futures.py``). A batch that fails for good after such an answer gives its range back
(``PartitionState.release_sequences``): every later batch that already has a sequence moves
down by its record count and rebuilds its bytes — none of them can have been appended, since
the broker accepts only the next sequence — so the partition carries on without a gap.
"""

from __future__ import annotations

import gc
import random
import threading
import time
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import trio
from rafka.client.aio.futures import BatchResult, FutureRecordMetadata
from rafka.log.batch import (
    PACKED_ROOM,
    Segment,
    build_batch_rows,
    frame_packed,
    packed_rows,
    segment_rows,
)
from rafka.log.speedups import Unsupported
from rafka.log.speedups import codec as _c

__all__ = ["ProducerBatch", "RecordAccumulator", "PartitionState", "RowGroup", "record_size", "SEQ_MASK",
           "LINGER_TIMER_SLACK_S"]

SEQ_MASK = 0x7FFFFFFF
# (offset_delta, timestamp_delta, key, value, headers): one record as the batch's msgpack holds it
Row = tuple[int, int, bytes | None, bytes | None, Any]
_NO_DT = -(2**63)  # max_dt of a batch with no packed record
_FRAME_KW = frozenset({"producer_id", "producer_epoch", "base_sequence", "transactional"})
_new_future = object.__new__  # a FutureRecordMetadata without an __init__ frame (futures.py)


def record_size(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]] | None) -> int:
    """Estimated encoded size of one record (msgpack overhead included, roughly)."""
    n = 12
    if key is not None:
        n += len(key)
    if value is not None:
        n += len(value)
    if headers:
        for hk, hv in headers:
            n += len(hk) + len(hv) + 4
    return n


class ProducerBatch:
    __slots__ = ("topic", "partition", "_rows", "segs", "size", "created", "result",
                 "base_sequence", "payload", "attempts", "retry_at", "producer_epoch",
                 "after_earlier", "ts0", "packed", "packed_len", "npacked", "max_dt")

    def __init__(self, topic: str, partition: int, created: float, loop_thread: int,
                 ts0: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self._rows: list[Row] = []  # wire rows, see the module docstring
        # send_batch's records after the rows, as column slices (``log.batch.segment_rows``);
        # only with the C codec, which packs them without a tuple each. None: no segment.
        self.segs: list[Segment] | None = None
        self.ts0 = ts0  # first record's timestamp: the batch's first_timestamp
        self.size = 0
        self.created = created
        self.result = BatchResult(topic, partition, loop_thread)
        self.base_sequence = -1
        self.payload: bytes | memoryview | None = None
        self.attempts = 0
        self.retry_at = 0.0
        self.producer_epoch = -1
        self.after_earlier = False  # sent while an earlier batch of its partition was in flight
        # With the C codec, single records (``add``; ``client/_sendpath.c``) are packed as they
        # come: ``packed[PACKED_ROOM:packed_len]`` holds ``npacked`` wire records (the room
        # before them is for the batch's headers, the bytearray's tail is room that doubles),
        # ``max_dt`` their greatest timestamp delta; ``_rows`` stays empty.
        # None: rows mode (no codec, a record outside its subset, or ``records`` was read).
        self.packed: bytearray | None = bytearray(PACKED_ROOM) if _c is not None else None
        self.packed_len = PACKED_ROOM
        self.npacked = 0
        self.max_dt = _NO_DT

    def add(self, ts_delta: int, key: bytes | None, value: bytes | None, headers: Any) -> int:
        """Append one record after the others (accumulator lock held); returns its index."""
        packed = self.packed
        if packed is not None and self.segs is None:
            index = self.npacked
            try:
                self.packed_len = _c.pack_record(packed, self.packed_len, index, ts_delta, key,
                                                 value, headers)
            except (Unsupported, OverflowError):  # outside the packed subset: rows from now on
                pass
            else:
                self.npacked = index + 1
                if ts_delta > self.max_dt:
                    self.max_dt = ts_delta
                return index
        rows = self.records
        index = len(rows)
        rows.append((index, ts_delta, key, value, headers))
        return index

    @property
    def records(self) -> list[Row]:
        """Every record as a wire row (packed records and segments are turned into rows on
        first access, and the batch stays in rows mode)."""
        if self.packed is not None:
            if self.npacked:
                self._rows[0:0] = packed_rows(
                    memoryview(self.packed)[PACKED_ROOM:self.packed_len], self.npacked)
            self.packed = None
            self.packed_len = self.npacked = 0
        if self.segs is not None:
            for seg in self.segs:
                self._rows.extend(segment_rows(*seg))
            self.segs = None
        return self._rows

    @records.setter
    def records(self, rows: list[Row]) -> None:
        self._rows = rows
        self.segs = None
        self.packed = None
        self.packed_len = self.npacked = 0

    @property
    def record_count(self) -> int:
        n = len(self._rows) + self.npacked
        if self.segs is None:
            return n
        return n + sum(seg[6] - seg[5] for seg in self.segs)

    def encode(self, *, compression: str = "none", **kw: Any) -> bytes | memoryview:
        """``log.batch.build_batch_rows`` of this batch's records (``kw``: its options). Only
        packed records, uncompressed: framed in place (``log.batch.frame_packed``), a view of
        the batch's own buffer, valid until the next ``encode``."""
        if not self.npacked:
            return build_batch_rows(self._rows, self.ts0, segments=self.segs,
                                    compression=compression, **kw)
        assert self.packed is not None
        if compression == "none" and self.segs is None and _FRAME_KW.issuperset(kw):
            return frame_packed(self.packed, self.packed_len, self.npacked, self.ts0,
                                self.max_dt, **kw)
        with memoryview(self.packed) as view:
            return build_batch_rows(self._rows, self.ts0, segments=self.segs,
                                    compression=compression,
                                    packed=view[PACKED_ROOM:self.packed_len],
                                    packed_count=self.npacked, packed_max_dt=self.max_dt, **kw)

    def __repr__(self) -> str:
        return (f"<ProducerBatch {self.topic}-{self.partition} n={self.record_count} "
                f"seq={self.base_sequence} attempts={self.attempts}>")


class RowGroup:
    """Records of one ``send_batch`` call bound for one partition (``-1``: sticky), for
    ``RecordAccumulator.append_many``: aligned ``keys`` / ``values`` / ``headers`` (``None``
    = all ``None`` / all without headers) and ``cum``, the prefix sums of their estimated sizes
    (``cum[0] == 0``; a list, or an int64 memoryview from the C codec — both bisect alike).
    ``done`` counts the records appended so far; ``segments`` says where they went: ``(batch
    result, index of the first in that batch, first record of the group, count)``."""

    __slots__ = ("partition", "keys", "values", "headers", "cum", "done", "segments", "index")

    def __init__(self, partition: int, keys: list[Any] | None, values: list[Any],
                 headers: list[Any] | None, cum: Sequence[int],
                 index: Sequence[int] | None = None) -> None:
        self.partition = partition
        self.keys = keys
        self.values = values
        self.headers = headers
        self.cum = cum
        self.done = 0
        self.segments: list[tuple[BatchResult, int, int, int]] = []
        self.index = index  # the records' positions in the caller's input (None: 0, 1, 2…)


# trio's timers wake on whole milliseconds (``epoll_wait`` takes its timeout in ms, rounded
# up), so a sender that slept until a batch's linger deadline woke 0-1 ms after it: 0.72 ms at
# the median, 1.38 ms at p99 here (e2e bench, 10k rec/s, linger 5 ms), and the first record of
# every batch, the one with the longest wait, carried all of it. A batch counts as due from
# half a millisecond before its deadline and the sender sleeps until then, so the wake-up is
# centred on the deadline: a batch lingers ``linger_ms`` ± 0.5 ms, not ``linger_ms`` + 0-1 ms.
# (Kafka's accumulator, counting in whole milliseconds, lingers between ``linger.ms`` - 1 and
# ``linger.ms``.)
LINGER_TIMER_SLACK_S = 0.0005


class RecordAccumulator:
    def __init__(self, *, batch_size: int, buffer_memory: int, linger_ms: float,
                 wakeup: Callable[[], None], loop_thread: int) -> None:
        self.batch_size = batch_size
        self.buffer_memory = buffer_memory
        self.linger_s = linger_ms / 1000
        self._wakeup = wakeup
        self._loop_thread = loop_thread
        self._lock = threading.Lock()
        self._mem_cond = threading.Condition(self._lock)
        self._sync_waiters = 0
        self._mem_event: trio.Event | None = None
        # open batches by topic, then partition (no tuple key to build per record)
        self._open: dict[str, dict[int, ProducerBatch]] = {}
        self._closed: deque[ProducerBatch] = deque()
        self._sticky: dict[str, int] = {}
        self.used = 0
        self.incomplete: set[BatchResult] = set()
        # True while the sender sleeps and wants a wakeup: at most one wakeup per sleep, since
        # each costs a thread hop (and a GIL hand-off) when the caller is the sync facade.
        self.wake_armed = False

    # ------------------------------------------------------------------ hot path

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               headers: list[tuple[str, bytes]], timestamp_ms: int, size: int,
               num_partitions: int) -> FutureRecordMetadata | None:
        """Append one record; ``partition=-1`` = sticky. ``None`` when the buffer is full.
        (Every single-record send ends here, or in its C mirror: ``client/_sendpath.c``.)"""
        with self._lock:
            if self.used + size > self.buffer_memory and self.used:
                return None
            by_part = self._open.get(topic)
            if by_part is None:
                by_part = self._open[topic] = {}
            p = partition if partition >= 0 else self._sticky.get(topic, -1)
            batch = by_part.get(p) if p < num_partitions else None
            wake = batch is None
            if batch is None:  # none open, or a sticky pick to make
                batch = self._batch_for(topic, by_part, partition, num_partitions, timestamp_ms)
            index = batch.add(timestamp_ms - batch.ts0, key, value, headers)
            batch.size += size
            self.used += size
            if batch.size >= self.batch_size:
                self._close(topic, by_part, batch.partition, batch)
                wake = True
        if wake and self.wake_armed:
            self.wake_armed = False
            self._wakeup()
        fut = _new_future(FutureRecordMetadata)  # no __init__ frame (see futures.py)
        fut._batch = batch.result
        fut._index = index
        fut._ts = timestamp_ms
        return fut

    def append_many(self, topic: str, groups: list[RowGroup], timestamp_ms: int,
                    num_partitions: int, max_batch_bytes: int) -> bool:
        """Append whole groups of records (``send_batch``) under one lock acquisition: per
        partition, runs of rows go into its open batch with one ``list.extend``, the run's
        length found by bisecting the group's size prefix sums — a batch closes when it reaches
        ``batch_size`` (as ``append``), or before a record that would take it past
        ``max_batch_bytes``. Sticky groups (``partition -1``) fill the topic's sticky partition
        and pick another each time its batch closes. Returns ``False`` when ``buffer_memory``
        is full before the end (each group's ``done`` says how far it got: wait for memory and
        call again), ``True`` when every record is in."""
        gc_was_on = _c is None and gc.isenabled()
        if gc_was_on:  # one row tuple per record: see the module docstring (GC)
            gc.disable()
        try:
            return self._append_many(topic, groups, timestamp_ms, num_partitions, max_batch_bytes)
        finally:
            if gc_was_on:
                gc.enable()

    def _append_many(self, topic: str, groups: list[RowGroup], timestamp_ms: int,
                     num_partitions: int, max_batch_bytes: int) -> bool:
        wake = False
        complete = True
        with self._lock:
            open_batches = self._open.get(topic)
            if open_batches is None:
                open_batches = self._open[topic] = {}
            for g in groups:
                cum = g.cum
                total = len(cum) - 1
                while g.done < total:
                    a = g.done
                    base = cum[a]
                    # records a..k-1 fit in memory when used + cum[k] - base <= buffer_memory
                    mem_k = bisect_right(cum, self.buffer_memory - self.used + base, a) - 1
                    if mem_k <= a:
                        if self.used:
                            complete = False
                            break
                        mem_k = a + 1  # an empty buffer takes any record (as ``append``)
                    batch = self._batch_for(topic, open_batches, g.partition, num_partitions,
                                            timestamp_ms)
                    p = batch.partition
                    if not batch.size:  # new
                        wake = True
                    max_k = bisect_right(cum, base + max_batch_bytes - batch.size, a) - 1
                    if max_k <= a:
                        if batch.record_count:  # the next record would make it too big: close it
                            self._close(topic, open_batches, p, batch)
                            wake = True
                            continue
                        max_k = a + 1
                    # the record that reaches batch_size is the batch's last (as ``append``)
                    full_k = bisect_left(cum, base + self.batch_size - batch.size, a + 1)
                    k = min(mem_k, max_k, full_k, total)
                    i0 = batch.record_count
                    n = k - a
                    seg = (i0, timestamp_ms - batch.ts0, g.keys, g.values, g.headers, a, k)
                    if _c is not None:  # packed from the lists at build time (module docstring)
                        if batch.segs is None:
                            batch.segs = [seg]
                        else:
                            batch.segs.append(seg)
                    else:
                        batch._rows.extend(segment_rows(*seg))
                    added = cum[k] - base
                    batch.size += added
                    self.used += added
                    g.segments.append((batch.result, i0, a, n))
                    g.done = k
                    if batch.size >= self.batch_size:
                        self._close(topic, open_batches, p, batch)
                        wake = True
                if not complete:
                    break
        if wake and self.wake_armed:
            self.wake_armed = False
            self._wakeup()
        return complete

    def _batch_for(self, topic: str, open_batches: dict[int, ProducerBatch], partition: int,
                   num_partitions: int, timestamp_ms: int) -> ProducerBatch:
        """The open batch of ``partition`` — ``-1``: the topic's sticky partition, picked at
        random when it has none (or it is out of range) — made when there is none (lock held)."""
        if partition < 0:
            partition = self._sticky.get(topic, -1)
            if partition < 0 or partition >= num_partitions:
                partition = self._sticky[topic] = random.randrange(num_partitions)
        batch = open_batches.get(partition)
        if batch is None:
            batch = open_batches[partition] = ProducerBatch(topic, partition, time.monotonic(),
                                                            self._loop_thread, timestamp_ms)
            self.incomplete.add(batch.result)
        return batch

    def _close(self, topic: str, open_batches: dict[int, ProducerBatch], partition: int,
               batch: ProducerBatch) -> None:
        """Move an open batch to the closed queue (lock held)."""
        del open_batches[partition]
        self._closed.append(batch)
        if self._sticky.get(topic) == partition:
            del self._sticky[topic]

    # ------------------------------------------------------------------ sender side

    def drain(self, now: float, *, force: bool = False,
              hold: Callable[[str, int], bool] | None = None) -> list[ProducerBatch]:
        """Take every closed batch, and open ones that lingered long enough (all if ``force``)
        unless ``hold(topic, partition)``: that partition could not send it now (its leader is
        at its in-flight limit, or earlier batches are queued), so its batch stays open and keeps
        filling — the backlog then travels as a few big batches, not as many small ones."""
        with self._lock:
            out = list(self._closed)
            self._closed.clear()
            cutoff = now - self.linger_s + LINGER_TIMER_SLACK_S
            for topic, by_part in self._open.items():
                for p, batch in list(by_part.items()):
                    if (force or batch.created <= cutoff) and (hold is None or not hold(topic, p)):
                        del by_part[p]
                        out.append(batch)
                        if self._sticky.get(batch.topic) == p:
                            del self._sticky[batch.topic]
            return out

    def next_deadline(self, hold: Callable[[str, int], bool] | None = None) -> float | None:
        """When the oldest open batch not held (see ``drain``) has lingered enough (``None``:
        nothing to wait for; a held batch goes when an answer frees its partition, which wakes
        the sender)."""
        with self._lock:
            if self._closed:
                return 0.0
            first = min((b.created for topic, by_part in self._open.items()
                         for p, b in by_part.items() if hold is None or not hold(topic, p)),
                        default=None)
            return None if first is None else first + self.linger_s - LINGER_TIMER_SLACK_S

    def split(self, batch: ProducerBatch, starts: list[int]) -> list[ProducerBatch]:
        """Cut ``batch`` (not queued anywhere any more) at record indexes ``starts`` (the first
        is 0): one new batch per part, in order, with the original's creation time, attempt
        count, producer epoch and, with idempotence, consecutive base sequences from its own.
        The memory of the original passes to the parts; its result maps each record to its part.
        """
        rows = batch.records
        ends = [*starts[1:], len(rows)]
        parts: list[ProducerBatch] = []
        left = batch.size
        for k, (a, z) in enumerate(zip(starts, ends, strict=True)):
            first = rows[a]
            part = ProducerBatch(batch.topic, batch.partition, batch.created, self._loop_thread,
                                 batch.ts0 + first[1])
            dt = first[1]
            part.records = [(i, r[1] - dt, r[2], r[3], r[4]) for i, r in enumerate(rows[a:z])]
            if k == len(starts) - 1:
                part.size = left  # estimates: the parts add up to exactly what was charged
            else:
                part.size = min(left, sum(record_size(r[2], r[3], r[4]) for r in part.records))
            left -= part.size
            part.attempts = batch.attempts
            part.producer_epoch = batch.producer_epoch
            if batch.base_sequence >= 0:
                part.base_sequence = (batch.base_sequence + a) & SEQ_MASK
            parts.append(part)
        batch.result.split_into([(a, p.result) for a, p in zip(starts, parts, strict=True)])
        with self._lock:
            self.incomplete.discard(batch.result)
            self.incomplete.update(p.result for p in parts)
        batch.records = []
        batch.payload = None
        return parts

    def open_partitions(self) -> list[tuple[str, int]]:
        """``(topic, partition)`` of every batch still open (lingering)."""
        with self._lock:
            return [(t, p) for t, by_part in self._open.items() for p in by_part]

    def has_closed(self) -> bool:
        return bool(self._closed)

    def has_unsent(self) -> bool:
        with self._lock:
            return bool(self._closed) or any(self._open.values())

    def release(self, batch: ProducerBatch) -> None:
        """The batch is settled: return its memory and wake blocked senders."""
        with self._lock:
            self.used -= batch.size
            self.incomplete.discard(batch.result)
            if self._sync_waiters:
                self._mem_cond.notify_all()
        ev, self._mem_event = self._mem_event, None
        if ev is not None:
            ev.set()
        batch.records = []  # free the rows

    def wait_for_memory_sync(self, size: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._mem_cond:
            self._sync_waiters += 1
            try:
                while self.used and self.used + size > self.buffer_memory:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._mem_cond.wait(left)
                return True
            finally:
                self._sync_waiters -= 1

    async def wait_for_memory(self, size: int) -> None:
        """Loop-thread twin of ``wait_for_memory_sync``; wrap in ``move_on_after``."""
        while self.used and self.used + size > self.buffer_memory:
            if self._mem_event is None:
                self._mem_event = trio.Event()
            await self._mem_event.wait()


class PartitionState:
    """Send ordering and idempotent sequence numbers of one partition (loop thread only)."""

    __slots__ = ("next_seq", "pending", "inflight", "retry")

    def __init__(self) -> None:
        self.next_seq = 0
        self.pending: deque[ProducerBatch] = deque()
        self.inflight: list[ProducerBatch] = []
        self.retry: list[ProducerBatch] = []

    def idle(self) -> bool:
        return not (self.pending or self.inflight or self.retry)

    def next_to_send(self, now: float, max_in_flight: int) -> ProducerBatch | None:
        """The batch this partition may send now, removed from its queue (or ``None``)."""
        if self.retry:
            if self.inflight or self.retry[0].retry_at > now:
                return None
            return self.retry.pop(0)
        if self.pending and len(self.inflight) < max_in_flight:
            return self.pending.popleft()
        return None

    def assign_sequence(self, batch: ProducerBatch) -> None:
        if batch.base_sequence < 0:
            batch.base_sequence = self.next_seq
            self.next_seq = (self.next_seq + batch.record_count) & SEQ_MASK

    def sent(self, batch: ProducerBatch) -> None:
        self.inflight.append(batch)
        self.inflight.sort(key=_seq_key)

    def done(self, batch: ProducerBatch) -> None:
        if batch in self.inflight:
            self.inflight.remove(batch)

    def requeue(self, batch: ProducerBatch, retry_at: float) -> None:
        self.done(batch)
        batch.retry_at = retry_at
        self.retry.append(batch)
        self.retry.sort(key=_seq_key)

    def requeue_split(self, parts: list[ProducerBatch], retry_at: float) -> None:
        """Queue the parts of a split batch ahead of every later batch of the partition: by
        sequence with idempotence (theirs are the lowest outstanding), else at the front."""
        for b in parts:
            b.retry_at = retry_at
        if parts and parts[0].base_sequence >= 0:
            self.retry.extend(parts)
            self.retry.sort(key=_seq_key)
        else:
            self.retry[0:0] = parts

    def release_sequences(self, batch: ProducerBatch) -> None:
        """``batch`` was refused without being appended and fails for good: give its sequences
        back. Later batches that already have sequences (in flight or to retry) cannot have
        been appended either — the broker takes only the next sequence — so they move down by
        its record count and rebuild their bytes (an in-flight one comes back
        OUT_OF_ORDER_SEQUENCE_NUMBER and is retried with the new ones)."""
        seq = batch.base_sequence
        if seq < 0:
            return
        n = batch.record_count
        for b in (*self.inflight, *self.retry):
            if b is not batch and b.base_sequence >= 0 and (b.base_sequence - seq) & SEQ_MASK < (
                    self.next_seq - seq) & SEQ_MASK:
                b.base_sequence = (b.base_sequence - n) & SEQ_MASK
                b.payload = None
        self.next_seq = (self.next_seq - n) & SEQ_MASK

    def has_earlier(self, batch: ProducerBatch) -> bool:
        """Is a lower-sequence batch of this partition still unacknowledged?"""
        seq = batch.base_sequence
        return any(b.base_sequence < seq for b in self.inflight if b is not batch) or any(
            b.base_sequence < seq for b in self.retry
        )

    def next_ready_time(self) -> float | None:
        if self.retry and not self.inflight:
            return self.retry[0].retry_at
        return None


def _seq_key(b: ProducerBatch) -> int:
    return b.base_sequence
