"""Interleaved A/B of the foundation bench's consumer read between two source trees.

``python bench/ab_consume.py BASE_DIR [NEW_DIR] [--pairs 6] [--reads 3] [--columnar]``
(the project's .venv python; NEW_DIR defaults to this tree). A tree is a copy of the repository
at some commit, e.g. ``git archive <rev> | tar -x -C BASE_DIR``, with its folders linked under
``rafka/`` (``for f in kraft metadata log broker client spark_source chaos_tests security; do
ln -s ../$f BASE_DIR/rafka/$f; done``) and its C codec built in place (``python setup.py
build_ext --inplace`` there).

Theory of operation: every process of a side runs with that tree as its working directory and
``PYTHONPATH`` (the tree's ``rafka`` package wins over the installed one), so each side gets its
own single-node cluster running its own broker code, filled by its own producer with the bench's
topic (3 partitions, 300k records of 200 B, 16 B keys). Then, pair by pair in ABBA order, a
fresh child process of each side does one warm-up read and ``--reads`` reads through
``bench_foundation._consumer_rate`` (``poll(1000, 100_000)`` until 300k records, or
``poll_batch``), reporting per read the rate, the client's CPU per record (``process_time``,
all threads) and the broker's (``/proc/<pid>/schedstat``: nanoseconds on a CPU, all threads).
Printed: each side's medians per pair, the load average around it, the medians over the pairs
and the median of the per-pair B/A ratios — the figure to trust on a shared machine, where the
load moves between pairs far more than a change moves the per-record cost.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

_CHILD = r"""
import json, os, signal, sys
from pathlib import Path
from bench import bench_foundation as bf
from bench.cluster import cluster_dir
from rafka.cluster import load_cluster
from rafka.client import Admin

def broker_ns(pid):
    return sum(int(Path(f"/proc/{pid}/task/{t}/schedstat").read_text().split()[0])
               for t in os.listdir(f"/proc/{pid}/task"))

mode, out = sys.argv[1], Path(sys.argv[2])
if mode == "serve":
    # held, not delivered, until sigwait: the cluster is stopped on the way out of the with
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    with cluster_dir(1) as (bootstrap, data, _port):
        with Admin(bootstrap_servers=bootstrap) as a:
            a.create_topic("perf", partitions=3, replication_factor=1)
        bf._producer_rate(bootstrap, "perf", bf.N_RECORDS)
        pid = load_cluster(data)["nodes"][0].pid
        out.write_text(json.dumps({"bootstrap": bootstrap, "pid": pid}))
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
else:
    bootstrap, pid, reads, columnar = sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1"
    bf._consumer_rate(bootstrap, "perf", 3, bf.N_RECORDS, columnar=columnar)  # warm-up
    res = []
    for _ in range(reads):
        b0 = broker_ns(pid)
        rate, cpu = bf._consumer_rate(bootstrap, "perf", 3, bf.N_RECORDS, columnar=columnar)
        res.append((rate, cpu, (broker_ns(pid) - b0) / bf.N_RECORDS / 1e3))
    out.write_text(json.dumps(res))
"""


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _run(args: argparse.Namespace) -> None:
    trees = {"A": Path(args.base).resolve(), "B": Path(args.new).resolve()}
    tmp = Path(tempfile.mkdtemp(prefix="rafka-ab-consume-"))
    child = tmp / "child.py"
    child.write_text(_CHILD)
    env = {k: dict(os.environ, PYTHONPATH=str(t)) for k, t in trees.items()}
    servers, info = {}, {}
    try:
        for k, tree in trees.items():
            ready = tmp / f"serve-{k}.json"
            servers[k] = subprocess.Popen([sys.executable, str(child), "serve", str(ready)],
                                          cwd=tree, env=env[k])
            while not (ready.exists() and ready.read_text()):
                if servers[k].poll() is not None:
                    raise SystemExit(f"{k}: the cluster of {tree} did not start")
                time.sleep(0.5)
            info[k] = json.loads(ready.read_text())
        res: dict[str, list[list[float]]] = {"A": [], "B": []}
        for p in range(args.pairs):
            for k in ("AB" if p % 2 == 0 else "BA"):
                before, out = _load(), tmp / f"read-{k}.json"
                subprocess.run([sys.executable, str(child), "read", str(out), info[k]["bootstrap"],
                                str(info[k]["pid"]), str(args.reads), "1" if args.columnar else "0"],
                               cwd=trees[k], env=env[k], check=True, timeout=600)
                reads = json.loads(out.read_text())
                med = [statistics.median(r[i] for r in reads) for i in range(3)]
                res[k].append(med)
                print(f"pair {p} {k}: {med[0] / 1e6:.3f}M rec/s, client {med[1]:.3f} µs/rec, "
                      f"broker {med[2]:.3f} µs/rec (reads {[round(r[0] / 1e6, 2) for r in reads]}; "
                      f"load {before:.2f} -> {_load():.2f})", flush=True)
    finally:
        for s in servers.values():
            s.terminate()
            s.wait(timeout=120)
    for k in "AB":
        m = [statistics.median(x[i] for x in res[k]) for i in range(3)]
        print(f"{k} ({trees[k]}): medians {m[0] / 1e6:.3f}M rec/s, client {m[1]:.3f} µs/rec, "
              f"broker {m[2]:.3f} µs/rec")
    for i, name in enumerate(("rate", "client CPU per record", "broker CPU per record")):
        ratios = [b[i] / a[i] for a, b in zip(res["A"], res["B"], strict=True)]
        print(f"B/A {name}: median of per-pair ratios {statistics.median(ratios):.3f} "
              f"({', '.join(f'{r:.2f}' for r in ratios)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", help="tree A (the base)")
    ap.add_argument("new", nargs="?", default=str(HERE), help="tree B (default: this tree)")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--reads", type=int, default=3, help="measured reads per side and pair")
    ap.add_argument("--columnar", action="store_true", help="poll_batch instead of poll")
    _run(ap.parse_args())


if __name__ == "__main__":
    main()
