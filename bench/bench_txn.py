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
* ``broker_cpu_ms_per_txn_<n>``: CPU of the three node processes (idle rate subtracted,
  ``bench/broker_cpu.py``) per transaction of the single producer above; the figure's
  ``requests`` say what one transaction caused, per api (follower fetches, the client's and
  the leaders' ADD_PARTITIONS_TO_TXN — verification is one with ``verify_only`` —, PRODUCE,
  END_TXN, WRITE_TXN_MARKERS).
* ``commit_p50_ms_<n>`` / ``commit_p99_ms_<n>``: ``commit_transaction()`` latency (send of the
  last record → commit returned, so it includes the flush of the last batch).
* ``txn_concurrent_records_per_s_100_c<N>`` for N in ``CONCURRENCY`` (4, 16, 64): N
  transactional ``AsyncProducer``s (distinct transactional ids, 100 records per transaction over
  the three partitions) spread over ``PROCESSES`` processes, started together, for ``SECONDS``
  s: the records/s they committed in all. One producer is bounded by its sequential commit
  latency (begin → sends → commit → begin), as in Kafka; the issue's target (>= 100k records/s
  at 100 records per transaction) is a cluster figure, so these rows are the ones to compare
  with it (``ratio_of`` ``txn_target_records_per_s_100``, a constant row; the single producer's
  ``txn_records_per_s_100`` has it too), and how they grow with N is what sharing work across
  transactions buys (a follower's fetch carries every append since its last, markers are
  batched per leader, read barriers ride the coordinator's state writes). With each:
  ``broker_cpu_ms_per_txn_100_c<N>`` (the brokers' CPU per committed transaction in that window,
  with the requests per transaction) and ``commit_p50_ms_100_c<N>`` / ``commit_p99_ms_100_c<N>``
  over every commit of the window; ``client_cpu_ms_per_txn_100_c<N>`` is the producers'
  processes' whole CPU (start-up, imports and ``init_transactions`` included: an upper bound),
  ``client_window_cpu_ms_per_txn_100_c<N>`` only their CPU from the common start to the last
  producer's end. The producers' processes share the machine's cores with the brokers: on a
  2-core box the CPU per transaction is the load-independent reading.
* ``idempotent_concurrent_records_per_s_100_c16``: issue 26's reference for the 16-producer
  row — the same 16 ``AsyncProducer``s in the same processes writing the same records, but
  idempotent without transactions (``acks=all``, a flush ends each round of 100 records where a
  commit ended each transaction), run right beside the transactional row in alternating order;
  ``txn_to_idempotent_ratio_100_c16`` is the median of the per-run ratios (target >= 0.5), with
  the idempotent rounds' ``broker_cpu_ms_per_round_100_idempotent_c16`` (and its requests per
  round) to set beside ``broker_cpu_ms_per_txn_100_c16``: the difference is what a transaction
  adds, message by message. Both carry ``flush_rounds`` (every node's fsync rounds per
  transaction / round) and ``path_counts``; the runner prices them at the run's floor
  (``bench.bench_floor.path_floor_us``), and the idempotent row's ``path_floor_ratio`` is its
  path floor over the transaction's: the ratio a transaction could reach if the brokers' own
  code cost nothing.
* ``read_committed_offsets_per_s`` / ``read_uncommitted_offsets_per_s``: one consumer reads the
  whole topic (the records above, then ``ABORTED_SHARE`` as many as the transactional ones in
  aborted 100-record transactions, flushed before the abort so they are in the log) from the
  beginning to its end; offsets covered per second, so both traverse the same log (records/s
  *delivered* would cap read_committed near 1 - aborted share, since it skips the aborted
  records; ``delivered`` lists them). The read_committed figure has ``ratio_of`` the
  read_uncommitted one; the two alternate, in both orders, ``READ_ROUNDS`` times.
  ``read_*_client_cpu_us_per_1k_offsets`` is the consumer process's CPU per 1,000 offsets —
  what the client-side filter costs, independent of how loaded the machine is.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any

from rafka.client import Consumer, Producer, TopicPartition

from bench.bench_replication import _create
from bench.broker_cpu import CpuMeter, cluster_pids_and_metrics, path_counts
from bench.cluster import cluster_dir

