"""Foundation benchmark: one broker on loopback, 200-byte values, 16-byte keys, acks=1.

Figures (medians of ``runs``), each measured in the same run as its reference:

* ``producer_send``: records/s through the sync ``Producer.send()`` (linger 5 ms, 256 KiB
  batches, no compression, idempotence off since acks=1), from the first send to ``flush()``.
  Compared with NATS JetStream's publish rate (nats-py, file store R1).
* ``consumer``: records/s of the sync ``Consumer`` reading the same records from the beginning.
  Compared with NATS's ordered push consumer.
* ``producer_send_batch`` / ``consumer_poll_batch`` (issue 13): the same records through the
  whole-batch producer API (``Producer.send_batch``, chunks of ``BATCH_CHUNK`` records with their
  keys) and the columnar read (``Consumer.poll_batch``), each measured right after its
  record-by-record twin in the same repetition; ``send_batch_vs_send`` / ``poll_batch_vs_poll``
  are the medians of those per-repetition ratios.
* ``produce_latency_p50/p99``: send → acknowledged, at a fixed moderate rate (5,000 rec/s).
* ``large_batch``: MB/s of pipelined PRODUCE requests, each one pre-built ~1 MiB batch, straight
  over the protocol (the broker's socket → segment path). Compared with the machine's raw limit:
  a plain Python socket → file copy, measured *interleaved* with it (raw, rafka, raw, rafka, …,
  ``LARGE_PAIRS`` pairs per repetition) so that a load change on the shared machine moves both
  sides of a pair alike. ``large_batch_ratio`` is the median of the per-pair ratios (rafka / the
  raw copy measured just before it); ``large_batch``'s own ``ratio`` is the ratio of the medians.
* NATS JetStream is measured in each repetition right after rafka's producer and consumer, and
  ``producer_vs_nats`` / ``consumer_vs_nats`` are the medians of those per-repetition ratios.

* ``*_pure`` and ``*_c_vs_pure`` (issue 13, the C codec ``log/_codec.c``): ``send_batch``,
  ``poll_batch`` and the consumer's iteration measured again in a child process started with
  ``RAFKA_NO_SPEEDUPS=1`` (the pure-Python codec), right after the in-process figure of the
  same repetition (which uses the C codec when it is built: ``codec`` in the JSON says which);
  the ratios are medians of the per-repetition ratios.

``confluent_produce_client_cpu`` (issue 13): confluent-kafka's CPU per ``produce()`` of the same
records with no broker (librdkafka only queues them; ``bench.peers``), measured right after
rafka's producer in each repetition; ``producer_cpu_vs_confluent`` is the median of the
per-repetition ratios of rafka's ``producer_client_cpu`` to it (target ≤ 1.0).
``producer_caller_cpu`` (and ``producer_caller_cpu_vs_confluent``): the part of it spent in the
thread that calls ``send()`` (``time.thread_time``) — confluent's figure has no sending in it
(no broker), rafka's process figure has the trio thread's packing and socket writes too.

``producer_client_cpu`` / ``consumer_client_cpu``: CPU time of the client process (all its
threads: the caller's and the client's trio thread) per record, from ``time.process_time``.
On a shared, loaded machine this moves far less than the wall-clock rates do, and it bounds
them: a client whose threads share one GIL cannot go faster than 1 / (CPU per record) on one
core, whatever the broker does (which runs in its own process, on the other core).

The broker runs with its default flush policy (``log.flush.policy = batch``: every acknowledged
batch is fsynced, with group commit) — JetStream fsyncs only every 2 minutes, so the comparison
is conservative for rafka. Each figure names its flush policy in the JSON (``flush_policy``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio
from rafka.client import Admin, Consumer, Producer, TopicPartition
from rafka.log import speedups
from rafka.log.batch import build_batch
from rafka.wire.connection import connect, parse_address
from rafka.wire.protocol import ApiKey

from bench.cluster import cluster
from bench.pacing import send_latencies_ms
from bench.peers import confluent_produce_cpu_us, nats_rates, raw_socket_to_file_mb_s

N_RECORDS = 300_000
VALUE = b"v" * 200
KEYS = [f"key-{i:012d}".encode() for i in range(1024)]  # 16 bytes each
FLUSH = "batch"
LARGE_PAIRS = 2  # raw / rafka pairs per repetition
LARGE_MB = 256  # per measurement
BATCH_CHUNK = 10_000  # records per send_batch call


def _producer_rate(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    """(records/s, client CPU µs per record — every thread of this process, see run())."""
    rate, cpu, _ = _producer_rate_threads(bootstrap, topic, n)
    return rate, cpu


def _producer_rate_threads(bootstrap: str, topic: str, n: int) -> tuple[float, float, float]:
    """``_producer_rate`` plus the calling thread's own CPU µs per record (``thread_time``)."""
    with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=256 * 1024,
                  enable_idempotence=False) as p:
        p.send(topic, value=VALUE, key=KEYS[0]).result(timeout=30)  # metadata warm-up
        send = p.send
        t0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
        for i in range(n):
            send(topic, value=VALUE, key=KEYS[i & 1023])
        p.flush()
        caller = (time.thread_time() - m0) / n * 1e6
        return n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1e6, caller


