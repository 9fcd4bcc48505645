"""Consumer groups on a throwaway 3-node cluster (real processes, loopback).

Figures:

* ``rebalance_join_ms`` — a group of one member owning the 6 partitions of a topic; a second
  member joins: time from its start until both own 3 partitions (the first one revoked 3 and
  acknowledged, the controller handed them over). Bounded below by the first member's heartbeat
  interval (session/3 here: it learns of the revocation on its next heartbeat).
* ``rebalance_crash_ms`` — a member running in a subprocess is ``kill -9``-ed: time until the
  survivor owns all 6 partitions. Dominated by the session timeout (``SESSION_MS``), which is
  reported with the figure; the rest is detection (controller period ≤ 250 ms) + one heartbeat.
* ``join_settle_ms`` — three members (three ``AsyncConsumer`` in this one process, default
  session timeout and controller heartbeat interval) start at once in a fresh group on the
  6-partition topic: time from their start until every member holds its final assignment
  (2 + 2 + 2) and a ``poll()`` has returned records of each of its partitions since they were
  assigned to it. ``python -m bench.bench_groups settle [RUNS]`` measures only this figure.
* ``commit_per_s`` — OFFSET_COMMIT throughput: 8 members (8 groups) in one process, each
  committing one partition's offset in a loop (acks=all on an RF-3 ``__consumer_offsets``).
* ``commit_p50_ms`` / ``commit_p99_ms`` — latency of a member's ``commit()``, one at a time.

Each rebalance figure is the median of ``max(runs, 10)`` rebalances.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import rafka.client.groups  # noqa: F401  (registers the group coordinator of AsyncConsumer)
import trio
from rafka.client.aio.consumer import AsyncConsumer
from rafka.client.sync import Admin, Producer
from rafka.client.types import TopicPartition

from bench.cluster import cluster

SESSION_MS = 1500
TOPIC = "gbench"
PARTITIONS = 6
ROOT = Path(__file__).resolve().parents[1]

_VICTIM = """
import sys, time
sys.path.insert(0, sys.argv[1])
from rafka.client.sync import Consumer
owned = set()
def assigned(tps):
    owned.update(tps); print("owned", len(owned), flush=True)
def revoked(tps):
    owned.difference_update(tps); print("owned", len(owned), flush=True)
with Consumer(sys.argv[3], bootstrap_servers=sys.argv[2], group_id=sys.argv[4],
              session_timeout_ms=int(sys.argv[5]), enable_auto_commit=False,
              on_partitions_assigned=assigned, on_partitions_revoked=revoked,
              on_partitions_lost=revoked, consumer_timeout_ms=200) as c:
    while True:
        for _ in c:
            pass