TOPIC = "txbench"
PARTITIONS = 3
VALUE = b"v" * 100
SIZES = (1, 10, 100, 1000)
SECONDS = 3.0
ABORTED_SHARE = 0.1
LINGER_MS = 5
CONCURRENCY = (4, 16, 64)
# issue 26: transactions at >= 0.5x the same producers writing the same records idempotently
# without transactions; measured at this concurrency, right beside the transactional row
IDEMPOTENT_REFERENCE = (16,)
PROCESSES = 4
READ_ROUNDS = 5
TARGET_RECORDS_PER_S = 100_000


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


async def _producers(bootstrap: str, tids: list[str], size: int, start_at: float,
                     out: dict[str, Any], idempotent: bool = False) -> None:
    """``len(tids)`` AsyncProducers in this process: init, wait for the common start, then
    transactions of ``size`` records for SECONDS s each; adds records and commit latencies.
    ``idempotent``: the same producers without transactions — idempotent, ``acks=all``, each
    round of ``size`` records ended by a flush (its latency in place of the commit's): issue
    26's reference for the transactional rows (the same records, the same pacing)."""
    import trio
    from rafka.client.aio import AsyncProducer

    async def one(tid: str) -> None:
        conf: dict[str, Any] = ({"enable_idempotence": True, "acks": "all"} if idempotent
                                else {"transactional_id": tid})
        async with AsyncProducer(bootstrap_servers=bootstrap, linger_ms=LINGER_MS, **conf) as p:
            if not idempotent:
                await p.init_transactions()
            await trio.sleep(max(0.0, start_at - time.time()))
            if out["cpu_start_s"] is None:  # the window's CPU: start-up and init left out
                out["cpu_start_s"] = time.process_time()
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < SECONDS:
                if not idempotent:
                    await p.begin_transaction()
                for i in range(size):
                    await p.send(TOPIC, value=VALUE, partition=i % PARTITIONS)
                t1 = time.perf_counter()
                await (p.flush() if idempotent else p.commit_transaction())
                out["latencies_ms"].append((time.perf_counter() - t1) * 1000)
                out["records"] += size
            out["seconds"] = max(out["seconds"], time.perf_counter() - t0)
            out["cpu_end_s"] = time.process_time()  # the last producer's end closes the window

    async with trio.open_nursery() as nursery:
        for tid in tids:
            nursery.start_soon(one, tid)


def _worker(bootstrap: str, prefix: str, count: int, size: int, start_at: float,
            idempotent: bool = False) -> None:
    """One process of the concurrent rows: prints {records, seconds, latencies_ms} as JSON."""
    import json

    import trio

    out: dict[str, Any] = {"records": 0, "seconds": 0.0, "latencies_ms": [],
                           "cpu_start_s": None, "cpu_end_s": 0.0}
    trio.run(_producers, bootstrap, [f"{prefix}-{i}" for i in range(count)], size, start_at, out,
             idempotent)
    out["cpu_s"] = time.process_time()  # the whole process (init included): an upper bound
    print(json.dumps(out), flush=True)


def _concurrent(bootstrap: str, meter: CpuMeter, producers: int, size: int,
                run: int, idempotent: bool = False) -> tuple[float, list[float], dict[str, Any]]:
    """(records/s, commit latencies, broker CPU per transaction) of ``producers`` concurrent
    transactional AsyncProducers spread over PROCESSES processes (``idempotent``: the same
    producers without transactions, a flush per ``size`` records; see ``_producers``)."""
    import json

    start_at = time.time() + 4.0 + 0.05 * producers  # every producer has initialised by then
    procs = []
    for k in range(min(PROCESSES, producers)):
        count = producers // PROCESSES + (1 if k < producers % PROCESSES else 0)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "bench.bench_txn", "--worker", bootstrap,
             f"bench-c{producers}-{run}-{k}", str(count), str(size), str(start_at),
             *(["--idempotent"] if idempotent else [])],
            stdout=subprocess.PIPE, text=True))
    time.sleep(max(0.0, start_at - time.time()))
    meter.start()
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"concurrent worker failed ({proc.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    lat = [x for r in results for x in r["latencies_ms"]]
    cpu = meter.stop(len(lat))
    cpu["client_cpu_us"] = sum(r["cpu_s"] for r in results) / max(1, len(lat)) * 1e6
    cpu["client_window_cpu_us"] = sum(r["cpu_end_s"] - (r["cpu_start_s"] or r["cpu_end_s"])
                                      for r in results) / max(1, len(lat)) * 1e6
    seconds = max(r["seconds"] for r in results)
    return sum(r["records"] for r in results) / seconds, lat, cpu


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


