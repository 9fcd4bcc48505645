"""wire/wakeups.py: periodic loops on one grid share wake-ups, keep their period, never run twice."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from rafka.wire.wakeups import grid_deadline, next_grid_time, sleep_on_grid

PERIODS = st.sampled_from([0.02, 0.1, 0.25, 0.3, 0.5, 0.7, 1.0, 15.0, 300.0])
NOW = st.floats(min_value=0.0, max_value=300_000.0, allow_nan=False)


@given(PERIODS, NOW)
def test_next_grid_time_is_the_next_multiple(period: float, now: float) -> None:
    t = next_grid_time(period, now)
    assert t > now
    assert t - now <= period * (1 + 1e-6)
    k = t / period
    assert math.isclose(k, round(k), abs_tol=1e-6)


@given(PERIODS, st.integers(min_value=1, max_value=10**6))
def test_resumed_at_a_grid_point_waits_a_whole_period(period: float, k: int) -> None:
    # a task woken exactly at its deadline must not get the same deadline back (a 0 s sleep
    # would run its round twice); floating point puts k * period a hair either side of it
    g = k * period
    assert math.isclose(next_grid_time(period, g) - g, period, rel_tol=1e-6)


def test_a_period_must_be_positive() -> None:
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="period"):
            next_grid_time(bad, 10.0)


async def _wakes(period: float, rounds: int, out: list[float], work_s: float = 0.0) -> None:
    for _ in range(rounds):
        await sleep_on_grid(period)
        out.append(trio.current_time())
        if work_s:
            await trio.sleep(work_s)  # a round that takes time (an RPC): the period holds


def test_loops_whose_periods_divide_each_other_wake_together() -> None:
    # the node's loops: heartbeat and stall watch 0.5 s, registration / HW checkpoint / txn
    # scan 1 s, the active controller 0.25 s — every 1 s wake is also a 0.5 s and a 0.25 s wake
    clock = trio.testing.MockClock(autojump_threshold=0)
    fast: list[float] = []
    half: list[float] = []
    slow: list[float] = []

    async def main() -> None:
        await trio.sleep(0.123)  # start off the grid, as a node does
        async with trio.open_nursery() as n:
            n.start_soon(_wakes, 0.25, 40, fast)
            n.start_soon(_wakes, 0.5, 20, half, 0.004)
            n.start_soon(_wakes, 1.0, 10, slow, 0.03)

    trio.run(main, clock=clock)  # mock clock: simulated seconds pass at once, deterministically
    assert set(slow) <= set(half) <= set(fast)
    # the distinct instants at which anything woke are the fastest loop's alone
    assert len(set(fast) | set(half) | set(slow)) == len(fast)
    for series, period in ((fast, 0.25), (half, 0.5), (slow, 1.0)):
        gaps = {round(b - a, 9) for a, b in zip(series, series[1:], strict=False)}
        assert gaps == {period}, (period, gaps)


def test_a_round_that_overruns_waits_for_the_next_grid_point() -> None:
    clock = trio.testing.MockClock(autojump_threshold=0)
    seen: list[float] = []

    async def main() -> None:
        await _wakes(0.5, 6, seen, work_s=0.6)  # each round outlasts the period

    trio.run(main, clock=clock)
    gaps = {round(b - a, 9) for a, b in zip(seen, seen[1:], strict=False)}
    assert gaps == {1.0}  # skipped one grid point each time, never ran back to back


def _host_grid_point(period: float) -> tuple[float, float]:
    """In a fresh ``trio.run`` (a new random clock offset, as a new node process has): the next
    grid deadline on the host's monotonic clock, and this run's offset."""

    async def main() -> tuple[float, float]:
        offset = trio.lowlevel.current_clock().offset  # type: ignore[attr-defined]
        return grid_deadline(period) - offset, offset

    return trio.run(main)


def test_processes_on_one_host_share_the_grid() -> None:
    # every node process has its own random trio offset; their loops must still wake at the
    # same host instants (the three brokers' heartbeats reach the active controller together)
    a, off_a = _host_grid_point(0.5)
    b, off_b = _host_grid_point(0.5)
    assert off_a != off_b  # two unrelated trio clocks
    for host_deadline in (a, b):
        k = host_deadline / 0.5
        assert math.isclose(k, round(k), abs_tol=1e-6), host_deadline
    # the same point, or the next one if the host clock crossed a grid point between the runs
    gap = abs(a - b)
    assert math.isclose(gap, 0.0, abs_tol=1e-6) or math.isclose(gap, 0.5, abs_tol=1e-6), gap
