"""The 16-producer transaction pair of ``bench_txn`` alone, on one fresh cluster, with its counts.

Theory of operation: issue 26's transaction target compares 16 transactional producers (100
records per transaction over 3 partitions led by the 3 nodes) with the same producers writing
the same records idempotently. ``bench_txn`` measures that pair among much else; this runs only
the pair, with ``bench_txn``'s own functions, on a fresh 3-node cluster (RF 3,
``min.insync.replicas=2``), and prints per transaction and per idempotent round: the rate, the
brokers' CPU (idle subtracted), follower fetches, every node's fsync rounds and the commit (or
flush) latency p50 / p99. About a minute, for trying a change of the transaction path.

``python -m bench.txn_pair [--producers 16] [--rounds 1]`` (each round: txn, idempotent)
"""

from __future__ import annotations

import argparse

from bench.bench_txn import PARTITIONS, TOPIC, _concurrent, _create, _pct
from bench.broker_cpu import CpuMeter, cluster_pids_and_metrics
from bench.cluster import cluster_dir


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--producers", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    with cluster_dir(3) as (bootstrap, data_dir, _port):
        _create(bootstrap, TOPIC, PARTITIONS)
        meter = CpuMeter(*cluster_pids_and_metrics(data_dir))
        meter.idle(2.0)
        for r in range(args.rounds):
            for kind in ("txn", "idempotent") if r % 2 == 0 else ("idempotent", "txn"):
                rate, lat, used = _concurrent(bootstrap, meter, args.producers, 100, r,
                                              idempotent=kind == "idempotent")
                print(f"{kind:>10}: {rate:8.0f} rec/s  broker CPU {used['cpu_us'] / 1000:5.2f} ms"
                      f"  fetches {used['requests'].get('fetch', 0.0):5.2f}"
                      f"  fsync rounds {used['flush_rounds']:5.2f}"
                      f"  p50 / p99 {_pct(lat, 0.5):.1f} / {_pct(lat, 0.99):.1f} ms", flush=True)


if __name__ == "__main__":
    main()