def _read_rate(bootstrap: str, isolation: str) -> tuple[float, int, float]:
    """(offsets covered per second, records delivered, client CPU µs per 1,000 offsets)
    reading the topic start to end."""
    tps = [TopicPartition(TOPIC, part) for part in range(PARTITIONS)]
    with Consumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                  auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.assign(tps)
        ends = c.end_offsets(tps)
        c.seek_to_beginning(*tps)
        delivered = 0
        c0 = time.process_time()
        t0 = time.perf_counter()
        while any(c.position(tp) < ends[tp] for tp in tps):
            # a short poll: when a fetch holds only hidden batches (the log's tail of aborted
            # transactions and their markers in read_committed), poll moves the position past
            # them but returns no records, so it waits its whole timeout for more data — a
            # 500 ms timeout here was read_committed's "0.72x" (a wait, not work)
            for recs in c.poll(timeout_ms=20, max_records=5000).values():
                delivered += len(recs)
            if time.perf_counter() - t0 > 120:
                raise RuntimeError(f"{isolation} read did not reach the end in 120 s")
        took, offsets = time.perf_counter() - t0, sum(ends.values())
        return offsets / took, delivered, (time.process_time() - c0) * 1e9 / max(1, offsets)


def _fig(values: list[float], unit: str, **extra: Any) -> dict[str, Any]:
    return {"median": statistics.median(values), "unit": unit, "runs": values, **extra}


