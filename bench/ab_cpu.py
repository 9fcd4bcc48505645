"""A/B of the broker's CPU per produce request between two checkouts, ABBA, fresh clusters.

``python bench/ab_cpu.py BASE_DIR [--pairs N] [--producers P] [--seconds S] [--partitions K]``
(from the project root; BASE_DIR another checkout with its own ``make install``, as for
``bench/ab_trees.py``). ``--partitions K`` creates both topics with K partitions and still
produces to partition 0 only: each follower's fetch then carries every partition its leader
leads, as in a cluster of many partitions, while the work per request stays the same.

Narrower and quicker than ``ab_trees.py`` (~25 s a run instead of ~2 min): each run starts a
fresh 3-node cluster of one tree (RF 3, ``min.insync.replicas=2``) and measures, with that
tree's own ``bench_replication`` functions and ``CpuMeter`` (idle CPU subtracted), the cluster's
CPU per single-record acks=all produce request with ``P`` producers in flight, the leader's
share of it, and the same request sent one at a time. The runs alternate base, new, new, base,
… so each pair shares the moment's load; the summary gives each side's median, the ratio of
medians and the median of the per-pair ratios, with the load average beside every run.

The child run (``--one``) is this file, executed by the other tree's python with that tree's
directory first on ``sys.path``, so the base needs no copy of this script: only the
``bench_replication`` functions it has had since issue 26 (``_cluster``, ``_create``,
``_broker_cpu_concurrent``, ``_broker_cpu``). Used for the A/Bs of docs/performance.md from
session 24 on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

NEW = Path(__file__).resolve().parent.parent
FIGURES = ("inflight_us", "inflight_leader_us", "single_us", "inflight_per_s")


def _one(producers: int, seconds: float, partitions: int = 1) -> dict[str, Any]:
    sys.path.insert(0, os.getcwd())  # the tree being measured, not the one holding this file
    import bench.bench_replication as br

    br.CONCURRENT_S = seconds
    br.CONCURRENT_PRODUCERS = producers
    with br._cluster() as st:
        br._create(st["bootstrap"], "ab-inflight", partitions, 3, {"min.insync.replicas": "2"})
        br._create(st["bootstrap"], "ab-single", partitions, 3, {"min.insync.replicas": "2"})
        time.sleep(1)
        c = br._broker_cpu_concurrent(st, "ab-inflight")
        s, _ = br._broker_cpu(st, "ab-single", "ab-single")
    return {"inflight_us": c["cpu_us"], "inflight_leader_us": c["busiest_node_us"],
            "inflight_per_s": c["ops_per_s"], "single_us": s["cpu_us"]}


def _run(tree: Path, producers: int, seconds: float, partitions: int) -> dict[str, Any]:
    out = subprocess.run([str(tree / ".venv" / "bin" / "python"), str(Path(__file__).resolve()),
                          "--one", "--producers", str(producers), "--seconds", str(seconds),
                          "--partitions", str(partitions)],
                         cwd=tree, check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _load() -> float:
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python bench/ab_cpu.py")
    ap.add_argument("base", type=Path, nargs="?")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--producers", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=6.0, help="in-flight window per run")
    ap.add_argument("--partitions", type=int, default=1, help="partitions of each topic")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(_one(a.producers, a.seconds, a.partitions)))
        return 0
    if a.base is None:
        ap.error("BASE_DIR is required")
    trees = {"base": a.base.resolve(), "new": NEW}
    got: dict[str, list[dict[str, Any]]] = {"base": [], "new": []}
    for i in range(2 * a.pairs):
        side = ("base", "new", "new", "base")[i % 4]
        before = _load()
        r = _run(trees[side], a.producers, a.seconds, a.partitions)
        got[side].append(r)
        print(f"{side:4} load {before:.2f} -> {_load():.2f} " +
              " ".join(f"{k} {r[k]:.1f}" for k in FIGURES), flush=True)
    print(f"\n{'figure':20} {'base':>10} {'new':>10} {'new/base':>9} {'pairs':>7}  lower in")
    for k in FIGURES:
        b = [x[k] for x in got["base"]]
        w = [x[k] for x in got["new"]]
        pairs = [y / x for x, y in zip(b, w, strict=True) if x]
        mb, mw = statistics.median(b), statistics.median(w)
        lower = sum(p < 1 for p in pairs)
        print(f"{k:20} {mb:10.1f} {mw:10.1f} {mw / mb:9.3f} {statistics.median(pairs):7.3f}"
              f"  {lower} of {len(pairs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
