"""The producer's whole-batch API: ``send_batch(topic, values, keys, headers, partition)``.

Theory of operation
-------------------
A caller that already holds many records hands them over in one call and gets one future
(``BatchFuture``) whose result is the sequence of their ``RecordMetadata``, in input order
(a lazy ``RecordMetadataList``: the objects are built on first access). The work
per call, not per record, is what makes it fast:

1. *plan* (``plan_batch``, caller's thread, no lock): estimated sizes as C-level ``map(len, …)`` and
   their prefix sums; every record checked against ``max_request_size`` / ``buffer_memory``
   before anything is queued (``RecordTooLargeError`` names the first offender). Records are
   partitioned as ``send`` does — the given ``partition``; else murmur2 of the key (the
   producer's partitioner and its key cache); else, for keyless records, the sticky partition
   (a call of only keyless records fills the sticky partition and moves on as its batches
   close; keyless records mixed with keyed ones share one partition chosen for the call, so
   that every partition's records stay in input order) — and grouped per partition into
   ``RowGroup``\\ s that keep their input positions;
2. *append* (``RecordAccumulator.append_many``): one lock acquisition appends every group as
   runs of final wire rows (``list.extend`` over a ``zip``), closing batches at ``batch_size``
   and before ``max_request_size``; the sender then encodes each batch once with
   ``log.batch.build_batch_rows``, assigns idempotent sequences and, for a transactional
   producer, registers the partitions with the transaction — the same path ``send``'s records
   take. When ``buffer_memory`` fills up midway the call waits for room (up to
   ``max_block_ms``) and appends the rest;
3. *settle*: the future registers with each batch result it used (``BatchResult.attach``) and
   resolves when the last one completes (loop thread) — with a ``RecordMetadataList`` when
   every batch succeeded, no per-record work: on first access (caller's thread) offsets are
   ``base_offset + index`` per run, built by one comprehension; a batch split after
   MESSAGE_TOO_LARGE is read record by record through ``FutureRecordMetadata``'s own lookup
   (that case and any failure assemble the results eagerly).

With the C codec (``rafka.log.speedups``) step 1 is one call, ``_codec.plan``: sizes, prefix
sums, murmur2 partitions (bit for bit ``client.partitioner.murmur2``) and the stable grouping,
for ``bytes``/``None`` keys and values without headers under the default partitioner; anything
else takes the Python path above. The records then wait in their batches as column segments,
packed by ``_codec.pack_batch`` (``client/aio/accumulator.py``, ``log.batch.build_batch_rows``).

Partial failure: if any record failed, the future fails with ``BatchSendError`` whose
``.results`` holds, in input order, a ``RecordMetadata`` for each record written and the
exception for each one that was not (``.errors`` maps input positions to exceptions).

``send_batch`` (async, loop thread) and ``send_batch_threadsafe`` (the sync ``Producer``'s path,
any other thread: the first use of a topic hops into the loop once for its metadata) are fronts
of the producer's one enqueue path (``client/aio/enqueue.py``: ``Enqueue.send_batch*``), which
plans with ``plan_batch`` and appends with ``append_many``; they differ only in how they wait.
A transactional producer must be inside a transaction, as for ``send``.
"""

from __future__ import annotations

import concurrent.futures as cf
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Generator, Iterator, Sequence
from itertools import accumulate
from operator import add
from typing import TYPE_CHECKING, Any

from rafka.client.aio.accumulator import RowGroup, record_size
from rafka.client.aio.futures import BatchResult, FutureRecordMetadata
from rafka.client.errors import ClientError, RecordTooLargeError
from rafka.client.types import RecordMetadata
from rafka.log.speedups import Unsupported
from rafka.log.speedups import codec as _c

if TYPE_CHECKING:
    from rafka.client.aio.enqueue import Enqueue

__all__ = ["BatchFuture", "BatchSendError", "HeadersList", "RecordMetadataList", "plan_batch"]

_new = tuple.__new__
HeadersList = Sequence[Sequence[tuple[str, bytes]] | None] | None


class BatchSendError(ClientError):
    """Some records of a ``send_batch`` were not written. ``.results`` (input order): the
    ``RecordMetadata`` of each record written, the exception of each one that failed;
    ``.errors``: input position → exception. ``.code`` is the first failure's code."""

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message, **details)
        self.results: list[RecordMetadata | BaseException] = details.get("results", [])
        self.errors: dict[int, BaseException] = {
            i: r for i, r in enumerate(self.results) if isinstance(r, BaseException)}
        first = next(iter(self.errors.values()), None)
        if first is not None and hasattr(first, "code"):
            self.code = first.code


