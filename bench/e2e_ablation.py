"""Where the end-to-end latency goes: the same measurement with one part of the path taken away.

Theory of operation: issue 26 sets end-to-end p50 / p99 at 10k records/s, acks=all, RF 3,
linger 0, and asks, where a target is missed, which hop is left and what it costs. The path of
a record is producer → leader (append, group-commit fsync) → each follower's parked fetch →
follower append and fsync → the follower's next fetch reports it → the leader's high watermark
→ the consumer's parked fetch. Each arm below removes one part by configuration alone, on a
fresh 3-node ``cluster up`` (same code), and measures with ``bench_replication``'s own
functions: the end-to-end latency (a consumer process, ``_e2e_latencies_ms``) and, at the same
rate, the producer's send → acknowledged latency (``send_latencies_ms``: the part of the path
before the consumer's fetch is answered). The difference between an arm and the default is
what that part costs, measured:

* ``default``: RF 3, ``min.insync.replicas`` 2, flush policy ``batch`` (every acknowledged
  batch fsynced on the leader and on the followers before they report it);
* ``no-fsync``: the same with ``log.flush.policy=none`` (the OS writes back, as Kafka's
  default) — the fsyncs' share;
* ``rf1``: a topic of one replica — no follower hop at all (the HW is the leader's own append,
  after its fsync).

``python -m bench.e2e_ablation [ROUNDS]`` runs the arms in ABBA order over ``ROUNDS`` (default
2) and prints each run and the medians, with the load average beside each run.
"""

from __future__ import annotations

import os
import statistics
import sys
from typing import Any

from rafka.client import Producer

from bench.bench_floor import loopback_rtt_us
from bench.bench_replication import (
    E2E_RATE,
    KEYS,
    VALUE,
    _cluster,
    _create,
    _e2e_latencies_ms,
    _pct,
)
from bench.pacing import send_latencies_ms

TOPIC = "e2e"
# arm -> (broker settings, replication factor, min.insync.replicas)
ARMS: dict[str, tuple[dict[str, str] | None, int, int]] = {
    "default": (None, 3, 2),
    "no-fsync": ({"log.flush.policy": "none"}, 3, 2),
    "rf1": (None, 1, 1),
}


def one(arm: str) -> dict[str, float]:
    broker, rf, min_isr = ARMS[arm]
    with _cluster(broker_config=broker) as st:
        bootstrap = st["bootstrap"]
        _create(bootstrap, TOPIC, 1, rf, {"min.insync.replicas": str(min_isr)})
        with Producer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                      linger_ms=0) as p:
            ack = send_latencies_ms(p, TOPIC, E2E_RATE, 3.0, VALUE, KEYS, partition=0)
        rtt50, _ = loopback_rtt_us()
        e2e = _e2e_latencies_ms(bootstrap, TOPIC, linger_ms=0)
    return {"e2e_p50": _pct(e2e, 0.5), "e2e_p99": _pct(e2e, 0.99),
            "ack_p50": _pct(ack, 0.5), "ack_p99": _pct(ack, 0.99), "rtt_p50_us": rtt50}


def main(rounds: int) -> None:
    order = [a for i in range(rounds) for a in (list(ARMS) if i % 2 == 0 else list(ARMS)[::-1])]
    got: dict[str, list[dict[str, float]]] = {a: [] for a in ARMS}
    for arm in order:
        r = one(arm)
        got[arm].append(r)
        print(f"{arm:9s} e2e p50 {r['e2e_p50']:6.2f} p99 {r['e2e_p99']:6.2f} ms   ack p50 "
              f"{r['ack_p50']:6.2f} p99 {r['ack_p99']:6.2f} ms   rtt {r['rtt_p50_us']:5.1f} µs   "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
    print("medians:")
    for arm, rows in got.items():
        med: dict[str, Any] = {k: statistics.median(x[k] for x in rows) for k in rows[0]}
        print(f"{arm:9s} e2e p50 {med['e2e_p50']:6.2f} p99 {med['e2e_p99']:6.2f} ms   ack p50 "
              f"{med['ack_p50']:6.2f} p99 {med['ack_p99']:6.2f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
