"""Unauthenticated load (issue 24): an authorized producer's p99 under slowloris and under a
connection flood, against the same node idle, in one run.

One node (``cluster up``, ``max.connections`` = ``MAX_CONNECTIONS``, ``connections.max.idle.ms``
= 4 s). A producer connects first (so a flood cannot take its slot) and sends ``SENDS``
records of 200 B with acks=all one at a time (``send().result()``), three times per
repetition, interleaved so a load change on the shared machine moves all three alike:

* ``idle``: nothing else;
* ``slowloris``: ``SLOW_CONNS`` connections, each declaring a 100 MiB frame and then sending
  one byte every ``SLOW_INTERVAL_S`` (each is closed by the idle timeout and reopened); both attacks run in a process of their own;
* ``flood``: 10 × ``max.connections`` connection attempts, held open (the node refuses those
  past its limit with ``TOO_MANY_CONNECTIONS``) and reopened as they close.

Figures (medians of ``runs``): ``p99_idle_ms``, ``p99_slowloris_ms``, ``p99_flood_ms`` and the
per-repetition ratios ``slowloris_ratio`` / ``flood_ratio`` (target ≤ 3), plus the node's RSS
growth during the attacks (``rss_growth_mib``).

``python -m bench.bench_preauth [runs]`` runs it alone.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import socket
import statistics
import struct
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rafka.client import Admin, Producer

from bench.bench_foundation import _fig
from bench.cluster import cluster_dir

__all__ = ["run"]

MAX_CONNECTIONS = 100
SENDS = 400
SLOW_CONNS = 200
SLOW_INTERVAL_S = 2.0
VALUE = b"v" * 200


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return -1.0


def _p99_ms(p: Producer, topic: str) -> float:
    lat = []
    for _ in range(SENDS):
        t0 = time.perf_counter()
        p.send(topic, value=VALUE).result(timeout=30)
        lat.append((time.perf_counter() - t0) * 1000)
    lat.sort()
    return lat[int(len(lat) * 0.99) - 1]


def _connect(addr: tuple[str, int]) -> socket.socket | None:
    try:
        return socket.create_connection(addr, timeout=2)
    except OSError:
        return None


def _slowloris(addr: tuple[str, int], stop: Any) -> None:
    socks: list[socket.socket | None] = [None] * SLOW_CONNS
    while not stop.is_set():
        for i in range(SLOW_CONNS):
            s = socks[i]
            try:
                if s is None:
                    s = socks[i] = _connect(addr)
                    if s is not None:
                        s.sendall(struct.pack(">I", 100 * 1024 * 1024 - 1))
                elif s is not None:
                    s.sendall(b"\0")
            except OSError:
                if s is not None:
                    s.close()
                socks[i] = None
        stop.wait(SLOW_INTERVAL_S)
    for s in socks:
        if s is not None:
            s.close()


def _flood(addr: tuple[str, int], stop: Any) -> None:
    socks: list[socket.socket] = []
    while not stop.is_set():
        while len(socks) < 10 * MAX_CONNECTIONS and not stop.is_set():
            s = _connect(addr)
            if s is not None:
                s.setblocking(False)
                socks.append(s)
        kept = []
        for s in socks:  # drop those the node closed (refused), reopen them next round
            try:
                if s.recv(4096) == b"":
                    s.close()
                    continue
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                continue
            kept.append(s)
        socks = kept
        stop.wait(0.5)
    for s in socks:
        s.close()


@contextlib.contextmanager
def _attack(fn: Callable[[tuple[str, int], Any], None], addr: tuple[str, int]) -> Iterator[None]:
    """Run ``fn`` in its own process (not a thread: it must not compete with the measured
    producer for this process's GIL) while the body measures."""
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    proc = ctx.Process(target=fn, args=(addr, stop), daemon=True)
    proc.start()
    try:
        time.sleep(3.0)  # let it build up
        yield
    finally:
        stop.set()
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join()


def run(runs: int = 3) -> dict[str, Any]:
    got: dict[str, list[float]] = {k: [] for k in ("idle", "slowloris", "flood", "slow_r", "flood_r", "rss")}
    cfg = {"max.connections": str(MAX_CONNECTIONS), "connections.max.idle.ms": "4000"}
    with cluster_dir(1, broker_config=cfg) as (bootstrap, data, port):
        pid = json.loads((data / "cluster.json").read_text())["nodes"][0]["pid"]
        addr = ("127.0.0.1", port)
        with Admin(bootstrap_servers=bootstrap) as admin:
            admin.create_topic("pa", partitions=1, replication_factor=1)
        with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=0) as p:
            p.send("pa", value=VALUE).result(timeout=30)  # connected before any attack
            for _ in range(runs):
                idle = _p99_ms(p, "pa")
                rss0 = _rss_mib(pid)
                with _attack(_slowloris, addr):
                    slow = _p99_ms(p, "pa")
                with _attack(_flood, addr):
                    flood = _p99_ms(p, "pa")
                got["rss"].append(_rss_mib(pid) - rss0)
                got["idle"].append(idle)
                got["slowloris"].append(slow)
                got["flood"].append(flood)
                got["slow_r"].append(slow / idle)
                got["flood_r"].append(flood / idle)
    load = f"1 node, {SENDS} sequential acks=all sends of 200 B per figure"
    return {
        "p99_idle_ms": _fig(got["idle"], "ms", load=load),
        "p99_slowloris_ms": _fig(got["slowloris"], "ms", load=f"{load}; {SLOW_CONNS} slowloris "
                                 f"connections declaring 100 MiB, a byte every {SLOW_INTERVAL_S:.0f} s"),
        "p99_flood_ms": _fig(got["flood"], "ms", load=f"{load}; {10 * MAX_CONNECTIONS} connections "
                             f"held against max.connections={MAX_CONNECTIONS}"),
        "slowloris_ratio": _fig(got["slow_r"], "x", target=3.0, lower_is_better=True),
        "flood_ratio": _fig(got["flood_r"], "x", target=3.0, lower_is_better=True),
        "rss_growth_mib": _fig(got["rss"], "MiB"),
    }


if __name__ == "__main__":
    out = run(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
    for name, fig in out.items():
        print(f"{name:20} {statistics.median(fig['runs']):>10,.2f} {fig['unit']:4} "
              f"{[round(v, 2) for v in fig['runs']]}")