class BatchFuture(cf.Future):  # type: ignore[type-arg]
    """The future of one ``send_batch``: a ``RecordMetadataList`` (a ``Sequence`` of
    ``RecordMetadata``, input order, built lazily), or ``BatchSendError``. A ``concurrent.futures.Future``; inside trio, ``await fut``."""

    def __init__(self, topic: str, count: int, timestamp_ms: int, groups: list[RowGroup],
                 loop_thread: int) -> None:
        super().__init__()
        self._topic = topic
        self._count = count
        self._ts = timestamp_ms
        self._groups = groups
        self._loop_thread = loop_thread
        self._results: list[BatchResult] = []
        self._unqueued: BaseException | None = None  # the records not queued fail with it
        self._open = 0
        self._lock = threading.Lock()

    def _watch(self) -> None:
        """Register with every batch result the records went to (after the last append)."""
        seen: dict[int, BatchResult] = {}
        for g in self._groups:
            for res, *_ in g.segments:
                seen.setdefault(id(res), res)
        self._results = list(seen.values())
        with self._lock:
            self._open = len(self._results) + 1  # +1: held until every result is attached
        for res in self._results:
            if not res.attach(self):  # type: ignore[arg-type]  # duck-typed: only _resolve is called
                self._resolve()
        self._resolve()

    def _resolve(self) -> None:
        """One batch result completed (called once per result, by ``BatchResult.complete``)."""
        with self._lock:
            self._open -= 1
            if self._open:
                return
        if self._unqueued is None and all(
                res.error is None and res._split is None for res in self._results):
            self.set_result(RecordMetadataList(self))  # the usual case: built on access
            return
        results = self._assemble()
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            self.set_exception(BatchSendError(
                f"{len(errors)} of {len(results)} records to {self._topic!r} failed; first: "
                f"{errors[0]!r}", results=results))
        else:
            self.set_result(results)

    def _assemble(self) -> list[Any]:
        out: list[Any] = [None] * self._count
        topic, ts = self._topic, self._ts
        for g in self._groups:
            for res, i0, a, n in g.segments:
                if res._split is None and res.error is None:
                    t = res.log_append_time if res.log_append_time >= 0 else ts
                    p = res.partition
                    first = res.base_offset + i0 if res.base_offset >= 0 else -1
                    offsets = range(first, first + n) if first >= 0 else [-1] * n
                    metas: list[Any] = [_new(RecordMetadata, (topic, p, o, t)) for o in offsets]
                elif res._split is None:
                    metas = [res.error] * n
                else:  # split after MESSAGE_TOO_LARGE: each record reads its own part
                    metas = [_settled(FutureRecordMetadata(res, i, ts)) for i in range(i0, i0 + n)]
                if g.index is None:
                    out[a:a + n] = metas
                else:
                    deque(map(out.__setitem__, g.index[a:a + n], metas), maxlen=0)
        if self._unqueued is not None:
            out = [self._unqueued if r is None else r for r in out]
        return out

    def result(self, timeout: float | None = None) -> Sequence[RecordMetadata]:
        if not self.done() and threading.get_ident() == self._loop_thread:
            raise RuntimeError("blocking on a produce future inside its event loop would "
                               "deadlock: use `await future` in async code")
        return super().result(timeout)  # type: ignore[no-any-return]

    async def wait(self) -> Sequence[RecordMetadata]:
        """Wait (trio, in the producer's loop) for every record; raises ``BatchSendError``."""
        for res in self._results:
            await res.wait_async()
        return self.result(0)

    def __await__(self) -> Generator[Any, None, Sequence[RecordMetadata]]:
        return self.wait().__await__()


class RecordMetadataList(Sequence[RecordMetadata]):
    """What a successful ``send_batch`` resolves to: a read-only sequence of the records'
    ``RecordMetadata``, input order. ``len()`` is free; the ``RecordMetadata`` objects are built
    on the first item access, iteration or comparison (in the caller's thread, once), so a
    caller that only waits for success pays nothing per record. Compares equal to a list of
    the same ``RecordMetadata``."""

    __slots__ = ("_fut", "_items")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, fut: BatchFuture) -> None:
        self._fut = fut
        self._items: list[RecordMetadata] | None = None

    def _list(self) -> list[RecordMetadata]:
        if self._items is None:
            self._items = self._fut._assemble()
        return self._items

    def __len__(self) -> int:
        return self._fut._count

    def __getitem__(self, i: Any) -> Any:
        return self._list()[i]

    def __iter__(self) -> Iterator[RecordMetadata]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordMetadataList):
            other = other._list()
        return self._list() == other if isinstance(other, list) else NotImplemented

    def __repr__(self) -> str:
        return f"RecordMetadataList({self._list()!r})"


def _settled(fut: FutureRecordMetadata) -> RecordMetadata | BaseException:
    err = fut.exception(0)
    return err if err is not None else fut._metadata()


