"""CPU of one parked fetch's wake-up, by the number of partitions it reads: the old wait (a
``trio.Event`` per partition, a task per event in a nursery that cancels the rest) against
``broker/fetch_wait.py`` (one event, registered with every partition's ``Signal``).

``python -m bench.bench_fetch_wait [ROUNDS]``: for N in 1, 4, 16, 64, ABBA rounds of 2,000
cycles each. ``make bench`` (``run``) reports N = 1 and 16: ``parked_fetch_wake_cpu_us_<N>p``
with its ratio to ``…_old_wait`` measured beside it. A cycle is what a follower's fetch costs the leader's trio thread between two produces:
the fetch parks on its N partitions, a produce to one of them fires that partition, the fetch
wakes and returns. The process's CPU per cycle (``time.process_time``) is reported per arm as
the median of the rounds, and the ratio new / old. In-process, nothing else runs: what it
isolates is the waiting machinery itself, not a request (a request around it costs ~150 µs on
this VM). The old arm is the code it replaced (``broker/handlers/data.py::_wait_any`` before
session 30), kept here as the reference.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from rafka.broker.fetch_wait import Signal, wait_any

CYCLES = 2000


async def _old_wait_any(events: list[trio.Event], deadline: float) -> None:
    with trio.move_on_at(deadline):
        if len(events) == 1:
            await events[0].wait()
            return
        async with trio.open_nursery() as nursery:
            async def waiter(ev: trio.Event) -> None:
                await ev.wait()
                nursery.cancel_scope.cancel()

            for ev in events:
                nursery.start_soon(waiter, ev)


async def _cycles(park: Callable[[], Awaitable[None]], fire: Callable[[int], None],
                  n: int) -> float:
    """CPU µs per cycle: a fetch task parks, the driver fires partition ``i % n``, repeat."""
    done = trio.Event()

    async def fetch() -> None:
        for _ in range(CYCLES):
            await park()
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fetch)
        await trio.sleep(0)
        t0 = time.process_time()
        i = 0
        while not done.is_set():
            await trio.sleep(0)
            fire(i % n)
            i += 1
            await trio.sleep(0)
        return (time.process_time() - t0) / CYCLES * 1e6


async def _old(n: int) -> float:
    events = [trio.Event() for _ in range(n)]

    def fire(k: int) -> None:
        events[k].set()
        events[k] = trio.Event()

    return await _cycles(lambda: _old_wait_any(list(events), trio.current_time() + 60), fire, n)


async def _new(n: int) -> float:
    signals = [Signal() for _ in range(n)]
    return await _cycles(lambda: wait_any(signals, trio.current_time() + 60),
                         lambda k: signals[k].fire(), n)


def _medians(n: int, rounds: int) -> tuple[list[float], list[float]]:
    """(old, new) CPU µs per cycle over ``rounds`` ABBA rounds."""
    old: list[float] = []
    new: list[float] = []
    for r in range(rounds):
        order = (_old, _new) if r % 2 == 0 else (_new, _old)
        for arm in order:
            (old if arm is _old else new).append(trio.run(arm, n))
    return old, new


def run(runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in (1, 16):
        old, new = _medians(n, max(2, runs))
        out[f"parked_fetch_wake_cpu_us_{n}p_old_wait"] = {
            "median": statistics.median(old), "unit": "µs", "runs": old}
        out[f"parked_fetch_wake_cpu_us_{n}p"] = {
            "median": statistics.median(new), "unit": "µs", "runs": new,
            "ratio_of": f"parked_fetch_wake_cpu_us_{n}p_old_wait"}
    return out


def main(argv: list[str]) -> int:
    rounds = int(argv[0]) if argv else 4
    print(f"{'partitions':>10} {'old µs/cycle':>13} {'new µs/cycle':>13} {'new/old':>8}")
    for n in (1, 4, 16, 64):
        old, new = _medians(n, rounds)
        o, w = statistics.median(old), statistics.median(new)
        print(f"{n:>10} {o:>13.1f} {w:>13.1f} {w / o:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
