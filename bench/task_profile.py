"""Per trio task: steps, their CPU and the loop's I/O waits per single-record acks=all produce.

Theory of operation: start a 3-node ``rafka cluster up`` (RF 3, ``min.insync.replicas=2``)
whose node processes load ``bench/trio_task_profile/sitecustomize.py`` (an instrument that
snapshots per-task counters to a file every second), take snapshots around a 4 s idle window
and around ``n`` produces sent one at a time, and print per node (leader / followers) the
idle-subtracted steps and thread CPU per produce of each task, and the scheduler's I/O waits
(those that may block: the loop's wake-ups).

``python -m bench.task_profile [-n 300] [key=value broker settings ...]``
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from rafka.client import Producer

from bench.bench_replication import VALUE, _cluster, _create, _leader_and_isr
from rafka.cluster import load_cluster

TOPIC = "path"
SITE = Path(__file__).parent / "trio_task_profile"


def _snap(out: Path, pids: list[int]) -> dict[int, dict[str, Any]]:
    snaps: dict[int, dict[str, Any]] = {}
    for p in pids:
        try:
            snaps[p] = json.loads((out / f"{p}.json").read_text())
        except (OSError, ValueError):
            snaps[p] = {"steps": {}, "cpu": {}, "io_waits": 0, "io_blocking": 0}
    return snaps


def _diff(a: dict[int, dict[str, Any]], b: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {p: {"steps": {k: v - a[p]["steps"].get(k, 0) for k, v in b[p]["steps"].items()},
                "cpu": {k: v - a[p]["cpu"].get(k, 0.0) for k, v in b[p]["cpu"].items()},
                "io_waits": b[p]["io_waits"] - a[p]["io_waits"],
                "io_blocking": b[p]["io_blocking"] - a[p]["io_blocking"]} for p in b}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("settings", nargs="*", help="broker settings key=value")
    args = ap.parse_args()
    conf = dict(kv.split("=", 1) for kv in args.settings)
    out = Path(tempfile.mkdtemp(prefix="rafka-task-profile-"))
    os.environ["RAFKA_TASK_PROFILE_DIR"] = str(out)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")]))
    n = args.n
    with _cluster(broker_config=conf or None) as st:
        _create(st["bootstrap"], TOPIC, 1)
        leader, _ = _leader_and_isr(st["bootstrap"], TOPIC)
        nodes = load_cluster(st["data_dir"])["nodes"]
        pids = [node.pid for node in nodes if node.pid]
        role = {node.pid: ("leader" if node.id == leader else f"follower{node.id}") for node in nodes}
        with Producer(bootstrap_servers=st["bootstrap"], acks="all", enable_idempotence=True,
                      linger_ms=0) as pr:
            for _ in range(50):
                pr.send(TOPIC, value=VALUE, partition=0).result(timeout=30)
            time.sleep(1.2)
            s0, t0 = _snap(out, pids), time.monotonic()
            time.sleep(4.0)
            s1, idle_s = _snap(out, pids), time.monotonic() - t0
            t1 = time.monotonic()
            for _ in range(n):
                pr.send(TOPIC, value=VALUE, partition=0).result(timeout=30)
            time.sleep(1.2)  # one more snapshot written after the last produce
            busy_s, s2 = time.monotonic() - t1, _snap(out, pids)
    idle, busy = _diff(s0, s1), _diff(s1, s2)
    f = busy_s / idle_s
    for p in pids:
        b, i = busy[p], idle[p]
        print(f"== {role[p]}: loop I/O waits per produce "
              f"{(b['io_waits'] - i['io_waits'] * f) / n:.2f}, that may block "
              f"{(b['io_blocking'] - i['io_blocking'] * f) / n:.2f}")
        rows = []
        for k, v in b["steps"].items():
            steps = (v - i["steps"].get(k, 0) * f) / n
            cpu_us = (b["cpu"][k] - i["cpu"].get(k, 0.0) * f) / n * 1e6
            if steps >= 0.05:
                rows.append((steps, cpu_us, k))
        for steps, cpu_us, k in sorted(rows, reverse=True)[:12]:
            print(f"  {steps:5.2f} steps {cpu_us:6.0f} µs  {k[-90:]}")


if __name__ == "__main__":
    main()