def plan_batch(enq: Enqueue, topic: str, values: Sequence[bytes | None],
          keys: Sequence[bytes | None] | None, headers: HeadersList, partition: int | None,
          timestamp_ms: int | None, n: int) -> tuple[BatchFuture, list[RowGroup]]:
    """Sizes, checks and per-partition groups (see the module docstring, step 1)."""
    # copies (C-level, ~2 ns/rec): queued records refer to these lists until their batches are
    # built, so a caller reusing its own lists after the call must not change what is sent
    values = list(values)
    count = len(values)
    if keys is not None:
        keys = list(keys)
        if len(keys) != count:
            raise ValueError(f"send_batch: {len(keys)} keys for {count} values")
        if keys.count(None) == count:
            keys = None
    hdrs: list[Any] | None = None
    if headers is not None:
        if len(headers) != count:
            raise ValueError(f"send_batch: {len(headers)} headers for {count} values")
        hdrs = [list(h) if h else () for h in headers]
        if hdrs.count(()) == count:
            hdrs = None
    ts = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
    one_group = partition is not None or keys is None
    planned = _plan_c(enq, keys, values, hdrs, n, one_group)
    if planned is not None:
        big_size, big, groups = planned
    else:
        sizes = _sizes(keys, values, hdrs)
        big = max(range(count), key=sizes.__getitem__) if sizes else -1
        big_size = sizes[big] if sizes else -1
    if big_size > enq.max_record_size:
        try:
            enq.check_size(big_size)
        except RecordTooLargeError as exc:
            raise RecordTooLargeError(f"send_batch: record {big}: {exc.message}") from None
    if planned is None:
        if one_group or keys is None:
            groups = [RowGroup(-1, keys, values, hdrs, [0, *accumulate(sizes)])]
        else:
            groups = _by_partition(enq, keys, values, hdrs, sizes, n)
    if one_group and partition is not None:
        groups[0].partition = enq.choose(topic, None, partition, n)
    loop_thread = enq.loop_thread
    return BatchFuture(topic, count, ts, groups, loop_thread), groups


def _plan_c(enq: Enqueue, keys: list[Any] | None, values: list[Any],
            hdrs: list[Any] | None, n: int, one_group: bool) -> tuple[int, int, list[RowGroup]] | None:
    """Step 1 in one C call (``_codec.plan``: sizes, their prefix sums, the largest record
    and, for keyed records under the default partitioner, murmur2 partitions and the stable
    grouping; ``cum`` and ``index`` as int64 memoryviews, not lists of ints): ``(largest
    size, its position, groups)``, or ``None`` for the Python path (no
    extension, headers, a custom partitioner, keys or values that are not ``bytes``)."""
    if _c is None or hdrs is not None or not (one_group or enq.hash_cache is not None):
        return None
    try:
        if one_group:
            big_size, big, cum = _c.plan(keys, values, 0, 0)
            return big_size, big, [RowGroup(-1, keys, values, None, memoryview(cum).cast("q"))]
        big_size, big, planned = _c.plan(keys, values, n, random.randrange(n))
    except Unsupported:
        return None
    return big_size, big, [RowGroup(p, gk, gv, None, memoryview(cum).cast("q"),
                                    memoryview(idx).cast("q"))
                           for p, idx, gk, gv, cum in planned]


def _sizes(keys: list[Any] | None, values: list[Any], hdrs: list[Any] | None) -> list[int]:
    """Estimated size of each record (``record_size``), with C-level maps where possible."""
    try:
        sizes = list(map((12).__add__, map(len, values)))
        if keys is not None:
            sizes = list(map(add, sizes, map(len, keys)))
    except TypeError:  # some None key or value
        sizes = [12 + (len(v) if v is not None else 0) for v in values]
        if keys is not None:
            sizes = [s + (len(k) if k is not None else 0) for s, k in zip(sizes, keys, strict=True)]
    if hdrs is not None:
        sizes = [s + record_size(None, None, h) - 12 if h else s for s, h in zip(sizes, hdrs, strict=True)]
    return sizes


def _by_partition(enq: Enqueue, keys: list[Any], values: list[Any],
                  hdrs: list[Any] | None, sizes: list[int], n: int) -> list[RowGroup]:
    """Keyed records grouped by their partition, each group in input order with its input
    positions. Keyless records among them go to one random partition for the whole call (the
    sticky partitioner's choice, made up front) so that every partition's records keep their
    input order. With the default partitioner the hashes come from its key cache through
    C-level maps (a miss is hashed once, which fills the cache); the grouping is a stable sort
    of the input positions by partition."""
    sticky = random.randrange(n)
    cache = enq.hash_cache
    if cache is not None:
        hashes: list[Any] = list(map(cache.get, keys))
        if None in hashes:
            for i, h in enumerate(hashes):
                if h is None:
                    k = keys[i]
                    if k is None:
                        hashes[i] = sticky
                    else:
                        enq.partitioner(k, n)  # a miss: hashes the key into the cache
                        hashes[i] = cache[k]
        parts: list[int] = list(map(n.__rmod__, hashes))
    else:
        part = enq.partitioner
        parts = [part(k, n) if k is not None else sticky for k in keys]
    order = sorted(range(len(keys)), key=parts.__getitem__)  # stable: input order per partition
    groups = []
    lo = 0
    for p, count in sorted(Counter(parts).items()):
        idx = order[lo:lo + count]
        lo += count
        gk = list(map(keys.__getitem__, idx))
        gv = list(map(values.__getitem__, idx))
        gh = list(map(hdrs.__getitem__, idx)) if hdrs is not None else None
        cum = [0, *accumulate(map(sizes.__getitem__, idx))]
        groups.append(RowGroup(p, gk, gv, gh, cum, idx))
    return groups
