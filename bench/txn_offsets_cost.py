"""What a consume-transform-produce transaction costs: the A/B for verifying a transaction's
offsets with its coordinator (TXN_OFFSET_COMMIT, ``broker/txn/opening.py``).

    .venv/bin/python -m bench.txn_offsets_cost [SECONDS] [ROUNDS]

A 3-node cluster (RF 3, ``bench.cluster``), ``in`` pre-filled with 200-byte records on 3
partitions, then for SECONDS s one exactly-once loop as an application writes it: a
read_committed group consumer polls at most ``BATCH`` records, a transactional producer sends
one output per input to ``out``, ``send_offsets_to_transaction`` with the consumer's
``group_metadata()``, commit. Printed per round (ROUNDS rounds, each with a fresh group and
transactional id on the same cluster): transactions/s, and the p50 / p99 in ms of
``send_offsets_to_transaction`` and of the whole transaction (send → commit returned). Run it
from two trees (with and without the change) one after the other, alternating, to compare.
Not part of ``make bench``: an A/B tool for one change, like ``bench/ab_*.py``.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import trio

from bench.bench_replication import _create
from bench.cluster import cluster

BATCH = 10
PRELOAD = 60_000
VALUE = b"x" * 200


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


async def _preload(bootstrap: str) -> None:
    from rafka.client.aio import AsyncProducer

    async with AsyncProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as p:
        futs = [await p.send("in", value=VALUE, partition=i % 3) for i in range(PRELOAD)]
        await p.flush()
        for f in futs[-3:]:
            await f


async def _loop(bootstrap: str, tag: str, seconds: float) -> dict[str, Any]:
    from rafka.client.aio import AsyncConsumer, AsyncProducer

    offsets_ms: list[float] = []
    txn_ms: list[float] = []
    async with AsyncConsumer(bootstrap_servers=bootstrap, group_id=f"g-{tag}",
                             isolation_level="read_committed", enable_auto_commit=False,
                             auto_offset_reset="earliest") as c, \
            AsyncProducer(bootstrap_servers=bootstrap, transactional_id=f"t-{tag}",
                          linger_ms=0) as p:
        await p.init_transactions()
        await c.subscribe(["in"])
        while not c.assignment():
            await c.poll(timeout_ms=200, max_records=1)  # joins; may return records: dropped
        t_end = time.perf_counter() + seconds
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() < t_end:
            batch = await c.poll(timeout_ms=500, max_records=BATCH)
            records = [r for recs in batch.values() for r in recs]
            if not records:
                continue
            s = time.perf_counter()
            await p.begin_transaction()
            for r in records:
                await p.send("out", value=r.value, partition=r.partition)
            positions = {tp: recs[-1].offset + 1 for tp, recs in batch.items() if recs}
            o = time.perf_counter()
            await p.send_offsets_to_transaction(positions, c.group_metadata())
            offsets_ms.append((time.perf_counter() - o) * 1000)
            await p.commit_transaction()
            txn_ms.append((time.perf_counter() - s) * 1000)
            n += 1
        elapsed = time.perf_counter() - t0
    return {"txn_per_s": n / elapsed, "offsets_p50_ms": _pct(offsets_ms, 0.5),
            "offsets_p99_ms": _pct(offsets_ms, 0.99), "txn_p50_ms": _pct(txn_ms, 0.5),
            "txn_p99_ms": _pct(txn_ms, 0.99)}


def main(seconds: float = 20.0, rounds: int = 3) -> None:
    with cluster(3) as bootstrap:
        _create(bootstrap, "in", 3)
        _create(bootstrap, "out", 3)
        trio.run(_preload, bootstrap)
        rows = []
        for r in range(rounds):
            row = trio.run(_loop, bootstrap, f"{r}-{time.time_ns()}", seconds)
            rows.append(row)
            print(f"round {r}: " + " ".join(f"{k}={v:.2f}" for k, v in row.items()), flush=True)
        print("median: " + " ".join(
            f"{k}={statistics.median(x[k] for x in rows):.2f}" for k in rows[0]), flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 20.0,
         int(sys.argv[2]) if len(sys.argv) > 2 else 3)