"""


class Member:
    """An in-process AsyncConsumer in a group; ``owned`` follows the rebalance callbacks."""

    def __init__(self, bootstrap: str, group: str, session_ms: int | None = SESSION_MS) -> None:
        self.owned: set[TopicPartition] = set()
        self.fetched: set[TopicPartition] = set()  # owned partitions a poll returned records of
        self.changed = trio.Event()
        session = {} if session_ms is None else {"session_timeout_ms": session_ms}
        self.consumer = AsyncConsumer(
            TOPIC, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
            auto_offset_reset="earliest", on_partitions_assigned=self._add,
            on_partitions_revoked=self._remove, on_partitions_lost=self._remove, **session)

    def _add(self, tps: set[TopicPartition]) -> None:
        self.owned |= tps
        self.fetched -= tps
        self.changed.set()

    def _remove(self, tps: set[TopicPartition]) -> None:
        self.owned -= tps
        self.fetched -= tps
        self.changed.set()

    async def wait_owned(self, n: int) -> None:
        while len(self.owned) != n:
            self.changed = trio.Event()
            await self.changed.wait()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self.stopping = trio.Event()
        self.stopped = trio.Event()
        try:
            async with self.consumer:  # leaves the group on the way out
                task_status.started()
                while not self.stopping.is_set():  # poll, as an application does
                    got = await self.consumer.poll(timeout_ms=100)
                    if got.keys() - self.fetched:
                        self.fetched |= got.keys() & self.owned
                        self.changed.set()
        finally:
            self.stopped.set()

    async def stop(self) -> None:
        self.stopping.set()
        await self.stopped.wait()


async def _rebalances(bootstrap: str, n: int) -> tuple[list[float], list[float]]:
    join_ms: list[float] = []
    crash_ms: list[float] = []
    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            a = Member(bootstrap, "rebalance")
            await nursery.start(a.run)
            await a.wait_owned(PARTITIONS)
            for _ in range(n):
                # join: B starts; both converge to 3 + 3
                b = Member(bootstrap, "rebalance")
                t0 = time.perf_counter()
                await nursery.start(b.run)
                await b.wait_owned(PARTITIONS // 2)
                await a.wait_owned(PARTITIONS // 2)
                join_ms.append((time.perf_counter() - t0) * 1000)
                await b.stop()  # B leaves cleanly
                await a.wait_owned(PARTITIONS)
                # crash: a subprocess member takes half, then is killed -9
                victim = subprocess.Popen(
                    [sys.executable, "-c", _VICTIM, str(ROOT), bootstrap, TOPIC, "rebalance",
                     str(SESSION_MS)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                try:
                    await a.wait_owned(PARTITIONS // 2)
                    await _victim_owns(victim, PARTITIONS // 2)
                    os.kill(victim.pid, signal.SIGKILL)
                    t0 = time.perf_counter()
                    await a.wait_owned(PARTITIONS)
                    crash_ms.append((time.perf_counter() - t0) * 1000)
                finally:
                    victim.kill()
                    victim.wait()
            await a.stop()
    return join_ms, crash_ms


async def _settles(bootstrap: str, runs: int) -> list[float]:
    """``join_settle_ms``: 3 members start at once, until 2 + 2 + 2 each fetched from."""
    out: list[float] = []
    share = PARTITIONS // 3
    for run in range(runs):
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                ms = [Member(bootstrap, f"settle-{os.getpid()}-{run}", session_ms=None)
                      for _ in range(3)]
                t0 = time.perf_counter()
                for m in ms:
                    nursery.start_soon(m.run)
                while not all(len(m.owned) == share and m.owned <= m.fetched for m in ms):
                    await _any_change(ms)
                out.append((time.perf_counter() - t0) * 1000)
                for m in ms:
                    await m.stop()
    return out


async def _any_change(ms: list[Member]) -> None:
    async with trio.open_nursery() as nursery:
        for m in ms:
            m.changed = trio.Event()

            async def one(m: Member = m) -> None:
                await m.changed.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(one)


async def _victim_owns(victim: subprocess.Popen[str], n: int) -> None:
    assert victim.stdout is not None

    def read() -> None:
        assert victim.stdout is not None
        for line in victim.stdout:
            if line.strip() == f"owned {n}":
                return
        raise RuntimeError("the victim consumer exited")

    await trio.to_thread.run_sync(read)


async def _commits(bootstrap: str, seconds: float = 3.0, members: int = 8) -> tuple[float, list[float]]:
    """(commits/s with ``members`` concurrent committers, latencies of one-at-a-time commits)."""
    lat: list[float] = []
    count = 0
    async with trio.open_nursery() as nursery:
        # a default (45 s) session: a loaded 2-core box must not expire the committers
        ms = [Member(bootstrap, f"commit-{i}", session_ms=45_000) for i in range(members)]
        for m in ms:
            await nursery.start(m.run)
        for m in ms:
            await m.wait_owned(PARTITIONS)
        tp = TopicPartition(TOPIC, 0)
        for i in range(300):  # latency: one commit at a time
            t0 = time.perf_counter()
            await ms[0].consumer.commit({tp: i})
            lat.append((time.perf_counter() - t0) * 1000)

        async def loop(m: Member, until: float) -> None:
            nonlocal count
            i = 0
            while time.perf_counter() < until:
                i += 1
                await m.consumer.commit({tp: i})
                count += 1

        t0 = time.perf_counter()
        async with trio.open_nursery() as inner:
            for m in ms:
                inner.start_soon(loop, m, t0 + seconds)
        rate = count / (time.perf_counter() - t0)
        for m in ms:
            await m.stop()
    return rate, lat


def _fig(values: list[float], unit: str, **extra: Any) -> dict[str, Any]:
    return {"median": statistics.median(values), "unit": unit, "runs": values, **extra}


def _setup(bootstrap: str) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 3)
    with Producer(bootstrap) as p:
        for i in range(600):
            p.send(TOPIC, value=b"x", partition=i % PARTITIONS)
        p.flush()


def settle(runs: int = 7) -> dict[str, Any]:
    """Only ``join_settle_ms`` (median of ``max(runs, 5)``), on its own throwaway cluster."""
    with cluster(nodes=3) as bootstrap:
        _setup(bootstrap)
        return {"join_settle_ms": _fig(trio.run(_settles, bootstrap, max(runs, 5)), "ms",
                                       members=3, load=os.getloadavg()[0])}


def run(runs: int = 3) -> dict[str, Any]:
    n = max(runs, 10)
    with cluster(nodes=3) as bootstrap:
        _setup(bootstrap)
        settle_ms = trio.run(_settles, bootstrap, max(runs, 5))
        join_ms, crash_ms = trio.run(_rebalances, bootstrap, n)
        rates, p50, p99 = [], [], []
        for _ in range(runs):
            rate, lat = trio.run(_commits, bootstrap)
            lat.sort()
            rates.append(rate)
            p50.append(lat[len(lat) // 2])
            p99.append(lat[min(len(lat) - 1, int(len(lat) * 0.99))])
    return {
        "join_settle_ms": _fig(settle_ms, "ms", members=3, load=os.getloadavg()[0]),
        "rebalance_join_ms": _fig(join_ms, "ms", session_timeout_ms=SESSION_MS),
        "rebalance_crash_ms": _fig(crash_ms, "ms", session_timeout_ms=SESSION_MS),
        "commit_per_s": _fig(rates, "commits/s", members=8),
        "commit_p50_ms": _fig(p50, "ms"),
        "commit_p99_ms": _fig(p99, "ms"),
    }


if __name__ == "__main__":
    import json

    if sys.argv[1:2] == ["settle"]:
        print(json.dumps(settle(int(sys.argv[2]) if len(sys.argv) > 2 else 7), indent=1))
    else:
        print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 3), indent=1))
