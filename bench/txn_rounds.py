"""How many acks=all rounds a transaction is, against an idempotent round of the same records
(issue 26's transaction target, measured on an idle cluster, one producer at a time).

    .venv/bin/python -m bench.txn_rounds [TRANSACTIONS] [RUNS]

A fresh 3-node cluster (RF 3, ``bench.cluster``) per run, topic ``t`` with 3 partitions whose
leaders sit on the 3 nodes. One transactional ``AsyncProducer`` runs TRANSACTIONS transactions
of 100 records (round-robin over the partitions, as ``bench_txn``): begin, sends, commit; then
one idempotent ``acks=all`` producer writes the same rounds, each ended by a flush. Printed per
run: the transaction's cycle and the idempotent round (p50, ms), their ratio, and the
transaction coordinator calls of the cycle (ADD_PARTITIONS_TO_TXN, END_TXN: p50 ms, timed
around the client's coordinator call). The runs alternate the broker's ``log.flush.policy``
(``batch``, ``none``, ``none``, ``batch``, ...): if the ratio moves with the policy, the fsyncs
make the difference; if not, the number of rounds in series does.

One producer at a time on an idle machine measures the protocol's sequence, not the CPU: the
16-producer row of ``bench_txn`` (``txn_to_idempotent_ratio_100_c16``) is the issue's figure.
Not part of ``make bench``: a probe, like ``bench/txn_offsets_cost.py``.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import trio

from bench.bench_replication import _create
from bench.cluster import cluster

SIZE = 100
VALUE = b"x" * 100
WARMUP = 5


async def _measure(bootstrap: str, transactions: int) -> dict[str, Any]:
    from rafka.client.aio import AsyncProducer
    from rafka.wire.protocol import ApiKey

    calls: dict[str, list[float]] = {}
    out: dict[str, Any] = {"calls": calls}
    async with AsyncProducer(bootstrap_servers=bootstrap, transactional_id="rounds-1") as p:
        await p.init_transactions()
        txn = p._txn  # the coordinator calls, timed where the client makes them
        assert txn is not None
        call_alone = txn._call_alone

        async def timed(api: ApiKey, body: dict[str, Any]) -> dict[str, Any]:
            t = time.perf_counter()
            try:
                return await call_alone(api, body)
            finally:
                calls.setdefault(api.name, []).append((time.perf_counter() - t) * 1000)

        txn._call_alone = timed  # type: ignore[method-assign]
        cycles = []
        for _ in range(transactions):
            t0 = time.perf_counter()
            await p.begin_transaction()
            for j in range(SIZE):
                await p.send("t", value=VALUE, partition=j % 3)
            await p.commit_transaction()
            cycles.append((time.perf_counter() - t0) * 1000)
        out["txn"] = cycles
    async with AsyncProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all") as p:
        rounds = []
        for _ in range(transactions):
            t0 = time.perf_counter()
            for j in range(SIZE):
                await p.send("t", value=VALUE, partition=j % 3)
            await p.flush()
            rounds.append((time.perf_counter() - t0) * 1000)
        out["idempotent"] = rounds
    return out


def _p50(xs: list[float]) -> float:
    return statistics.median(xs[WARMUP:] or xs)


def main() -> None:
    transactions = int(sys.argv[1]) if len(sys.argv) > 1 else 80
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    policies = ["batch", "none", "none", "batch"]
    ratios: dict[str, list[float]] = {}
    for run in range(runs):
        policy = policies[run % 4]
        with cluster(3, broker_config={"log.flush.policy": policy}) as bootstrap:
            _create(bootstrap, "t", 3, 3)
            out = trio.run(_measure, bootstrap, transactions)
        txn, idem = _p50(out["txn"]), _p50(out["idempotent"])
        ratios.setdefault(policy, []).append(idem / txn)
        calls = ", ".join(f"{k} {_p50(v):.1f}" for k, v in sorted(out["calls"].items()))
        print(f"run {run + 1} flush policy {policy:5}: transaction {txn:5.1f} ms, idempotent round "
              f"{idem:4.1f} ms, ratio {idem / txn:.3f}, {txn / idem:.1f} rounds; coordinator calls "
              f"p50 ms: {calls}", flush=True)
    for policy, rs in ratios.items():
        print(f"flush policy {policy}: ratio median {statistics.median(rs):.3f} over {len(rs)} runs")


if __name__ == "__main__":
    main()
