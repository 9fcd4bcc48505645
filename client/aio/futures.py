"""Per-batch results and the per-record futures that ``send`` returns.

Theory of operation
-------------------
The producer settles *batches*, never records: one ``BatchResult`` per batch is completed once,
in the event-loop thread, with the base offset or an error. ``send`` returns a
``FutureRecordMetadata`` that only holds ``(batch result, index, timestamp)`` — creating it is a
few attribute stores, because the hot path must stay near a microsecond per record.

``FutureRecordMetadata`` *is* a ``concurrent.futures.Future`` (``isinstance`` holds, and
``concurrent.futures.wait`` / ``as_completed`` work), but it is lazy: it does not run
``Future.__init__`` (which allocates a ``Condition``) until something touches the Future
machinery (``add_done_callback``, ``concurrent.futures.wait``, ``repr``…); at that point it
becomes a regular Future and the batch resolves it on completion. ``result()`` / ``done()`` /
``exception()`` read the batch directly and never materialize. Inside trio, ``await fut``
(or ``await fut.wait()``) waits without blocking the loop; calling ``result()`` on an
unfinished future from the loop thread raises instead of deadlocking.

Split batches: when the broker refuses a batch of several records as too large
(MESSAGE_TOO_LARGE, nothing appended), the producer splits it into smaller batches
(``BatchResult.split_into``). The futures already handed out keep pointing at the original
result, which then maps each record index to the part holding it and completes once every
part has; a future reads its offset or error from its own part (``_leaf``).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from bisect import bisect_right
from collections.abc import Callable, Generator
from typing import Any

import trio
from rafka.client.types import RecordMetadata

__all__ = ["BatchResult", "FutureRecordMetadata"]

_FUTURE_STATE = frozenset({"_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks"})


class BatchResult:
    """The fate of one produce batch; completed exactly once, in the loop thread."""

    __slots__ = ("topic", "partition", "base_offset", "log_append_time", "error", "done",
                 "_lock", "_event", "_tevent", "_futures", "loop_thread", "_split", "_starts",
                 "_parent", "_open_parts")

    def __init__(self, topic: str, partition: int, loop_thread: int) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self.done = False
        self.loop_thread = loop_thread
        self._lock = threading.Lock()
        self._event: threading.Event | None = None
        self._tevent: trio.Event | None = None
        self._futures: list[FutureRecordMetadata] | None = None
        self._split: list[BatchResult] | None = None  # the parts, when split (see above)
        self._starts: list[int] = []  # first record index of each part
        self._parent: BatchResult | None = None
        self._open_parts = 0

    def split_into(self, parts: list[tuple[int, BatchResult]]) -> None:
        """Records from index ``parts[i][0]`` on (up to the next part) now travel in the batch
        of ``parts[i][1]``; this result completes when every part has (loop thread only)."""
        self._starts = [start for start, _ in parts]
        self._split = [r for _, r in parts]
        self._open_parts = len(parts)
        for r in self._split:
            r._parent = self

    def locate(self, index: int) -> tuple[BatchResult, int]:
        """(part result, index in it) of record ``index`` of a split result."""
        assert self._split is not None
        i = bisect_right(self._starts, index) - 1
        return self._split[i], index - self._starts[i]

    def _part_done(self) -> None:
        self._open_parts -= 1
        if self._open_parts == 0:
            self.complete()

    def complete(self, base_offset: int = -1, log_append_time: int = -1,
                 error: BaseException | None = None) -> None:
        with self._lock:
            if self.done:
                return
            self.base_offset = base_offset
            self.log_append_time = log_append_time
            self.error = error
            self.done = True
            futures, self._futures = self._futures, None
            event = self._event
        if event is not None:
            event.set()
        if self._tevent is not None:
            self._tevent.set()
        for f in futures or ():
            f._resolve()
        if self._parent is not None:
            self._parent._part_done()

    def wait_sync(self, timeout: float | None) -> bool:
        with self._lock:
            if self.done:
                return True
            if threading.get_ident() == self.loop_thread:
                raise RuntimeError("blocking on a produce future inside its event loop would "
                                   "deadlock: use `await future` in async code")
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    async def wait_async(self) -> None:
        if not self.done:
            if self._tevent is None:
                self._tevent = trio.Event()
            await self._tevent.wait()

    def attach(self, fut: FutureRecordMetadata) -> bool:
        """Register a materialized future; False if already done (caller resolves it)."""
        with self._lock:
            if self.done:
                return False
            if self._futures is None:
                self._futures = []
            self._futures.append(fut)
            return True


class FutureRecordMetadata(cf.Future):  # type: ignore[type-arg]
    """A ``concurrent.futures.Future`` of ``RecordMetadata``, settled by its batch."""

    # Slots keep the instance ``__dict__`` unallocated until the future materializes.
    __slots__ = ("_batch", "_index", "_ts")

    def __init__(self, batch: BatchResult, index: int, timestamp_ms: int) -> None:
        # Deliberately no Future.__init__ here: see the module docstring.
        self._batch = batch
        self._index = index
        self._ts = timestamp_ms

    # -- lazy materialization ------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name in _FUTURE_STATE:
            self._materialize()
            return object.__getattribute__(self, name)
        raise AttributeError(name)

    def _materialize(self) -> None:
        if self._materialized():
            return
        cf.Future.__init__(self)
        if not self._batch.attach(self):
            self._resolve()

    def _leaf(self) -> tuple[BatchResult, int]:
        """The (completed) result that holds this record and its index there: the batch's own
        unless it was split (see the module docstring)."""
        b, i = self._batch, self._index
        while b._split is not None:
            b, i = b.locate(i)
        return b, i

    def _resolve(self) -> None:
        err = self._leaf()[0].error
        if err is not None:
            cf.Future.set_exception(self, err)
        else:
            cf.Future.set_result(self, self._metadata())

    def _materialized(self) -> bool:
        try:
            object.__getattribute__(self, "_condition")
        except AttributeError:
            return False
        return True

    def _metadata(self) -> RecordMetadata:
        b, index = self._leaf()
        offset = b.base_offset + index if b.base_offset >= 0 else -1
        ts = b.log_append_time if b.log_append_time >= 0 else self._ts
        return RecordMetadata(b.topic, b.partition, offset, ts)

    # -- Future API ---------------------------------------------------------------------

    def done(self) -> bool:
        return self._batch.done

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self._batch.done

    def cancel(self) -> bool:
        return False  # a record handed to the producer cannot be taken back

    def result(self, timeout: float | None = None) -> RecordMetadata:
        if not self._batch.wait_sync(timeout):
            raise cf.TimeoutError(f"record not acknowledged within {timeout} s")
        err = self._leaf()[0].error
        if err is not None:
            raise err
        return self._metadata()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._batch.wait_sync(timeout):
            raise cf.TimeoutError(f"record not acknowledged within {timeout} s")
        return self._leaf()[0].error

    def add_done_callback(self, fn: Callable[[cf.Future], object]) -> None:  # type: ignore[type-arg]
        self._materialize()
        cf.Future.add_done_callback(self, fn)

    def set_result(self, result: Any) -> None:
        raise RuntimeError("produce futures are settled by the producer")

    def set_exception(self, exception: BaseException | None) -> None:
        raise RuntimeError("produce futures are settled by the producer")

    # -- trio -----------------------------------------------------------------------------

    async def wait(self) -> RecordMetadata:
        """Wait (trio) for the acknowledgement; raises the delivery error."""
        await self._batch.wait_async()
        return self.result(0)

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        return self.wait().__await__()

    def __repr__(self) -> str:
        state = "done" if self._batch.done else "pending"
        return f"<FutureRecordMetadata {self._batch.topic}-{self._batch.partition}#{self._index} {state}>"
