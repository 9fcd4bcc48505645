"""Requests that wait without a task: a coroutine stepped by hand, parked by its partition,
resumed by one completer task per listener.

Theory of operation
-------------------
An acks=1/all produce request does its work (decode, append) and then waits for its partition
to decide the outcome. Given a trio task of its own, that wait costs a spawn, a task step on
wake-up through ~10 nested coroutine frames, and the task's exit: ~8.5 µs of CPU per request
on this VM against ~0.6 µs for a plain callback (docs/performance.md, "What a task-less produce
would save"). A ``Runner`` keeps the request's coroutine (the server's whole per-request chain:
metrics, quotas, ACLs, dispatch, handler, reply) and steps it with ``coro.send`` itself:

* the listener's read loop takes the first step inline, as soon as the frame is decoded — the
  append happens there, in arrival order;
* while a runner's step is executing, ``driving()`` returns it. A ``ParkedProduce`` that parks
  then does not ask trio to suspend a task: it yields ``_PARK`` to the runner and keeps the
  runner to wake;
* ``ParkedProduce.settle`` (a partition deciding the outcome, a deadline, a role change) does
  not run the coroutine there, inside whoever settled it — a partition is walking its waiter
  heap then — but queues ``(runner, answer)`` on the listener's ``Completer``: one task that
  takes every queued step in one scheduler pass (a group-commit round or a HW advance
  decides many produces at once; one wake-up serves them all).

**The rule.** Code a runner steps may use trio only where trio needs no task: ``current_time``,
``Event.set``, ``reschedule``. Anything that suspends with a trio trap, enters a cancel scope or
takes a lock must first ``await to_task()``: stepped by a runner, that hands the coroutine to a
fresh task in the connection's nursery (``Home.adopt``), which goes on from there as any
request task; outside a runner it returns at once. Before that point nothing trio-specific is
open (no cancel scope, no lock), so the hand-over is safe. The produce path calls it before
a transactional verification, before a throttle hold and before a send that could not finish
at once. A runner that still receives a trio trap has broken the rule: it is closed and its
connection dropped, loudly (``StrayTrapError``), never left in a half-state.

**Ending.** When a connection ends, its runners still parked are closed (``Home.close_all``):
their parked waits are marked settled, so the partitions drop them, and ``coro.close()`` runs
the chain's ``finally`` clauses (in-flight count, metrics) as a cancellation would.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Protocol

import outcome
import trio
from trio.lowlevel import Abort, Task, current_task, reschedule, wait_task_rescheduled

log = logging.getLogger(__name__)

__all__ = ["Completer", "Home", "Runner", "StrayTrapError", "driving", "forward", "park", "to_task"]

_PARK = object()  # yielded by park(): the runner leaves the coroutine parked
_TO_TASK = object()  # yielded by to_task(): the runner hands the coroutine to a task

_driving: Runner | None = None  # the runner whose step is executing now


class StrayTrapError(RuntimeError):
    """A coroutine stepped by a runner suspended on trio without ``await to_task()`` first."""


class Parked(Protocol):
    settled: bool


class Home(Protocol):
    """Where a runner's coroutine goes when it needs a task, and who answers for it."""

    def adopt(self, runner: Runner) -> None: ...

    def forget(self, runner: Runner) -> None: ...

    def stray(self, runner: Runner, exc: BaseException) -> None: ...


def driving() -> Runner | None:
    """The runner stepping the current coroutine, or None inside an ordinary trio task."""
    return _driving


class _Yield:
    """An awaitable yielding one marker object to whoever steps the coroutine."""

    __slots__ = ("marker",)

    def __init__(self, marker: object) -> None:
        self.marker = marker

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield self.marker)


async def park(runner: Runner, parked: Parked) -> Any:
    """Park the coroutine ``runner`` is stepping; the value ``runner.wake`` is given is returned."""
    runner.parked = parked
    return await _Yield(_PARK)


