"""Periodic background loops share their wake-ups: each sleeps until the next multiple of its
period on the trio clock, not for one period from wherever its last round ended.

Theory of operation: an idle node runs several periodic loops — the broker heartbeat (0.5 s),
the Raft stall watch (0.5 s), the voter-registration check, the HW checkpoint and the
transaction coordinator's timeout scan (1 s each), on the active controller its periodic
decisions (0.25 s). With ``trio.sleep(period)`` each loop keeps the phase at which it started,
so the event loop wakes once per loop per period; and on this machine one wake-up of an idle
trio thread costs ~300–400 µs of CPU however little the task then does (cold caches: the run
loop, epoll, the task's own code). ``sleep_on_grid(period)`` sleeps until
``(⌊now / period⌋ + 1) · period`` instead: every loop whose period is a multiple of another's
wakes at the same instants as it, and trio expires all due deadlines in one pass of its run
loop, so five loops cost the wake-ups of the fastest one (timer coalescing, as the kernel's
timer slack does for processes). Periods that share no multiple still work; they just share
fewer wake-ups.

The grid is the host's, not the process's: its origin is ``CLOCK_MONOTONIC``'s zero, which
every process on a host shares (trio's ``SystemClock`` is ``perf_counter`` — that clock on
Linux — plus a random offset, which is taken out). So the nodes of one host wake at the same
instants too: the three brokers' heartbeats of a local cluster reach the active controller
together, and its loop takes them in one wake-up instead of three (issue 26: the active
controller's trio thread woke ~10 times a second, four of them for the other brokers'
heartbeats). Nodes on different hosts keep unrelated phases, as before. Under any other clock
(trio's ``MockClock`` in tests) the grid's origin is that clock's zero.

A round that starts at a grid point and ends before the next keeps its exact period; one that
overruns a grid point waits for the following one (it never runs twice back to back). The
first sleep of a loop is shorter than a period: it only waits for the next grid point.
"""

from __future__ import annotations

import math
import time

import trio

# now / period is computed in floating point; a task resumed exactly at a grid point must
# see that point as passed, or it would sleep 0 s and run its round twice
_EPS = 1e-6


def next_grid_time(period_s: float, now: float) -> float:
    """The first multiple of ``period_s`` strictly after ``now`` (both in seconds)."""
    if not period_s > 0:
        raise ValueError(f"period must be > 0 s, got {period_s!r}")
    return (math.floor(now / period_s + _EPS) + 1) * period_s


def _grid_origin() -> float:
    """Where the host's grid starts on the trio clock: the ``SystemClock``'s offset from
    ``perf_counter`` (CLOCK_MONOTONIC here), or 0 under another clock."""
    clock = trio.lowlevel.current_clock()
    offset = getattr(clock, "offset", None)
    if isinstance(offset, float) and abs(clock.current_time() - offset - time.perf_counter()) < 0.01:
        return offset
    return 0.0


def grid_deadline(period_s: float) -> float:
    """The trio-clock deadline of the next grid point of ``period_s``
    (for ``trio.move_on_at`` where a loop also waits on an event)."""
    origin = _grid_origin()
    return next_grid_time(period_s, trio.current_time() - origin) + origin


async def sleep_on_grid(period_s: float) -> None:
    """Sleep until the next multiple of ``period_s`` on the trio clock (see the module text)."""
    await trio.sleep_until(grid_deadline(period_s))
