"""Parked produce requests and their deadlines: one timer task for every partition of a broker.

Theory of operation
-------------------
A produce request with ``acks`` 1 or all whose append is not yet decided waits until its
partition decides it or its ``timeout_ms`` passes. It used to wait on a ``trio.Event`` inside
``trio.move_on_at(deadline)``; entering and leaving that cancel scope alone costs ~5 µs of CPU
per request (warm, on this VM; more in a busy broker), the largest single item of trio's own
work per produce on a leader (docs/performance.md, "Produce waits without a cancel scope, and
rarer young GC passes").

Here a wait is a ``ParkedProduce``: the task, parked with ``trio.lowlevel.wait_task_rescheduled``
(or, for a produce the listener steps without a task, its ``broker.detached.Runner``), and a
flag that it was settled. Exactly one party settles it, whoever comes first, and hands
the task its answer:

* its partition, with the outcome, once the durable end or the high watermark moves past it
  (``Partition._wake_produce``); the outcome is final then (a record below the HW stays
  committed), so the woken request answers without looking again;
* its partition with ``None`` ("look again") when the role, the log or the partition itself
  changed (``Partition.notify``);
* ``ProduceDeadlines`` with ``REQUEST_TIMED_OUT`` at the request's deadline;
* trio, when the request is cancelled (its connection closed): the abort callback marks it.

``ProduceDeadlines`` is one task in the replica manager's nursery with a heap of
``(deadline, seq, parked)``. It sleeps in a cancel scope until the earliest deadline; that
scope's deadline is moved only when an earlier one arrives, which is rare while requests come
in, since most carry the same ``timeout_ms`` and later ones end later. When it wakes it settles
the entries that are due and drops the settled ones on top, so under a steady load it wakes
about once per ``timeout_ms`` and an idle broker (an empty heap) not at all. Entries settled
otherwise stay in the heap until they reach the top, or until the heap holds more than twice
the entries alive at the last rebuild plus ``_SLACK``, when it is rebuilt from the live ones:
memory stays proportional to the requests actually parked.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import outcome
import trio
from rafka.broker.detached import Runner, driving, park
from rafka.wire.errors import ErrorCode
from trio.lowlevel import Abort, Task, current_task, reschedule, wait_task_rescheduled

__all__ = ["ParkedProduce", "ProduceDeadlines"]

_SLACK = 1024  # settled entries tolerated in the deadline heap beyond twice the live ones


class ParkedProduce:
    """One parked wait; ``settle`` wakes it once, later calls do nothing."""

    __slots__ = ("task", "runner", "settled")

    def __init__(self) -> None:
        self.task: Task | None = None
        self.runner: Runner | None = None
        self.settled = False

    def settle(self, answer: ErrorCode | None) -> None:
        """Wake the parked waiter with ``answer`` (None: look again), unless already settled."""
        if not self.settled:
            self.settled = True
            if self.runner is not None:
                self.runner.wake(answer)
            else:
                assert self.task is not None, "settled before it parked"
                reschedule(self.task, outcome.Value(answer))

    async def park(self) -> ErrorCode | None:
        """Wait to be settled; a cancellation marks it settled and raises as usual. Stepped by
        a ``broker.detached.Runner`` (a task-less produce), the runner is parked instead."""
        runner = driving()
        if runner is not None:
            self.runner = runner
            return await park(runner, self)  # type: ignore[no-any-return]
        self.task = current_task()
        return await wait_task_rescheduled(self._abort)  # type: ignore[no-any-return]

    def _abort(self, _raise_cancel: Any) -> Abort:
        self.settled = True
        return Abort.SUCCEEDED


class ProduceDeadlines:
    """Settles parked produce waits with ``REQUEST_TIMED_OUT`` at their deadlines (trio time);
    ``run`` must be running in a nursery for deadlines to fire."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, ParkedProduce]] = []
        self._seq = 0
        self._wake_at = math.inf
        self._scope: trio.CancelScope | None = None
        self._live_at_rebuild = 0
        self.timed_out = 0  # waits this timer settled (statistics, tests)

    def add(self, deadline: float, parked: ParkedProduce) -> None:
        heap = self._heap
        self._seq += 1
        heapq.heappush(heap, (deadline, self._seq, parked))
        if deadline < self._wake_at:
            self._wake_at = deadline
            if self._scope is not None:
                self._scope.deadline = deadline
        elif len(heap) > 2 * self._live_at_rebuild + _SLACK:
            heap[:] = [e for e in heap if not e[2].settled]
            heapq.heapify(heap)
            self._live_at_rebuild = len(heap)

    def __len__(self) -> int:
        return len(self._heap)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        heap = self._heap
        task_status.started()
        while True:
            with trio.CancelScope(deadline=self._wake_at) as scope:
                self._scope = scope
                await trio.sleep_forever()
            self._scope = None
            now = trio.current_time()
            while heap and (heap[0][2].settled or heap[0][0] <= now):
                parked = heapq.heappop(heap)[2]
                if not parked.settled:
                    self.timed_out += 1
                    parked.settle(ErrorCode.REQUEST_TIMED_OUT)
            self._wake_at = heap[0][0] if heap else math.inf
