"""Kafka listener vs native protocol, same cluster, same run (issue 23's speed targets).

Theory of operation: one 3-node ``rafka cluster up`` (every node has a Kafka listener); per
repetition, fresh topics, and for RF 1 and RF 3 in turn:

* ``native_send_rf{1,3}``: records/s of rafka's own ``Producer.send()`` (acks=all, linger 5 ms,
  256 KiB batches, 200-byte values, 16-byte keys), flush included;
* ``kafka_produce_rf{1,3}``: the same records through confluent-kafka's ``produce()`` to the
  Kafka listeners (acks=all, linger 5 ms, 256 KiB batches, no compression), flush included —
  its ``ratio`` is against ``native_send`` of the same RF (target ≥ 0.7);
* ``native_consume`` / ``kafka_consume`` (RF 1 topics written above): records/s of the native
  ``Consumer.poll`` and of confluent-kafka's ``consume()`` reading everything from the start,
  timed from the first record received to the last (start-up left out of both; target ≥ 0.7),
  and ``*_consume_client_cpu``: the consuming process's CPU µs per record meanwhile (all its
  threads: librdkafka's included) — a consumer at 1 / its CPU per record is client-bound;
* ``kcat_consume``: the same records read by kcat (librdkafka in C, its output read in 64 KiB
  chunks), timed the same way — with no Python per record it tells what the broker's Kafka
  fetch path can serve apart from what confluent-kafka's Python layer can take;
* ``broker_cpu_per_record_{native,kafka}_produce`` and ``..._consume``: CPU µs per record the
  node processes spent (``/proc/<pid>/stat``, idle rate subtracted: ``bench/broker_cpu.py``)
  during the RF 1 produce / consume phases; the Kafka figure's ``ratio`` is against the native
  one. With real clients it also carries each client's pace: the slower producer makes the
  broker group fewer requests per fsync round and wake more often per request (a native
  producer paced to confluent-kafka's rate costs the broker ~25–40 % more per record than
  unpaced, docs/performance.md);
* ``broker_cpu_per_record_raw_{native,kafka}_produce`` and their ratio (target ≤ 1.2): the same
  comparison with identical raw-socket clients sending the same records at the same pace, one
  batch per request, four in flight (``bench/kafka_raw_produce.py``, its own single-node
  cluster): what a Kafka batch costs the broker against a native one, and nothing else;
* ``broker_cpu_per_record_raw_{native,kafka}_fetch`` and their ratio (target ≤ 1.2): the same
  for reading — identical raw-socket readers fetching the same records, stored as each
  protocol's clients write them, 1 MiB per fetch (``bench/kafka_raw_fetch.py``);
* ``{native_send,kafka_produce}_client_cpu_rf{1,3}``: the producing process's CPU µs per record
  (all threads) — a producer at 1 / its CPU per record is client-bound.

Each figure is the median over the repetitions; ratios of medians are computed by
``bench/__main__.py``, and the ``*_vs_*`` figures are medians of per-repetition ratios. The
machine is small and shared: the ratios are what to read.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from rafka.client import Admin, Consumer, Producer, TopicPartition

from bench.broker_cpu import CpuMeter, cluster_pids_and_metrics
from bench.cluster import cluster_dir
from bench.kafka_raw_fetch import measure as measure_raw_fetch
from bench.kafka_raw_produce import measure as measure_raw

N = 300_000
VALUE = b"v" * 200
KEYS = [b"key-%012d" % i for i in range(1024)]
NODES = 3


def _native_send(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    """(records/s, client CPU µs per record: this process, every thread)."""
    with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                  batch_size=256 * 1024) as p:
        p.send(topic, value=VALUE, key=KEYS[0], partition=0).result(timeout=30)  # warm-up
        send = p.send
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(n):
            send(topic, value=VALUE, key=KEYS[i & 1023], partition=0)
        p.flush()
        return n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1e6


def _kafka_produce(kafka_bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    """``_native_send`` through confluent-kafka's ``produce()``; every failed record reaches the
    delivery callback (and fails the run), delivered ones are not reported one by one."""
    from confluent_kafka import Producer as CProducer

    errors: list[Any] = []
    # delivery.report.only.error: the callback runs for failed records only — the bench needs
    # nothing else of a delivery, and the native send() resolves no per-record callback
    # either; with a Python callback per delivered record confluent-kafka's own CPU per
    # record was 1.7-2.6 us against send()'s 0.7-1.0 (session 14)
    p = CProducer({"bootstrap.servers": kafka_bootstrap, "acks": "all", "linger.ms": 5,
                   "batch.size": 256 * 1024, "queue.buffering.max.messages": 2 * n,
                   "queue.buffering.max.kbytes": 1 << 21, "compression.type": "none",
                   "delivery.report.only.error": True})
    p.produce(topic, value=VALUE, key=KEYS[0], partition=0)  # warm-up: metadata, connection
    assert p.flush(30) == 0
    produce, poll = p.produce, p.poll

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        produce(topic, value=VALUE, key=KEYS[i & 1023], partition=0, on_delivery=report)
        if i & 4095 == 0:
            poll(0)
    left = p.flush(120)
    rate = n / (time.perf_counter() - t0)
    client = (time.process_time() - c0) / n * 1e6
    if left or errors:
        raise RuntimeError(f"confluent-kafka produce: {left} undelivered, errors {errors[:3]}")
    return rate, client


def _native_consume(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    """(records/s, client CPU µs per record — this process, every thread) from the first
    record polled to the ``n``-th (both consumers are timed the same way: their start-up —
    metadata, offset lookup — is left out)."""
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                  enable_auto_commit=False) as c:
        c.assign([TopicPartition(topic, 0)])
        c.seek_to_beginning()
        got, first, t0, c0 = 0, 0, 0.0, 0.0
        while got < n:
            k = sum(len(v) for v in c.poll(1000, 100_000).values())
            if k and not got:
                first, t0, c0 = k, time.perf_counter(), time.process_time()
            got += k
        return ((got - first) / (time.perf_counter() - t0),
                (time.process_time() - c0) / max(1, got - first) * 1e6)


def _kafka_consume(kafka_bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    """``_native_consume`` through confluent-kafka's ``consume()`` (batches of at most what is
    still missing, so the last call does not wait out its timeout)."""
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import TopicPartition as CTP

    # fetch.queue.backoff.ms: librdkafka (2.x) stops prefetching for that long (default 1 s)
    # once its queue holds queued.min.messages (100k); the application drains 100k records in
    # ~0.1 s here and then waits ~0.9 s for the next fetch (measured: max gap between
    # consume() calls 0.9 s, 200k rec/s; with 10 ms, 0.03 s and 710-760k rec/s) — against a
    # Kafka broker just the same, so it is tuned, like the fetch sizes
    # enable.auto.offset.store: off, as this reader commits nothing (the native one neither);
    # on, librdkafka stores every consumed message's offset for a later commit, and the
    # consumer ran at 0.80-0.95M rec/s against 1.04-1.42M without (3 alternating pairs, one
    # node, session 14) — a setting for any Kafka consumer that does not commit
    c = CConsumer({"bootstrap.servers": kafka_bootstrap, "group.id": "bench-unused",
                   "enable.auto.commit": False, "enable.auto.offset.store": False,
                   "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 8 << 20,
                   "fetch.queue.backoff.ms": 10})
    try:
        c.assign([CTP(topic, 0, OFFSET_BEGINNING)])
        got, first, t0, c0 = 0, 0, 0.0, 0.0
        deadline = time.monotonic() + 300
        while got < n and time.monotonic() < deadline:
            k = 0
            for m in c.consume(num_messages=min(10_000, n - got), timeout=1):
                if m.error() is None:
                    k += 1
            if k and not got:
                first, t0, c0 = k, time.perf_counter(), time.process_time()
            got += k
        if got < n:
            raise RuntimeError(f"confluent-kafka consumed {got} of {n} records")
        return ((got - first) / (time.perf_counter() - t0),
                (time.process_time() - c0) / max(1, got - first) * 1e6)
    finally:
        c.close()


def _kcat_consume(kafka_bootstrap: str, topic: str, n: int) -> float | None:
    """records/s of kcat (librdkafka in C, no Python per record) reading ``n`` records from the
    start, timed like the others from its first output to its ``n``-th record; None without
    kcat. It tells the broker's Kafka fetch path apart from confluent-kafka's Python layer."""
    import shutil
    import subprocess

    if shutil.which("kcat") is None:
        return None
    proc = subprocess.Popen(
        ["kcat", "-C", "-b", kafka_bootstrap, "-t", topic, "-p", "0", "-o", "beginning",
         "-c", str(n), "-q", "-f", "%o\\n", "-X", "fetch.max.bytes=52428800",
         "-X", "max.partition.fetch.bytes=8388608"],  # its librdkafka (2.0.2) has no queue backoff
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    got, first, t0 = 0, 0, 0.0
    while chunk := proc.stdout.read1(1 << 16):
        k = chunk.count(b"\n")
        if k and not got:
            first, t0 = k, time.perf_counter()
        got += k
    t1 = time.perf_counter()
    if proc.wait(timeout=60) != 0 or got < n:
        err = proc.stderr.read().decode(errors="replace")[-500:] if proc.stderr else ""
        raise RuntimeError(f"kcat consumed {got} of {n} records (exit {proc.returncode}): {err}")
    return (got - first) / (t1 - t0)


def _fig(values: list[float], unit: str, **extra: Any) -> dict[str, Any]:
    return {"median": statistics.median(values), "unit": unit, "runs": values, **extra}


def run(runs: int = 3) -> dict[str, Any]:
    figs: dict[str, list[float]] = {}

    def add(name: str, v: float) -> None:
        figs.setdefault(name, []).append(v)

    with cluster_dir(NODES) as (bootstrap, data, port):
        kafka_bootstrap = ",".join(f"127.0.0.1:{port + 5000 + i}" for i in range(NODES))
        pids, urls = cluster_pids_and_metrics(Path(data))
        meter = CpuMeter(pids, urls)
        with Admin(bootstrap_servers=bootstrap) as a:
            for r in range(runs):
                for rf in (1, 3):
                    for kind in ("native", "kafka"):
                        a.create_topic(f"{kind}-rf{rf}-{r}", 1, rf)
        time.sleep(2)  # leaders settle
        meter.idle(2.0)
        for r in range(runs):
            for rf in (1, 3):
                meter.start()
                native, native_client = _native_send(bootstrap, f"native-rf{rf}-{r}", N)
                native_cpu = meter.stop(N + 1)["cpu_us"]
                meter.start()
                kafka, kafka_client = _kafka_produce(kafka_bootstrap, f"kafka-rf{rf}-{r}", N)
                kafka_cpu = meter.stop(N + 1)["cpu_us"]
                add(f"native_send_client_cpu_rf{rf}", native_client)
                add(f"kafka_produce_client_cpu_rf{rf}", kafka_client)
                add(f"native_send_rf{rf}", native)
                add(f"kafka_produce_rf{rf}", kafka)
                add(f"kafka_vs_native_produce_rf{rf}", kafka / native)
                if rf == 1:
                    add("broker_cpu_per_record_native_produce", native_cpu)
                    add("broker_cpu_per_record_kafka_produce", kafka_cpu)
                    add("broker_cpu_kafka_vs_native_produce", kafka_cpu / max(native_cpu, 1e-9))
            meter.start()
            nc, nc_client = _native_consume(bootstrap, f"native-rf1-{r}", N + 1)
            nc_cpu = meter.stop(N + 1)["cpu_us"]
            meter.start()
            kc, kc_client = _kafka_consume(kafka_bootstrap, f"kafka-rf1-{r}", N + 1)
            kc_cpu = meter.stop(N + 1)["cpu_us"]
            add("native_consume_client_cpu", nc_client)
            add("kafka_consume_client_cpu", kc_client)
            add("native_consume", nc)
            add("kafka_consume", kc)
            add("kafka_vs_native_consume", kc / nc)
            add("broker_cpu_per_record_native_consume", nc_cpu)
            add("broker_cpu_per_record_kafka_consume", kc_cpu)
            kcat = _kcat_consume(kafka_bootstrap, f"kafka-rf1-{r}", N + 1)
            if kcat is not None:
                add("kcat_consume", kcat)
                add("kcat_vs_native_consume", kcat / nc)
    for phase, measure in (("produce", measure_raw), ("fetch", measure_raw_fetch)):
        raw = measure(rounds=max(4, 2 * runs))
        figs[f"broker_cpu_per_record_raw_native_{phase}"] = raw["native"]
        figs[f"broker_cpu_per_record_raw_kafka_{phase}"] = raw["kafka"]
        figs[f"broker_cpu_raw_kafka_vs_native_{phase}"] = [
            k / max(nv, 1e-9) for k, nv in zip(raw["kafka"], raw["native"], strict=True)]
    out: dict[str, Any] = {}
    for rf in (1, 3):
        out[f"native_send_rf{rf}"] = _fig(figs[f"native_send_rf{rf}"], "rec/s", acks="all")
        out[f"native_send_client_cpu_rf{rf}"] = _fig(
            figs[f"native_send_client_cpu_rf{rf}"], "us/rec", what="the producing process, all threads")
        out[f"kafka_produce_client_cpu_rf{rf}"] = _fig(
            figs[f"kafka_produce_client_cpu_rf{rf}"], "us/rec", what="the producing process, all threads",
            ratio_of=f"native_send_client_cpu_rf{rf}")
        out[f"kafka_produce_rf{rf}"] = _fig(figs[f"kafka_produce_rf{rf}"], "rec/s", acks="all",
                                            client="confluent-kafka",
                                            ratio_of=f"native_send_rf{rf}")
        out[f"kafka_vs_native_produce_rf{rf}"] = _fig(
            figs[f"kafka_vs_native_produce_rf{rf}"], "x", target=">= 0.7",
            what="median of per-repetition ratios")
    out["native_consume"] = _fig(figs["native_consume"], "rec/s")
    out["kafka_consume"] = _fig(figs["kafka_consume"], "rec/s", client="confluent-kafka",
                                ratio_of="native_consume")
    out["native_consume_client_cpu"] = _fig(figs["native_consume_client_cpu"], "us/rec",
                                            what="the consuming process, all threads")
    out["kafka_consume_client_cpu"] = _fig(figs["kafka_consume_client_cpu"], "us/rec",
                                           what="the consuming process, all threads",
                                           ratio_of="native_consume_client_cpu")
    out["kafka_vs_native_consume"] = _fig(figs["kafka_vs_native_consume"], "x", target=">= 0.7",
                                          what="median of per-repetition ratios")
    if "kcat_consume" in figs:
        out["kcat_consume"] = _fig(figs["kcat_consume"], "rec/s", client="kcat (librdkafka, C)",
                                   ratio_of="native_consume")
        out["kcat_vs_native_consume"] = _fig(figs["kcat_vs_native_consume"], "x",
                                             what="median of per-repetition ratios")
    for phase in ("produce", "consume"):
        out[f"broker_cpu_per_record_native_{phase}"] = _fig(
            figs[f"broker_cpu_per_record_native_{phase}"], "us/rec", rf=1)
        out[f"broker_cpu_per_record_kafka_{phase}"] = _fig(
            figs[f"broker_cpu_per_record_kafka_{phase}"], "us/rec", rf=1,
            ratio_of=f"broker_cpu_per_record_native_{phase}")
    out["broker_cpu_kafka_vs_native_produce"] = _fig(
        figs["broker_cpu_kafka_vs_native_produce"], "x",
        what="median of per-repetition ratios; each client at its own pace (see the doc)")
    for phase, script in (("produce", "bench/kafka_raw_produce.py"), ("fetch", "bench/kafka_raw_fetch.py")):
        client = f"raw socket, the same requests at the same pace ({script})"
        out[f"broker_cpu_per_record_raw_native_{phase}"] = _fig(
            figs[f"broker_cpu_per_record_raw_native_{phase}"], "us/rec", rf=1, client=client)
        out[f"broker_cpu_per_record_raw_kafka_{phase}"] = _fig(
            figs[f"broker_cpu_per_record_raw_kafka_{phase}"], "us/rec", rf=1, client=client,
            ratio_of=f"broker_cpu_per_record_raw_native_{phase}")
        out[f"broker_cpu_raw_kafka_vs_native_{phase}"] = _fig(
            figs[f"broker_cpu_raw_kafka_vs_native_{phase}"], "x", target="<= 1.2",
            what="median of per-round ratios")
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(1), indent=1))
