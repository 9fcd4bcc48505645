"""Broker CPU per produce request, Kafka listener vs native listener, from identical raw clients.

``.venv/bin/python -m bench.kafka_raw_produce [ROUNDS] [REQUESTS] [RECORDS]`` (default 4 rounds
of 250 requests of 1,200 records: 300k records per phase, 200-byte values, 16-byte keys).

Theory of operation: issue 23 asks that a Kafka-protocol batch cost the broker at most 1.2× the
CPU of a native batch of the same records. Measured through real clients (``bench_kafka.py``)
that ratio also carries the clients' pacing — a slower client makes the broker group fewer
requests per fsync round and wake more often per request, whatever protocol it speaks (a native
producer paced to confluent-kafka's rate costs the broker as much more per record as the Kafka
path does). Here both protocols get the same requests at the same pace: one blocking socket per
phase, ``IN_FLIGHT`` requests outstanding (closed loop), each one batch of the same records in
its own format — a Kafka v2 batch in Produce v9 to the Kafka listener, a rafka batch in
PRODUCE to the native one — acks=all, no producer id. Phases alternate (native, Kafka, Kafka,
native, ...) on one single-node cluster; the broker's CPU comes from ``/proc/<pid>/stat``
(idle rate subtracted, ``bench/broker_cpu.py``). Prints per round and the medians: broker CPU
µs per record and per request for each protocol, and their ratio. Every answer is checked
(error code 0) and the end offsets are checked at the end: a run that lost or refused a
record fails instead of reporting. ``bench_kafka.py`` runs ``measure`` as part of ``make bench``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import struct
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rafka.broker.kafka import codec
from rafka.broker.kafka import records as kr
from rafka.client import Admin, Consumer, TopicPartition
from rafka.log import batch as nb
from rafka.wire.protocol import ApiKey, Request, decode_response, encode_request

from bench.broker_cpu import CpuMeter, cluster_pids_and_metrics
from bench.cluster import cluster_dir

IN_FLIGHT = 4
VALUE = b"v" * 200


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionError("broker closed the connection")
        got += k
    return bytes(buf)


def _frames(kind: str, topic: str, records: int, requests: int) -> list[bytes]:
    ts = int(time.time() * 1000)
    rows = [kr.KafkaRow(i, 0, b"key-%012d" % i, VALUE, []) for i in range(records)]
    if kind == "kafka":
        batch = kr.encode_batch(rows, first_timestamp=ts)
        out = []
        for c in range(requests):
            req = codec.build(codec.request_schema(0, 9), {
                "transactional_id": None, "acks": -1, "timeout": 30000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
            out.append(codec.encode_request(req, c))
        return out
    batch = nb.build_batch([(r.key, r.value, [], ts) for r in rows])
    return [encode_request(Request(int(ApiKey.PRODUCE), c, {
        "acks": -1, "timeout_ms": 30000,
        "topics": [{"name": topic, "partitions": [{"partition": 0, "records": batch}]}]}))
        for c in range(requests)]


def _check(kind: str, payload: bytes) -> None:
    if kind == "kafka":
        _, body = codec.decode_response(payload, 0, 9)
        errs = [p.error_code for t in body.responses for p in t.partition_responses]
    else:
        resp = decode_response(payload)
        errs = [resp.body.get("error", 0)] + [
            p.get("error", 0) for t in resp.body.get("topics", []) for p in t["partitions"]]
    if any(errs):
        raise RuntimeError(f"{kind} produce answered errors {errs}")


def _phase(addr: tuple[str, int], kind: str, frames: list[bytes]) -> None:
    with socket.create_connection(addr) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = answered = 0
        while answered < len(frames):
            while sent < len(frames) and sent - answered < IN_FLIGHT:
                sock.sendall(frames[sent])
                sent += 1
            (n,) = struct.unpack(">i", _recv_exact(sock, 4))
            _check(kind, _recv_exact(sock, n))
            answered += 1


@contextlib.contextmanager
def raw_cluster(prefix: str) -> Iterator[tuple[str, CpuMeter, dict[str, tuple[str, int]]]]:
    """A fresh single-node cluster with one single-partition topic per protocol
    (``{prefix}-native``, ``{prefix}-kafka``): (bootstrap, a meter of its node, each
    protocol's listener address)."""
    with cluster_dir(1) as (bootstrap, data, port):
        pids, urls = cluster_pids_and_metrics(Path(data))
        addrs = {"native": ("127.0.0.1", port), "kafka": ("127.0.0.1", port + 5000)}
        with Admin(bootstrap_servers=bootstrap) as a:
            for kind in addrs:
                a.create_topic(f"{prefix}-{kind}", 1, 1)
        yield bootstrap, CpuMeter(pids, urls), addrs


def measure(rounds: int = 4, requests: int = 250, records: int = 1200,
            echo: bool = False) -> dict[str, list[float]]:
    """Per round, broker CPU µs per record of each protocol (``native``, ``kafka``) and the
    producing socket's records/s (``*_rate``), on a fresh single-node cluster (module doc)."""
    n = requests * records
    with raw_cluster("raw") as (bootstrap, meter, addrs):
        frames = {kind: _frames(kind, f"raw-{kind}", records, requests) for kind in addrs}
        for kind, addr in addrs.items():  # warm-up: connections, leader state, code paths
            _phase(addr, kind, frames[kind][:20])
        time.sleep(1.0)
        meter.idle(2.0)
        out = alternate(rounds, meter, n, lambda kind: _phase(addrs[kind], kind, frames[kind]),
                        echo, per=("request", records))
        expected = (20 + rounds * requests) * records
        with Consumer(bootstrap_servers=bootstrap) as c:
            ends = c.end_offsets([TopicPartition(f"raw-{kind}", 0) for kind in addrs])
        if sorted(ends.values()) != [expected, expected]:
            raise RuntimeError(f"end offsets {ends}, expected {expected} each")
    return out


def alternate(rounds: int, meter: CpuMeter, n: int, phase: Callable[[str], object], echo: bool,
              per: tuple[str, int]) -> dict[str, list[float]]:
    """Run ``phase(kind)`` (``n`` records) for native and Kafka in turn, ABBA across rounds;
    per round and kind the broker's CPU µs per record and the records/s (``{kind}_rate``).
    ``per``: (unit, records in one) for the echoed CPU per request or fetch."""
    out: dict[str, list[float]] = {"native": [], "kafka": [], "native_rate": [], "kafka_rate": []}
    order = ["native", "kafka"]
    for r in range(rounds):
        for kind in (order if r % 2 == 0 else order[::-1]):
            meter.start()
            t0 = time.perf_counter()
            phase(kind)
            secs = time.perf_counter() - t0
            us = meter.stop(n)["cpu_us"]
            out[kind].append(us)
            out[f"{kind}_rate"].append(n / secs)
            if echo:
                print(f"round {r} {kind:6} {n / secs:10,.0f} rec/s  broker {us:.3f} µs/rec "
                      f"{us * per[1]:7.1f} µs/{per[0]}  load {os.getloadavg()[0]:.2f}", flush=True)
    return out


def report(cpu: dict[str, list[float]], what: str) -> None:
    nat, kaf = statistics.median(cpu["native"]), statistics.median(cpu["kafka"])
    ratios = [k / nv for k, nv in zip(cpu["kafka"], cpu["native"], strict=True)]
    print(f"median broker µs/record {what}: native {nat:.3f}, kafka {kaf:.3f}; ratio of medians "
          f"{kaf / nat:.2f}, median of per-round ratios {statistics.median(ratios):.2f}")


def main(rounds: int = 4, requests: int = 250, records: int = 1200) -> None:
    report(measure(rounds, requests, records, echo=True), "produced")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))