def _producer_batch_rate(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    """``_producer_rate`` through ``send_batch`` (same records, same keys, same producer options)."""
    keys = [KEYS[i & 1023] for i in range(BATCH_CHUNK)]
    values = [VALUE] * BATCH_CHUNK
    with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=256 * 1024,
                  enable_idempotence=False) as p:
        p.send(topic, value=VALUE, key=KEYS[0]).result(timeout=30)  # metadata warm-up
        futures = []
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n // BATCH_CHUNK):
            futures.append(p.send_batch(topic, values, keys=keys))
        p.flush()
        for f in futures:
            f.result(timeout=30)
        return n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1e6


def _consumer_rate(bootstrap: str, topic: str, partitions: int, n: int, *,
                   columnar: bool = False, arrow: bool = False) -> tuple[float, float]:
    """(records/s, client CPU µs per record); ``columnar``: through ``poll_batch``; ``arrow``:
    and each ``ColumnBatch`` turned into a ``pyarrow.RecordBatch`` (bench_spark's yardstick)."""
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                  enable_auto_commit=False) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        c.seek_to_beginning()
        poll = c.poll_batch if columnar or arrow else c.poll
        got = 0
        t0, c0 = time.perf_counter(), time.process_time()
        while got < n:
            batch = poll(1000, 100_000)
            got += sum(len(v.to_arrow()) if arrow else len(v) for v in batch.values())
        return got / (time.perf_counter() - t0), (time.process_time() - c0) / got * 1e6


def _pure(fn: str, *args: Any, **kw: Any) -> tuple[float, float]:
    """``fn(*args, **kw)`` of this module in a child process with the pure-Python codec
    (``RAFKA_NO_SPEEDUPS=1``): (records/s, client CPU µs per record)."""
    code = (f"import json, bench.bench_foundation as b; "
            f"print(json.dumps(b.{fn}(*{args!r}, **{kw!r})))")
    env = {**os.environ, "RAFKA_NO_SPEEDUPS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parent.parent, timeout=600)
    rate, cpu = json.loads(out.stdout.strip().splitlines()[-1])
    return rate, cpu


def _latencies_ms(bootstrap: str, topic: str, rate: int = 5000, seconds: float = 3.0) -> list[float]:
    with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=0, enable_idempotence=False) as p:
        return send_latencies_ms(p, topic, rate, seconds, VALUE, KEYS)


async def _large_batch_mb_s(bootstrap: str, topic: str, total_mb: int = LARGE_MB, in_flight: int = 8) -> float:
    records = [(KEYS[i & 1023], VALUE, [], int(time.time() * 1000)) for i in range(4600)]
    batch = build_batch(records)  # ~1 MiB
    host, port = parse_address(bootstrap.split(",")[0])
    body = {"acks": 1, "timeout_ms": 30000,
            "topics": [{"name": topic, "partitions": [{"partition": 0, "records": batch}]}]}
    n = total_mb * (1 << 20) // len(batch)
    async with connect(host, port) as conn:
        (await conn.request(ApiKey.PRODUCE, body)).raise_for_error()
        limiter = trio.Semaphore(in_flight)
        t0 = time.perf_counter()

        async def one() -> None:
            try:
                resp = await conn.request(ApiKey.PRODUCE, body)
                err = resp.body["topics"][0]["partitions"][0]["error"]
                assert err == 0, f"produce failed: {resp.body}"
            finally:
                limiter.release()

        async with trio.open_nursery() as nursery:
            for _ in range(n):
                await limiter.acquire()
                nursery.start_soon(one)
        return n * len(batch) / (time.perf_counter() - t0) / 1e6


def _fig(values: list[float], unit: str, **extra: Any) -> dict[str, Any]:
    return {"median": statistics.median(values), "unit": unit, "runs": values, **extra}


