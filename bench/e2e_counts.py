"""End to end at linger 0 with what each record cost in messages and fsync rounds (issue 26).

``python -m bench.e2e_counts`` (from a tree with its own ``make install``; to compare two trees,
run it from each in ABBA order). Starts a fresh 3-node cluster (RF 3, ``min.insync.replicas``
2) with a 1-partition topic and runs ``bench_replication._e2e_latencies_ms`` at linger 0 for
3 s. Beside the end-to-end p50 / p99 it prints, per record produced, the requests the cluster
answered (``CpuMeter``, idle rate subtracted) and the log flush rounds of the three nodes
(``rafka_log_flush_duration_seconds_count``). So a latency change can be told apart from a
change in how often the followers fetch and fsync. Written in session 30 to test a guess
about the linger-0 reading of the parked-fetch change (docs/performance.md).
"""

from __future__ import annotations

import json
import statistics
import time

import bench.bench_replication as br
from bench.broker_cpu import CpuMeter, cluster_pids_and_metrics, metric_total

# the leaders' group-commit rounds only (as session 30 measured it), not bench.broker_cpu's
# FLUSH_ROUNDS (every node's rounds, followers' syncs too), which CpuMeter reports itself
LEADER_FLUSH_ROUNDS = "rafka_log_flush_duration_seconds_count"


def main() -> None:
    seconds = 3.0
    with br._cluster() as st:
        br._create(st["bootstrap"], "e2e", 1, 3, {"min.insync.replicas": "2"})
        time.sleep(1)
        pids, urls = cluster_pids_and_metrics(st["data_dir"])
        meter = CpuMeter(pids, urls)
        meter.idle(1.0)
        f0 = metric_total(urls, LEADER_FLUSH_ROUNDS)
        meter.start()
        lat = br._e2e_latencies_ms(st["bootstrap"], "e2e", seconds, linger_ms=0)
        n = int(br.E2E_RATE * seconds)
        res = meter.stop(n)
        f1 = metric_total(urls, LEADER_FLUSH_ROUNDS)
    print(json.dumps({"p50_ms": statistics.median(lat), "p99_ms": sorted(lat)[int(0.99 * len(lat))],
                      "requests_per_record": res["requests"], "cpu_us_per_record": res["cpu_us"],
                      "flush_rounds_per_record": (f1 - f0) / n}))


if __name__ == "__main__":  # the e2e consumer is a spawned process: it re-imports this module
    main()