async def to_task() -> None:
    """Continue in a trio task of the connection (no-op when already in one): see the rule."""
    if _driving is not None:
        await _Yield(_TO_TASK)


def forward(coro: Coroutine[Any, Any, Any], trap: Any) -> Generator[Any, Any, Any]:
    """``yield from`` the rest of ``coro``, whose last step yielded ``trap``: every trap to the
    scheduler, every value or exception sent back to the coroutine."""
    while True:
        try:
            sent = yield trap
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # thrown in by the scheduler: pass it on
            try:
                trap = coro.throw(exc)
            except StopIteration as done:
                return done.value
            continue
        try:
            trap = coro.send(sent)
        except StopIteration as done:
            return done.value


class _Adopted:
    """``await _Adopted(coro)``: go on with ``coro`` in this task (it yielded ``_TO_TASK`` last)."""

    __slots__ = ("coro",)

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.coro = coro

    def __await__(self) -> Generator[Any, Any, Any]:
        try:
            trap = self.coro.send(None)
        except StopIteration as done:
            return done.value
        return (yield from forward(self.coro, trap))


class Runner:
    """One coroutine stepped by hand (module docstring); ``home`` takes it when it needs a task."""

    __slots__ = ("coro", "home", "completer", "parked", "closed")

    def __init__(self, coro: Coroutine[Any, Any, Any], home: Home, completer: Completer) -> None:
        self.coro = coro
        self.home = home
        self.completer = completer
        self.parked: Parked | None = None
        self.closed = False

    def step(self, value: Any = None) -> None:
        """Send ``value`` into the coroutine and act on what it yields."""
        global _driving
        if self.closed:
            return
        self.parked = None
        outer, _driving = _driving, self
        try:
            trap = self.coro.send(value)
        except StopIteration:
            self._end()
            return
        except Exception as exc:  # the server's chain answers every Exception itself: a bug
            self._end()
            self.home.stray(self, exc)
            return
        except BaseException:  # KeyboardInterrupt and the like: not ours to keep
            self._end()
            raise
        finally:
            _driving = outer
        if trap is _PARK:
            return
        self._end()  # finished here either way: a task owns it now, or nobody does
        if trap is _TO_TASK:
            self.home.adopt(self)
            return
        self.coro.close()
        self.home.stray(self, StrayTrapError(f"a task-less request yielded the trio trap {trap!r}"))

    def _end(self) -> None:
        self.closed = True
        self.home.forget(self)

    def wake(self, value: Any) -> None:
        """The parked wait was settled with ``value``: the completer steps it soon."""
        self.completer.push(self, value)

    def adopted(self) -> _Adopted:
        return _Adopted(self.coro)

    def close(self) -> None:
        """Give up the coroutine: its parked wait is settled, its ``finally`` clauses run."""
        if self.parked is not None:
            self.parked.settled = True
            self.parked = None
        self.closed = True
        self.coro.close()


class Completer:
    """Steps woken runners, all that are queued in one scheduler pass; ``run`` in a nursery."""

    def __init__(self) -> None:
        self._ready: collections.deque[tuple[Runner, Any]] = collections.deque()
        self._task: Task | None = None
        self._idle = False
        self.steps = 0  # runner steps taken (statistics, tests)

    def push(self, runner: Runner, value: Any) -> None:
        self._ready.append((runner, value))
        if self._idle:
            self._idle = False
            assert self._task is not None
            reschedule(self._task, outcome.Value(None))

    def _abort(self, _raise_cancel: Callable[[], Any]) -> Abort:
        self._idle = False
        return Abort.SUCCEEDED

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self._task = current_task()
        ready = self._ready
        task_status.started()
        try:
            while True:
                if not ready:
                    self._idle = True
                    await wait_task_rescheduled(self._abort)
                while ready:
                    runner, value = ready.popleft()
                    self.steps += 1
                    runner.step(value)
        finally:
            # the listener is stopping: close what is still queued (its connections close theirs)
            while ready:
                ready.popleft()[0].close()
            self._task = None
