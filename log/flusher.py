"""Flusher: the flush policy and group commit for a set of partition logs (trio service).

Theory of operation: the only trio code in ``log/``.  ``PartitionLog.flush`` is a blocking
call (``fdatasync``) that is safe to run in a worker thread while the owner thread keeps
appending; the Flusher decides *when* to call it and runs it via ``trio.to_thread.run_sync``
(at most ``max_concurrent_flushes`` at a time).  Policies:

* ``"batch"`` — every acknowledged batch is durable: a produce handler appends, then
  ``await flusher.wait_durable(log, info.last_offset + 1)``.  Each log has a *generation* (an
  event); a waiter marks the log as requested and waits for the current generation.  When a
  flush starts it takes the generation and installs a fresh one, so everything appended while
  an fsync runs is covered by the *next* fsync: one fsync acknowledges all the batches that
  accumulated (group commit), and fsyncs per second stop bounding produce requests per second.
* ``"messages"`` — flush a log once ``flush.messages`` records were appended
  (``appended(log, n)`` counts them).
* ``"interval"`` — flush a dirty log every ``flush.ms``.
* ``"none"`` — never flush (the OS writes back dirty pages; close still flushes).

Under every policy but ``"batch"`` ``wait_durable`` returns at once: the policy, not the
acknowledgement, decides durability (as in Kafka).  ``flush_now`` forces one flush.

Bounded: the per-log state is one small record per registered log (at most ``max_logs``);
waiters are the callers' own tasks; the service runs its flushes in a nursery it waits for, so
there are no queues and no fire-and-forget tasks.  When ``run`` stops, every waiter is woken
with ``trio.ClosedResourceError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from .errors import LogError, StorageError

if TYPE_CHECKING:
    from .partition_log import PartitionLog

__all__ = ["Flusher", "POLICIES"]

POLICIES = ("batch", "messages", "interval", "none")


@dataclass(slots=True, eq=False)
class _Generation:
    event: trio.Event = field(default_factory=trio.Event)
    error: BaseException | None = None


@dataclass(slots=True, eq=False)
class _LogState:
    gen: _Generation = field(default_factory=_Generation)
    requested: bool = False
    messages: int = 0
    last_flush: float = 0.0
    flushing: bool = False


class Flusher:
    def __init__(self, policy: str = "batch", *, flush_messages: int | None = None,
                 flush_ms: int | None = None, max_logs: int = 100_000,
                 max_concurrent_flushes: int = 2) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown flush policy {policy!r}; expected one of {POLICIES}")
        self.policy = policy
        self._flush_messages = flush_messages
        self._flush_ms = flush_ms
        self.max_logs = max_logs
        self._limiter = trio.CapacityLimiter(max_concurrent_flushes)
        self._states: dict[PartitionLog, _LogState] = {}
        self._wakeup = trio.Event()
        self._closed = False
        self.flushes = 0
        self.waits = 0

    # -- registration and notifications ---------------------------------------------------

    def register(self, log: PartitionLog) -> None:
        if log not in self._states:
            if len(self._states) >= self.max_logs:
                raise RuntimeError(f"Flusher already tracks max_logs={self.max_logs} logs")
            self._states[log] = _LogState(last_flush=_now())
            self._wakeup.set()  # the run loop recomputes its interval deadline

    def unregister(self, log: PartitionLog) -> None:
        st = self._states.pop(log, None)
        if st is not None:
            st.gen.error = trio.ClosedResourceError("log unregistered from the flusher")
            st.gen.event.set()

    def appended(self, log: PartitionLog, records: int) -> None:
        """Count appended records (policy "messages")."""
        if self.policy != "messages":
            return
        self.register(log)
        st = self._states[log]
        st.messages += records
        limit = self._flush_messages or log.config.flush_messages
        if st.messages >= limit:
            st.requested = True
            self._wakeup.set()

    # -- waiting ------------------------------------------------------------------------------

    async def wait_durable(self, log: PartitionLog, end_offset: int) -> None:
        """Under policy "batch", wait until offsets < ``end_offset`` are fsynced."""
        if self.policy != "batch":
            await trio.lowlevel.checkpoint()
            return
        await self._wait_recovery_point(log, end_offset)

    async def flush_now(self, log: PartitionLog) -> int:
        """Flush ``log`` (joining a flush in progress if it covers everything); new rp."""
        await self._wait_recovery_point(log, log.log_end_offset)
        return log.recovery_point

    async def _wait_recovery_point(self, log: PartitionLog, end_offset: int) -> None:
        self.register(log)
        st = self._states[log]
        self.waits += 1
        while log.recovery_point < end_offset:
            if self._closed:
                raise trio.ClosedResourceError("the flusher is stopped")
            if log.closed:
                raise trio.ClosedResourceError(f"log {log.directory} is closed")
            gen = st.gen
            st.requested = True
            self._wakeup.set()
            await gen.event.wait()
            if gen.error is not None:
                if isinstance(gen.error, trio.ClosedResourceError):
                    raise trio.ClosedResourceError(str(gen.error))
                raise StorageError(f"flush of {log.directory} failed: {gen.error}") \
                    from gen.error
        await trio.lowlevel.checkpoint()

    # -- the service ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Serve until cancelled; start with ``await nursery.start(flusher.run)``."""
        task_status.started()
        try:
            while True:
                with trio.move_on_at(self._next_deadline()):
                    await self._wakeup.wait()
                self._wakeup = trio.Event()
                due = self._due_logs()
                if due:
                    async with trio.open_nursery() as nursery:
                        for log, st in due:
                            nursery.start_soon(self._flush_one, log, st)
        finally:
            self._closed = True
            for st in self._states.values():
                st.gen.error = trio.ClosedResourceError("the flusher stopped")
                st.gen.event.set()

    def _interval_s(self, log: PartitionLog) -> float:
        ms = self._flush_ms if self._flush_ms is not None else log.config.flush_ms
        return ms / 1000.0

    def _next_deadline(self) -> float:
        if self.policy != "interval" or not self._states:
            return math.inf
        return min(st.last_flush + self._interval_s(log) for log, st in self._states.items())

    def _due_logs(self) -> list[tuple[PartitionLog, _LogState]]:
        now = _now()
        due = []
        for log, st in self._states.items():
            if st.flushing:
                continue
            if st.requested or (self.policy == "interval"
                                and now >= st.last_flush + self._interval_s(log)):
                if not st.requested and log.recovery_point >= log.log_end_offset:
                    st.last_flush = now  # clean: nothing to do this interval
                    continue
                due.append((log, st))
        return due

    async def _flush_one(self, log: PartitionLog, st: _LogState) -> None:
        gen, st.gen = st.gen, _Generation()
        st.requested = False
        st.messages = 0
        st.flushing = True
        try:
            await trio.to_thread.run_sync(log.flush, limiter=self._limiter)
            self.flushes += 1
        except LogError as exc:
            gen.error = exc
        finally:
            st.flushing = False
            st.last_flush = _now()
            gen.event.set()
            if st.requested:  # asked for again while we were flushing
                self._wakeup.set()

    def statistics(self) -> dict[str, object]:
        return {"policy": self.policy, "logs": len(self._states), "flushes": self.flushes,
                "waits": self.waits}


def _now() -> float:
    return trio.current_time()