def run(runs: int = 3) -> dict[str, Any]:
    rates: dict[int, list[float]] = {s: [] for s in SIZES}
    p50: dict[int, list[float]] = {s: [] for s in SIZES}
    p99: dict[int, list[float]] = {s: [] for s in SIZES}
    plain: list[float] = []
    conc: dict[int, list[float]] = {c: [] for c in CONCURRENCY}
    conc_lat: dict[int, list[tuple[float, float]]] = {c: [] for c in CONCURRENCY}
    conc_cpu: dict[int, list[dict[str, Any]]] = {c: [] for c in CONCURRENCY}
    idem: dict[int, list[float]] = {c: [] for c in IDEMPOTENT_REFERENCE}
    idem_lat: dict[int, list[float]] = {c: [] for c in IDEMPOTENT_REFERENCE}
    idem_cpu: dict[int, list[dict[str, Any]]] = {c: [] for c in IDEMPOTENT_REFERENCE}
    rc: list[float] = []
    ru: list[float] = []
    cpu: dict[str, list[float]] = {"read_committed": [], "read_uncommitted": []}
    delivered: dict[str, list[int]] = {"read_committed": [], "read_uncommitted": []}
    txn_cpu: dict[int, list[dict[str, Any]]] = {s: [] for s in SIZES}
    with cluster_dir(3) as (bootstrap, data_dir, _port):
        _create(bootstrap, TOPIC, PARTITIONS)
        meter = CpuMeter(*cluster_pids_and_metrics(data_dir))
        meter.idle(2.0)
        for r in range(max(3, runs)):
            for size in SIZES:
                meter.start()
                rate, lat = _transactions(bootstrap, size, r)
                txn_cpu[size].append(meter.stop(len(lat)))
                rates[size].append(rate)
                p50[size].append(_pct(lat, 0.5))
                p99[size].append(_pct(lat, 0.99))
            plain.append(_plain(bootstrap))
            for c in CONCURRENCY:
                # the idempotent reference beside its transactional row, in both orders
                # across runs (ABBA), so both see the same moment of a shared machine
                kinds = ["txn", "idem"] if c in IDEMPOTENT_REFERENCE else ["txn"]
                for kind in kinds if r % 2 == 0 else kinds[::-1]:
                    rate, lat, used = _concurrent(bootstrap, meter, c, 100, r,
                                                  idempotent=kind == "idem")
                    if kind == "idem":
                        idem[c].append(rate)
                        idem_lat[c].append(_pct(lat, 0.99))
                        idem_cpu[c].append(used)
                        continue
                    conc[c].append(rate)
                    conc_lat[c].append((_pct(lat, 0.5), _pct(lat, 0.99)))
                    conc_cpu[c].append(used)
        committed = sum(r * SECONDS for v in [*rates.values(), *conc.values()] for r in v)
        _aborted(bootstrap, int(committed * ABORTED_SHARE))
        for i in range(max(READ_ROUNDS, runs)):
            pair = [("read_uncommitted", ru), ("read_committed", rc)]
            for iso, out in pair if i % 2 == 0 else pair[::-1]:  # both orders
                rate, n, cpu_us = _read_rate(bootstrap, iso)
                out.append(rate)
                delivered[iso].append(n)
                cpu[iso].append(cpu_us)
    figs: dict[str, Any] = {"plain_records_per_s": _fig(plain, "records/s", flush_every=1000)}
    for size in SIZES:
        extra = {"ratio_of": "plain_records_per_s"} if size == 1000 else {}
        figs[f"txn_records_per_s_{size}"] = _fig(rates[size], "records/s", **extra)
        figs[f"broker_cpu_ms_per_txn_{size}"] = _fig(
            [c["cpu_us"] / 1000 for c in txn_cpu[size]], "ms",
            requests=[c["requests"] for c in txn_cpu[size]])
        figs[f"commit_p50_ms_{size}"] = _fig(p50[size], "ms")
        figs[f"commit_p99_ms_{size}"] = _fig(p99[size], "ms")
    figs["txn_target_records_per_s_100"] = _fig([TARGET_RECORDS_PER_S], "records/s",
                                                note="issue 12's target, not a measurement")
    figs["txn_records_per_s_100"]["ratio_of"] = "txn_target_records_per_s_100"
    for c in CONCURRENCY:
        figs[f"txn_concurrent_records_per_s_100_c{c}"] = _fig(
            conc[c], "records/s", ratio_of="txn_target_records_per_s_100", producers=c,
            processes=min(PROCESSES, c),
            times_single=statistics.median(conc[c]) / statistics.median(rates[100]))
        figs[f"broker_cpu_ms_per_txn_100_c{c}"] = _fig(
            [u["cpu_us"] / 1000 for u in conc_cpu[c]], "ms",
            requests=[u["requests"] for u in conc_cpu[c]],
            flush_rounds=[u["flush_rounds"] for u in conc_cpu[c]],
            path_counts=path_counts(conc_cpu[c], c, unit_us=1000))
        figs[f"client_cpu_ms_per_txn_100_c{c}"] = _fig(
            [u["client_cpu_us"] / 1000 for u in conc_cpu[c]], "ms",
            note="the producers' processes, start-up included (an upper bound)")
        figs[f"client_window_cpu_ms_per_txn_100_c{c}"] = _fig(
            [u["client_window_cpu_us"] / 1000 for u in conc_cpu[c]], "ms",
            note="the producers' processes from the common start to the last commit only")
        figs[f"commit_p50_ms_100_c{c}"] = _fig([p for p, _ in conc_lat[c]], "ms")
        figs[f"commit_p99_ms_100_c{c}"] = _fig([q for _, q in conc_lat[c]], "ms")
    for c in IDEMPOTENT_REFERENCE:
        figs[f"idempotent_concurrent_records_per_s_100_c{c}"] = _fig(
            idem[c], "records/s", producers=c, processes=min(PROCESSES, c),
            note="the transactional row's producers without transactions: idempotent, acks=all,"
                 " a flush per 100 records")
        figs[f"broker_cpu_ms_per_round_100_idempotent_c{c}"] = _fig(
            [u["cpu_us"] / 1000 for u in idem_cpu[c]], "ms",
            requests=[u["requests"] for u in idem_cpu[c]],
            flush_rounds=[u["flush_rounds"] for u in idem_cpu[c]],
            path_counts=path_counts(idem_cpu[c], c, unit_us=1000),
            # the ratio a transaction could reach if the brokers' own code cost nothing
            path_floor_ratio_of=f"broker_cpu_ms_per_txn_100_c{c}")
        figs[f"flush_p99_ms_100_idempotent_c{c}"] = _fig(idem_lat[c], "ms")
        # issue 26's target (>= 0.5): each run's pair ran back to back; the median of the pairs
        figs[f"txn_to_idempotent_ratio_100_c{c}"] = _fig(
            [t / i for t, i in zip(conc[c], idem[c], strict=True)], "x", target=0.5)
    figs["read_uncommitted_offsets_per_s"] = _fig(
        ru, "offsets/s", delivered=delivered["read_uncommitted"])
    figs["read_committed_offsets_per_s"] = _fig(
        rc, "offsets/s", ratio_of="read_uncommitted_offsets_per_s",
        delivered=delivered["read_committed"])
    for iso in ("read_uncommitted", "read_committed"):
        figs[f"{iso}_client_cpu_us_per_1k_offsets"] = _fig(cpu[iso], "µs")
    return figs


if __name__ == "__main__":
    import json

    if sys.argv[1:2] == ["--worker"]:
        _worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]),
                idempotent="--idempotent" in sys.argv[7:])
        sys.exit(0)
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 3), indent=1))
