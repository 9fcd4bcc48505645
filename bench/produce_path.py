"""Where a single-record acks=all RF 3 produce's wake-ups go: per node, per thread (issue 26).

Theory of operation: start a 3-node ``rafka cluster up`` (RF 3, ``min.insync.replicas=2``,
optional extra broker settings), send ``n`` single-record acks=all produces one at a time to
partition 0, and read every node thread's ``voluntary_ctxt_switches`` (a blocking wait that
returned: a wake-up) from ``/proc/<pid>/task/*/status`` before and after, with the same
threads' counts over an idle window of the same length subtracted. Threads are named by role:
``trio`` (the main thread, which runs the event loop), ``worker`` (trio's cached worker
threads: fsync), and the rest by their OS name (pysyncobj's tick thread, the metrics server).
Alongside: ``CpuMeter``'s whole-cluster CPU, wake-ups and syscalls per produce.

``python -m bench.produce_path [-n 500] [--set key=value ...] [--ab key=value ...] [--pairs P]
[--concurrent]``: with ``--ab`` runs the A (without) / B (with those settings) clusters in ABBA
order, ``P`` times, one run; ``--concurrent`` measures 32 producers in flight instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from rafka.client import Producer

from bench.bench_replication import (
    KEYS,
    VALUE,
    _broker_cpu_concurrent,
    _cluster,
    _create,
    _leader_and_isr,
)
from bench.broker_cpu import CpuMeter, cluster_pids_and_metrics
from rafka.cluster import load_cluster

TOPIC = "path"


def _thread_switches(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            comm = (task / "comm").read_text().strip()
            n = 0
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    n = int(line.split()[1])
        except (OSError, ValueError):
            continue
        role = "trio" if int(task.name) == pid else comm
        out[role] = out.get(role, 0) + n
    return out


def _snapshot(pids: list[int]) -> list[dict[str, int]]:
    return [_thread_switches(p) for p in pids]


def _delta(a: list[dict[str, int]], b: list[dict[str, int]]) -> list[dict[str, int]]:
    return [{k: v - x.get(k, 0) for k, v in y.items()} for x, y in zip(a, b, strict=True)]


def measure(n: int, broker_config: dict[str, str] | None, concurrent: bool = False) -> dict[str, Any]:
    with _cluster(broker_config=broker_config) as st:
        _create(st["bootstrap"], TOPIC, 1)
        if concurrent:  # bench_replication's 32 producers in flight, CPU per produce request
            fig = _broker_cpu_concurrent(st, TOPIC)
            fig["per_thread_wakeups"] = {}
            fig["load"] = os.getloadavg()[0]
            return fig
        leader, _isr = _leader_and_isr(st["bootstrap"], TOPIC)
        pids, urls = cluster_pids_and_metrics(st["data_dir"])
        ids = [node.id for node in load_cluster(st["data_dir"])["nodes"] if node.pid]
        meter = CpuMeter(pids, urls)
        with Producer(bootstrap_servers=st["bootstrap"], acks="all", enable_idempotence=True,
                      linger_ms=0) as p:
            for _ in range(50):
                p.send(TOPIC, value=VALUE, partition=0).result(timeout=30)
            s0 = _snapshot(pids)
            t0 = time.perf_counter()
            meter.idle(2.0)
            idle = _delta(s0, _snapshot(pids))
            idle_s = time.perf_counter() - t0
            s1 = _snapshot(pids)
            meter.start()
            t1 = time.perf_counter()
            for i in range(n):
                p.send(TOPIC, value=VALUE, key=KEYS[i & 1023], partition=0).result(timeout=30)
            busy_s = time.perf_counter() - t1
            fig = meter.stop(n)
            busy = _delta(s1, _snapshot(pids))
        per_node: dict[str, dict[str, float]] = {}
        for nid, b, i in zip(ids, busy, idle, strict=True):
            role = "leader" if nid == leader else f"follower{nid}"
            per_node[role] = {k: round((v - i.get(k, 0) * busy_s / idle_s) / n, 2)
                              for k, v in sorted(b.items())}
        fig["per_thread_wakeups"] = per_node
        fig["load"] = os.getloadavg()[0]
        return fig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=500)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--ab", action="append", default=[])
    ap.add_argument("--pairs", type=int, default=1, help="ABBA blocks")
    ap.add_argument("--concurrent", action="store_true",
                    help="32 producers in flight (bench_replication's) instead of one at a time")
    args = ap.parse_args()
    base = dict(kv.split("=", 1) for kv in args.set)
    if not args.ab:
        print(json.dumps(measure(args.n, base or None, args.concurrent), indent=1))
        return
    b_conf = {**base, **dict(kv.split("=", 1) for kv in args.ab)}
    res: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    for _ in range(args.pairs):
        for which in "ABBA":
            fig = measure(args.n, b_conf if which == "B" else (base or None), args.concurrent)
            res[which].append(fig)
            print(which, json.dumps({k: fig[k] for k in ("cpu_us", "wakeups", "syscalls", "ops_per_s", "load")}
                                    | {"per_thread": fig["per_thread_wakeups"]}), flush=True)
    for which in "AB":
        rs = res[which]
        sys_calls = (statistics.median(r["syscalls"] for r in rs)
                     if rs[0]["syscalls"] is not None else None)
        print(which, f"median cpu_us {statistics.median(r['cpu_us'] for r in rs):.0f}"
              f" wakeups {statistics.median(r['wakeups'] for r in rs):.1f}"
              f" ops/s {statistics.median(r['ops_per_s'] for r in rs):.0f}"
              f" syscalls {sys_calls} load {[round(r['load'], 1) for r in rs]}")


if __name__ == "__main__":
    main()
