"""A/B of the produce latency figure alone between two checkouts (ABBA, one window).

``python bench/ab_latency.py BASE_DIR [ROUNDS]`` (from the project root; BASE_DIR another
checkout with its own ``make install``). Each round, in ABBA order, runs in each tree's own
python: a fresh one-node cluster, topic ``lat``, then three times ``bench_foundation.
_latencies_ms`` (5k rec/s for 3 s, acks=1, linger 0) — p50 and p99 of each. The whole-module
A/B (``ab_trees.py``) runs the latency figure once per round among many heavier ones, so one
busy moment moves it by 1.7×; this isolates it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

NEW = Path(__file__).resolve().parent.parent
CODE = r'''
import json, sys
sys.path.insert(0, ".")
from bench.cluster import cluster
from bench import bench_foundation as bf
from rafka.client import Admin
out = []
with cluster(nodes=1) as bootstrap:
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topic("lat", partitions=1, replication_factor=1)
    for _ in range(3):
        lat = sorted(bf._latencies_ms(bootstrap, "lat"))
        out.append((lat[len(lat) // 2], lat[int(len(lat) * 0.99)]))
print(json.dumps(out))
'''


def main(argv: list[str]) -> int:
    trees = {"base": Path(argv[0]).resolve(), "new": NEW}
    rounds = int(argv[1]) if len(argv) > 1 else 3
    got: dict[str, list[tuple[float, float]]] = {"base": [], "new": []}
    for r in range(rounds):
        for side in (("base", "new") if r % 2 == 0 else ("new", "base")):
            py = trees[side] / ".venv" / "bin" / "python"
            out = subprocess.run([str(py), "-c", CODE], cwd=trees[side], capture_output=True,
                                 text=True, check=True)
            runs = json.loads(out.stdout.strip().splitlines()[-1])
            got[side] += [tuple(x) for x in runs]
            print(f"round {r} {side:4} {runs}", flush=True)
    for i, name in enumerate(("p50", "p99")):
        b = statistics.median(x[i] for x in got["base"])
        n = statistics.median(x[i] for x in got["new"])
        print(f"{name}: base {b:.2f} ms, new {n:.2f} ms, new/base {n / b:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
