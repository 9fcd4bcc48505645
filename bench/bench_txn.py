"""Transactions benchmark: 3 brokers on this machine, RF 3, ``min.insync.replicas`` 2, 100-byte values.

Figures (medians of ``runs``; one fresh cluster for the whole module):

* ``txn_records_per_s_<n>`` for n = 1, 10, 100, 1000 records per transaction: records/s of one
  transactional ``Producer`` (begin, ``n`` sends round-robin over 3 partitions whose leaders
  sit on the 3 brokers, commit; the next transaction begins after the commit returned) over
  ``SECONDS`` s.  The cost of a transaction is ADD_PARTITIONS (once per partition), the
  produce, END_TXN with its ``acks=all`` state records and one COMMIT marker per partition,
  so small transactions measure the coordinator and large ones the data path;
  ``txn_records_per_s_1000`` has ``ratio_of`` the idempotent producer without transactions
  (``plain_records_per_s``, same sends, one flush per 1000) measured in the same run.
* ``commit_p50_ms_<n>`` / ``commit_p99_ms_<n>``: ``commit_transaction()`` latency (send of the
  last record → commit returned, so it includes the flush of the last batch).
* ``read_committed_offsets_per_s`` / ``read_uncommitted_offsets_per_s``: one consumer reads the
  whole topic (the records above, then ``ABORTED_SHARE`` as many as the transactional ones in
  aborted 100-record transactions, flushed before the abort so they are in the log) from the
  beginning to its end; offsets covered per second, so both traverse the same log;
  the read_committed figure has ``ratio_of`` the read_uncommitted one (measured alternately
  in the same run).
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from bench.bench_replication import _create
from bench.cluster import cluster
from client import Consumer, Producer, TopicPartition

TOPIC = "txbench"
PARTITIONS = 3
VALUE = b"v" * 100
SIZES = (1, 10, 100, 1000)
SECONDS = 3.0
ABORTED_SHARE = 0.1
LINGER_MS = 5


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q))]


def _transactions(bootstrap: str, size: int, run: int) -> tuple[float, list[float]]:
    """(records/s, commit latencies in ms) of ``size``-record transactions for SECONDS s."""
    lat: list[float] = []
    with Producer(bootstrap_servers=bootstrap, transactional_id=f"bench-{size}-{run}",
                  linger_ms=LINGER_MS) as p:
        p.init_transactions()
        n = 0
        i = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < SECONDS:
            p.begin_transaction()
            for _ in range(size):
                p.send(TOPIC, value=VALUE, partition=i % PARTITIONS)
                i += 1
            t1 = time.perf_counter()
            p.commit_transaction()
            lat.append((time.perf_counter() - t1) * 1000)
            n += size
        return n / (time.perf_counter() - t0), lat


def _aborted(bootstrap: str, records: int) -> None:
    """``records`` records in aborted 100-record transactions (for the read figures)."""
    with Producer(bootstrap_servers=bootstrap, transactional_id="bench-aborted",
                  linger_ms=LINGER_MS) as p:
        p.init_transactions()
        for i in range(0, records, 100):
            p.begin_transaction()
            for j in range(100):
                p.send(TOPIC, value=VALUE, partition=(i + j) % PARTITIONS)
            p.flush()  # in the log first: an abort drops the batches still in the producer
            p.abort_transaction()


def _plain(bootstrap: str) -> float:
    """The idempotent producer's records/s, flushing every 1000 records (no transactions)."""
    with Producer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                  linger_ms=LINGER_MS) as p:
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < SECONDS:
            for _ in range(1000):
                p.send(TOPIC, value=VALUE, partition=n % PARTITIONS)
                n += 1
            p.flush()
        return n / (time.perf_counter() - t0)


def _read_rate(bootstrap: str, isolation: str) -> tuple[float, int]:
    """(offsets covered per second, records delivered) reading the topic start to end."""
    tps = [TopicPartition(TOPIC, part) for part in range(PARTITIONS)]
    with Consumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                  auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.assign(tps)
        ends = c.end_offsets(tps)
        c.seek_to_beginning(*tps)
        delivered = 0
        t0 = time.perf_counter()
        while any(c.position(tp) < ends[tp] for tp in tps):
            for recs in c.poll(timeout_ms=500, max_records=5000).values():
                delivered += len(recs)
            if time.perf_counter() - t0 > 120:
                raise RuntimeError(f"{isolation} read did not reach the end in 120 s")
        return sum(ends.values()) / (time.perf_counter() - t0), delivered


def _fig(values: list[float], unit: str, **extra: Any) -> dict[str, Any]:
    return {"median": statistics.median(values), "unit": unit, "runs": values, **extra}


def run(runs: int = 3) -> dict[str, Any]:
    rates: dict[int, list[float]] = {s: [] for s in SIZES}
    p50: dict[int, list[float]] = {s: [] for s in SIZES}
    p99: dict[int, list[float]] = {s: [] for s in SIZES}
    plain: list[float] = []
    rc: list[float] = []
    ru: list[float] = []
    delivered: dict[str, list[int]] = {"read_committed": [], "read_uncommitted": []}
    with cluster(nodes=3) as bootstrap:
        _create(bootstrap, TOPIC, PARTITIONS)
        for r in range(max(3, runs)):
            for size in SIZES:
                rate, lat = _transactions(bootstrap, size, r)
                rates[size].append(rate)
                p50[size].append(_pct(lat, 0.5))
                p99[size].append(_pct(lat, 0.99))
            plain.append(_plain(bootstrap))
        committed = sum(r * SECONDS for v in rates.values() for r in v)
        _aborted(bootstrap, int(committed * ABORTED_SHARE))
        for _ in range(max(3, runs)):
            for iso, out in (("read_uncommitted", ru), ("read_committed", rc)):
                rate, n = _read_rate(bootstrap, iso)
                out.append(rate)
                delivered[iso].append(n)
    figs: dict[str, Any] = {"plain_records_per_s": _fig(plain, "records/s", flush_every=1000)}
    for size in SIZES:
        extra = {"ratio_of": "plain_records_per_s"} if size == 1000 else {}
        figs[f"txn_records_per_s_{size}"] = _fig(rates[size], "records/s", **extra)
        figs[f"commit_p50_ms_{size}"] = _fig(p50[size], "ms")
        figs[f"commit_p99_ms_{size}"] = _fig(p99[size], "ms")
    figs["read_uncommitted_offsets_per_s"] = _fig(
        ru, "offsets/s", delivered=delivered["read_uncommitted"])
    figs["read_committed_offsets_per_s"] = _fig(
        rc, "offsets/s", ratio_of="read_uncommitted_offsets_per_s",
        delivered=delivered["read_committed"])
    return figs


if __name__ == "__main__":
    import json

    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 3), indent=1))
