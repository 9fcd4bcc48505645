"""Broker CPU per record fetched, Kafka listener vs native listener, from identical raw clients.

``.venv/bin/python -m bench.kafka_raw_fetch [ROUNDS] [REQUESTS] [RECORDS]`` (default 4 rounds;
the log holds 250 batches of 1,200 records per protocol: 300k records, 200-byte values).

Theory of operation: the fetch half of issue 23's "a Kafka-protocol batch costs the broker at
most 1.2× a native one". ``bench/kafka_raw_produce.py`` writes the same records to two topics
of a single-node cluster, each batch in its own protocol's format (so each topic holds batches
exactly as that protocol's clients write them). Then, per round and protocol in alternating
order (native, Kafka, Kafka, native, ...), one blocking socket reads its topic from offset 0
to the end ``PASSES`` times, one fetch at a time (closed loop), 1 MiB per partition per fetch (librdkafka's and
the native consumer's default) — Fetch v12 to the Kafka listener, FETCH to the native one. The
broker's CPU comes from ``/proc/<pid>/stat`` (idle rate subtracted, ``bench/broker_cpu.py``).
The reader walks every answer's batches by their headers: each must be magic 2 with a good
CRC-32C (Kafka: the bytes a Kafka client checks), the offsets must run on without a gap, and
every record must be read: a run that serves a wrong byte fails instead of reporting.
"""

from __future__ import annotations

import socket
import struct
import sys

from crc32c import crc32c
from rafka.broker.kafka import codec
from rafka.wire.protocol import ApiKey, Request, decode_response, encode_request

from bench.kafka_raw_produce import _frames, _phase, _recv_exact, alternate, raw_cluster, report

PARTITION_MAX_BYTES = 1 << 20
PASSES = 10  # reads of the whole topic per phase: ~0.4 s of broker CPU, against /proc's 10 ms ticks
_HEAD = struct.Struct(">qiibIhi")  # base offset, length, leader epoch, magic, crc, attrs, last delta


def _walk(records: bytes | memoryview, expect: int, kafka: bool) -> int:
    """The next offset after the whole batches of ``records``, which must start at ``expect``
    (or hold it: a fetch answers the batch that contains the asked offset)."""
    pos, end = 0, len(records)
    while end - pos >= 61:
        base, length, _, magic, crc, _, last = _HEAD.unpack_from(records, pos)
        stop = pos + 12 + length
        if stop > end:
            break
        if magic != 2:
            raise RuntimeError(f"magic {magic} at offset {base}")
        if kafka and crc32c(records[pos + 21:stop]) != crc:
            raise RuntimeError(f"bad CRC in the batch at offset {base}")
        if not base <= expect <= base + last:
            raise RuntimeError(f"batch {base}..{base + last} does not hold offset {expect}")
        expect = base + last + 1
        pos = stop
    return expect


def _fetch_frame(kind: str, topic: str, offset: int, cid: int) -> bytes:
    if kind == "kafka":
        req = codec.build(codec.request_schema(1, 12), {
            "cluster_id": None, "replica_id": -1, "max_wait": 0, "min_bytes": 0,
            "max_bytes": 50 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": PARTITION_MAX_BYTES}]}]})
        return codec.encode_request(req, cid)
    return encode_request(Request(int(ApiKey.FETCH), cid, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 50 << 20,
        "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition": 0, "fetch_offset": offset,
             "partition_max_bytes": PARTITION_MAX_BYTES, "current_leader_epoch": -1}]}]}))


def _records(kind: str, payload: bytes) -> bytes | memoryview:
    if kind == "kafka":
        _, body = codec.decode_response(payload, 1, 12)
        (p,) = body.responses[0].partitions
        if p.error_code:
            raise RuntimeError(f"kafka fetch answered error {p.error_code}")
        return p.records or b""
    resp = decode_response(payload)
    (p,) = resp.body["topics"][0]["partitions"]
    if p.get("error"):
        raise RuntimeError(f"native fetch answered error {p['error']}")
    return resp.raw


def _read_all(addr: tuple[str, int], kind: str, topic: str, end: int) -> int:
    """Fetch ``topic`` partition 0 from 0 to ``end``; returns the number of fetches."""
    offset = fetches = 0
    with socket.create_connection(addr) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while offset < end:
            fetches += 1
            sock.sendall(_fetch_frame(kind, topic, offset, fetches))
            (n,) = struct.unpack(">i", _recv_exact(sock, 4))
            nxt = _walk(_records(kind, _recv_exact(sock, n)), offset, kind == "kafka")
            if nxt == offset:
                raise RuntimeError(f"{kind}: no whole batch at offset {offset} of {end}")
            offset = nxt
    if offset != end:
        raise RuntimeError(f"{kind}: read to {offset}, expected {end}")
    return fetches


def measure(rounds: int = 4, requests: int = 250, records: int = 1200,
            echo: bool = False) -> dict[str, list[float]]:
    """Per round, broker CPU µs per record fetched for each protocol (``native``, ``kafka``)
    and the reading socket's records/s (``*_rate``), on a fresh single-node cluster."""
    n = requests * records
    with raw_cluster("rawf") as (_, meter, addrs):
        for kind, addr in addrs.items():
            _phase(addr, kind, _frames(kind, f"rawf-{kind}", records, requests))
        # warm-up: connections, page cache, code paths
        fetches = {kind: _read_all(addr, kind, f"rawf-{kind}", n) for kind, addr in addrs.items()}
        meter.idle(2.0)

        def phase(kind: str) -> None:
            for _ in range(PASSES):
                _read_all(addrs[kind], kind, f"rawf-{kind}", n)

        out = alternate(rounds, meter, n * PASSES, phase, echo,
                        per=("fetch", n // max(1, fetches["native"])))
    return out


def main(rounds: int = 4, requests: int = 250, records: int = 1200) -> None:
    report(measure(rounds, requests, records, echo=True), "fetched")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))
