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
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable, Generator
from typing import Any

import trio

from client.types import RecordMetadata

__all__ = ["BatchResult", "FutureRecordMetadata"]

_FUTURE_STATE = frozenset({"_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks"})


class BatchResult:
    """The fate of one produce batch; completed exactly once, in the loop thread."""

    __slots__ = ("topic", "partition", "base_offset", "log_append_time", "error", "done",
                 "_lock", "_event", "_tevent", "_futures", "loop_thread")

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

    def _resolve(self) -> None:
        err = self._batch.error
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
        b = self._batch
        offset = b.base_offset + self._index if b.base_offset >= 0 else -1
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
        if self._batch.error is not None:
            raise self._batch.error
        return self._metadata()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._batch.wait_sync(timeout):
            raise cf.TimeoutError(f"record not acknowledged within {timeout} s")
        return self._batch.error

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