def run(runs: int = 3) -> dict[str, Any]:
    prod, cons, p50, p99, large, raw, pair_ratios = [], [], [], [], [], [], []
    prod_cpu, cons_cpu = [], []
    nats_pub, nats_cons, prod_vs_nats, cons_vs_nats = [], [], [], []
    ck_cpu, cpu_vs_ck, prod_caller_cpu, caller_vs_ck = [], [], [], []
    large_nofsync, nofsync_ratios = [], []
    prod_b, prod_b_cpu, prod_b_ratio, cons_b, cons_b_cpu, cons_b_ratio = [], [], [], [], [], []
    pure: dict[str, list[float]] = {f"{k}{s}": [] for k in ("send_batch", "consumer", "poll_batch")
                                     for s in ("", "_cpu", "_ratio")}
    # A second broker that never fsyncs (log.flush.policy=none, Kafka's own default): the raw
    # reference never fsyncs either, so this pair shows how much of the gap is the fsync.
    with cluster(nodes=1) as bootstrap, \
            cluster(nodes=1, broker_config={"log.flush.policy": "none"}) as bootstrap_nf:
        with Admin(bootstrap_servers=bootstrap_nf) as admin:
            admin.create_topic("big", partitions=1, replication_factor=1)
        with Admin(bootstrap_servers=bootstrap) as admin:
            admin.create_topic("big", partitions=1, replication_factor=1)
            admin.create_topic("lat", partitions=1, replication_factor=1)
            for r in range(runs):
                admin.create_topic(f"perf{r}", partitions=3, replication_factor=1)
                admin.create_topic(f"perfb{r}", partitions=3, replication_factor=1)
                admin.create_topic(f"perfbp{r}", partitions=3, replication_factor=1)
        for r in range(runs):
            rate, cpu, caller = _producer_rate_threads(bootstrap, f"perf{r}", N_RECORDS)
            prod.append(rate)
            prod_cpu.append(cpu)
            prod_caller_cpu.append(caller)
            ck = confluent_produce_cpu_us([VALUE], KEYS, N_RECORDS)
            if ck is not None:
                ck_cpu.append(ck)
                cpu_vs_ck.append(cpu / ck)
                caller_vs_ck.append(caller / ck)
            rate, cpu = _producer_batch_rate(bootstrap, f"perfb{r}", N_RECORDS)
            prod_b.append(rate)
            prod_b_cpu.append(cpu)
            prod_b_ratio.append(rate / prod[-1])
            rate, cpu = _consumer_rate(bootstrap, f"perf{r}", 3, N_RECORDS)
            cons.append(rate)
            cons_cpu.append(cpu)
            rate, cpu = _consumer_rate(bootstrap, f"perf{r}", 3, N_RECORDS, columnar=True)
            cons_b.append(rate)
            cons_b_cpu.append(cpu)
            cons_b_ratio.append(rate / cons[-1])
            # the same three with the pure-Python codec, in a child process (module docstring)
            for key, args, kw, c_rate in (
                    ("send_batch", ("_producer_batch_rate", bootstrap, f"perfbp{r}", N_RECORDS),
                     {}, prod_b[-1]),
                    ("consumer", ("_consumer_rate", bootstrap, f"perf{r}", 3, N_RECORDS), {},
                     cons[-1]),
                    ("poll_batch", ("_consumer_rate", bootstrap, f"perf{r}", 3, N_RECORDS),
                     {"columnar": True}, cons_b[-1])):
                rate, cpu = _pure(*args, **kw)
                pure[key].append(rate)
                pure[f"{key}_cpu"].append(cpu)
                pure[f"{key}_ratio"].append(c_rate / rate)
            nats = nats_rates(100_000)  # right after rafka's: the same load moment
            if nats is not None:
                nats_pub.append(nats[0])
                nats_cons.append(nats[1])
                prod_vs_nats.append(prod[-1] / nats[0])
                cons_vs_nats.append(cons[-1] / nats[1])
            lat = sorted(_latencies_ms(bootstrap, "lat"))
            p50.append(lat[len(lat) // 2])
            p99.append(lat[int(len(lat) * 0.99)])
            for _ in range(LARGE_PAIRS):  # interleaved: raw, rafka, raw, rafka, ...
                raw.append(raw_socket_to_file_mb_s(LARGE_MB))
                large.append(trio.run(_large_batch_mb_s, bootstrap, "big", LARGE_MB))
                pair_ratios.append(large[-1] / raw[-1])
                large_nofsync.append(trio.run(_large_batch_mb_s, bootstrap_nf, "big", LARGE_MB))
                nofsync_ratios.append(large_nofsync[-1] / raw[-1])
    rec_mb = (len(VALUE) + 16) / 1e6
    codec = "c" if speedups.ENABLED else "pure"
    out = {
        "producer_send": _fig(prod, "rec/s", flush_policy=FLUSH),
        "producer_send_mb": _fig([x * rec_mb for x in prod], "MB/s", flush_policy=FLUSH),
        "producer_client_cpu": _fig(prod_cpu, "us/rec"),
        "producer_caller_cpu": _fig(prod_caller_cpu, "us/rec", what="send() loop's thread only"),
        "consumer": _fig(cons, "rec/s"),
        "consumer_client_cpu": _fig(cons_cpu, "us/rec"),
        "producer_send_batch": _fig(prod_b, "rec/s", flush_policy=FLUSH, chunk=BATCH_CHUNK,
                                    codec=codec),
        "producer_send_batch_client_cpu": _fig(prod_b_cpu, "us/rec"),
        "send_batch_vs_send": _fig(prod_b_ratio, "x", what="median of per-repetition ratios"),
        "consumer_poll_batch": _fig(cons_b, "rec/s", codec=codec),
        "consumer_poll_batch_client_cpu": _fig(cons_b_cpu, "us/rec"),
        "poll_batch_vs_poll": _fig(cons_b_ratio, "x", what="median of per-repetition ratios"),
        "producer_send_batch_pure": _fig(pure["send_batch"], "rec/s", codec="pure"),
        "producer_send_batch_pure_client_cpu": _fig(pure["send_batch_cpu"], "us/rec"),
        "send_batch_c_vs_pure": _fig(pure["send_batch_ratio"], "x", codec=codec,
                                     what="median of per-repetition ratios"),
        "consumer_pure": _fig(pure["consumer"], "rec/s", codec="pure"),
        "consumer_pure_client_cpu": _fig(pure["consumer_cpu"], "us/rec"),
        "consumer_c_vs_pure": _fig(pure["consumer_ratio"], "x", codec=codec,
                                   what="median of per-repetition ratios"),
        "consumer_poll_batch_pure": _fig(pure["poll_batch"], "rec/s", codec="pure"),
        "consumer_poll_batch_pure_client_cpu": _fig(pure["poll_batch_cpu"], "us/rec"),
        "poll_batch_c_vs_pure": _fig(pure["poll_batch_ratio"], "x", codec=codec,
                                     what="median of per-repetition ratios"),
        "produce_latency_p50": _fig(p50, "ms", flush_policy=FLUSH, rate="5000 rec/s"),
        "produce_latency_p99": _fig(p99, "ms", flush_policy=FLUSH, rate="5000 rec/s"),
        "raw_socket_to_file": _fig(raw, "MB/s", interleaved_with="large_batch"),
        "large_batch": _fig(large, "MB/s", flush_policy=FLUSH, ratio_of="raw_socket_to_file"),
        "large_batch_no_fsync": _fig(large_nofsync, "MB/s", flush_policy="none",
                                     ratio_of="raw_socket_to_file"),
        "large_batch_no_fsync_ratio": _fig(nofsync_ratios, "x", flush_policy="none",
                                           note="median of per-pair ratios to the raw copy"),
        "large_batch_ratio": _fig(pair_ratios, "x", flush_policy=FLUSH,
                                  what="median of per-pair ratios large_batch / raw_socket_to_file"),
    }
    if ck_cpu:
        out["confluent_produce_client_cpu"] = _fig(ck_cpu, "us/rec", peer="confluent-kafka, no broker")
        out["producer_cpu_vs_confluent"] = _fig(cpu_vs_ck, "x", what="median of per-repetition ratios",
                                                target="<= 1.0")
        out["producer_caller_cpu_vs_confluent"] = _fig(
            caller_vs_ck, "x", what="median of per-repetition ratios, send()'s thread only")
    if nats_pub:
        out["nats_publish"] = _fig(nats_pub, "msg/s", flush_policy="JetStream default (2 min)")
        out["nats_consume"] = _fig(nats_cons, "msg/s")
        out["producer_send"]["ratio_of"] = "nats_publish"
        out["consumer"]["ratio_of"] = "nats_consume"
        out["producer_vs_nats"] = _fig(prod_vs_nats, "x", what="median of per-repetition ratios")
        out["consumer_vs_nats"] = _fig(cons_vs_nats, "x", what="median of per-repetition ratios")
    return out
