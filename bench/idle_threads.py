"""Idle CPU of a 3-node ``cluster up`` per thread: which thread of which node burns it (issue 26).

Theory of operation: ``bench_floor``'s ``idle_cluster_cpu_ms_per_s`` gives one number for the
three processes; to see whether the trio thread or pysyncobj's tick thread spends it, this
starts a cluster from the current checkout, lets it settle, and reads every thread's CPU
(the run time in ns of ``/proc/<pid>/task/<tid>/schedstat``; ``utime + stime`` of ``stat``,
in 10 ms clock ticks, where there is no schedstat) and voluntary context switches before and
after a quiet window. (Clock ticks put a 0.5 ms/s step on a 20 s window: too coarse for a
change worth 1 ms/s across three nodes.) Prints the total and one line per thread that spent any. For an A/B, run
it with each checkout's own ``.venv/bin/python``, alternating (ABBA), with the load beside it:

    .venv/bin/python -m bench.idle_threads [SETTLE_S [WINDOW_S]]     (defaults 12, 20)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rafka.cluster import cluster_down, cluster_up, free_port_block

_HZ = os.sysconf("SC_CLK_TCK")


def _thread_cpu_s(base: str) -> float:
    """CPU seconds of the thread at ``base`` (``/proc/<pid>/task/<tid>``): schedstat's ns run
    time, else stat's utime + stime in clock ticks."""
    try:
        with open(f"{base}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except OSError:
        with open(f"{base}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _HZ


def thread_counters(pid: int) -> dict[str, tuple[str, float, int]]:
    """tid -> (thread name, CPU seconds, voluntary context switches)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        base = f"/proc/{pid}/task/{tid}"
        try:
            cpu_s = _thread_cpu_s(base)
            with open(f"{base}/comm") as f:
                comm = f.read().strip()
            with open(f"{base}/status") as f:
                vol = next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
        except (OSError, StopIteration):
            continue
        out[tid] = (comm, cpu_s, vol)
    return out


def thread_rates(pids: list[int], window_s: float) -> list[tuple[int, str, str, float, float]]:
    """Sleep ``window_s`` and return (pid, tid, name, CPU ms/s, wake-ups/s) of every thread of
    ``pids`` over it; the main thread is named "main (trio)"."""
    before = {p: thread_counters(p) for p in pids}
    t0 = time.perf_counter()
    time.sleep(window_s)
    after = {p: thread_counters(p) for p in pids}
    took = time.perf_counter() - t0
    rows = []
    for p in pids:
        for tid, (comm, cpu, vol) in sorted(after[p].items()):
            _, cpu0, vol0 = before[p].get(tid, (comm, 0.0, 0))
            name = "main (trio)" if tid == str(p) else comm
            rows.append((p, tid, name, (cpu - cpu0) / took * 1e3, (vol - vol0) / took))
    return rows


def main(settle_s: float, window_s: float) -> None:
    data = Path(tempfile.mkdtemp(prefix="rafka-idle-"))
    try:
        state = cluster_up(data, 3, "127.0.0.1", free_port_block(3), echo=lambda _m: None)
        pids = [n.pid for n in state["nodes"] if n.pid]
        time.sleep(settle_s)
        rows = thread_rates(pids, window_s)
        total_cpu = sum(r[3] for r in rows)
        total_wake = sum(r[4] for r in rows)
        print(f"load {os.getloadavg()[0]:.2f}  idle 3-node cluster: {total_cpu:.1f} ms/s, "
              f"{total_wake:.0f} wake-ups/s over {window_s:.0f} s")
        for p, tid, name, cpu_ms, wakes in rows:
            if cpu_ms > 0.2 or wakes > 2:
                print(f"  node pid {p} thread {tid} {name:16s} {cpu_ms:6.1f} ms/s {wakes:6.1f} wake-ups/s")
    finally:
        with contextlib.suppress(Exception):
            cluster_down(data)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    args = [float(a) for a in sys.argv[1:3]]
    main(*(args + [12.0, 20.0][len(args):]))
