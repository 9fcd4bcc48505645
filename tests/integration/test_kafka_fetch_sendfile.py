"""Kafka fetches whose stored Kafka batches leave the segment file by sendfile
(broker/kafka/file_records.py), on a real ``rafka cluster up`` node: the bytes a raw client
reads, what librdkafka (CRC checks on) reads, and the node's metrics saying which path served."""

from __future__ import annotations

import socket
import struct
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from rafka.broker.kafka import codec
from rafka.broker.kafka import records as kr
from rafka.client import Producer
from rafka.client.metrics_view import parse_metrics

from rafka.cluster import METRICS_PORT_OFFSET
from tests.integration.conftest import LocalCluster
from tests.integration.test_kafka_clients import _roundtrip, create, kafka_bootstrap

pytestmark = pytest.mark.timeout(240)

BATCH = 1200  # records per batch: ~270 KB, as a busy Kafka producer's


@pytest.fixture(scope="module")
def cluster1(module_cluster1: LocalCluster) -> LocalCluster:
    return module_cluster1


def _addr(c: LocalCluster) -> tuple[str, int]:
    host, port = kafka_bootstrap(c).split(",")[0].split(":")
    return host, int(port)


def _fetch_bytes(c: LocalCluster) -> dict[str, float]:
    url = f"http://127.0.0.1:{c.port + METRICS_PORT_OFFSET}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        s = parse_metrics(url, time.monotonic(), resp.read().decode())
    return {path: s.get("rafka_kafka_fetch_records_bytes_total", path=path) or 0.0
            for path in ("sendfile", "memory")}


def _batch(base: int, n: int, value_size: int = 200) -> bytes:
    rows = [kr.KafkaRow(i, i, b"key-%08d" % (base + i), b"%08d" % (base + i) + b"v" * value_size,
                        [("n", b"%d" % (base + i))]) for i in range(n)]
    return kr.encode_batch(rows, first_timestamp=1_700_000_000_000 + base)


def _produce(c: LocalCluster, topic: str, batches: list[bytes]) -> None:
    for i, b in enumerate(batches):
        req = codec.build(codec.request_schema(0, 9), {
            "transactional_id": None, "acks": -1, "timeout": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": b}]}]})
        _, resp = codec.decode_response(_roundtrip(_addr(c), codec.encode_request(req, i)), 0, 9)
        assert int(resp.responses[0].partition_responses[0].error_code) == 0


def _fetch_frame(topic: str, offset: int, version: int, cid: int) -> bytes:
    req = codec.build(codec.request_schema(1, version), {
        "cluster_id": None, "replica_id": -1, "max_wait": 0, "min_bytes": 0,
        "max_bytes": 50 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
             "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    return codec.encode_request(req, cid)


def _read_frames(sock: socket.socket, n: int) -> list[bytes]:
    buf, out = b"", []
    while len(out) < n:
        while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
            chunk = sock.recv(1 << 20)
            assert chunk, "the listener closed the connection"
            buf += chunk
        k = 4 + struct.unpack_from(">i", buf)[0]
        out.append(buf[4:k])
        buf = buf[k:]
    return out


def _batches_of(records: bytes) -> list[bytes]:
    return [records[p:p + 12 + struct.unpack_from(">i", records, p + 8)[0]]
            for p in kr.iter_kafka_batches(records)]


def test_big_kafka_batches_leave_by_sendfile_byte_for_byte(cluster1: LocalCluster) -> None:
    topic = "sendfile-big"
    create(cluster1, topic)
    produced = [_batch(i * BATCH, BATCH) for i in range(5)]
    _produce(cluster1, topic, produced)
    before = _fetch_bytes(cluster1)

    # pipelined on one connection: two fetches (flexible v12 and v11), then ApiVersions — each
    # answer whole and in order, whatever way it left
    api_versions = codec.encode_request(codec.build(codec.request_schema(18, 3), {
        "client_software_name": "t", "client_software_version": "1"}), 3)
    with socket.create_connection(_addr(cluster1), timeout=30) as sock:
        sock.sendall(_fetch_frame(topic, 0, 12, 1) + _fetch_frame(topic, BATCH + 300, 11, 2)
                     + api_versions)
        f12, f11, av = _read_frames(sock, 3)
    assert codec.decode_response(av, 18, 3)[0] == 3
    for payload, version, first in ((f12, 12, 0), (f11, 11, 1)):
        cid, body = codec.decode_response(payload, 1, version)
        assert cid == (1 if version == 12 else 2)
        (p,) = body.responses[0].partitions
        assert int(p.error_code) == 0 and p.high_watermark == 5 * BATCH
        got = _batches_of(p.records)
        assert len(got) >= 2  # 1 MiB holds three or four whole batches of ~270 KB
        for i, b in enumerate(got, start=first):
            # the broker stamped offset and leader epoch (bytes 0-11, 12-15); from the magic on
            # every byte is the producer's, the magic 2 again, the CRC the producer's
            assert struct.unpack_from(">q", b)[0] == i * BATCH
            assert b[16:] == produced[i][16:]
            assert kr.decode_batch(b)[1][7].key == b"key-%08d" % (i * BATCH + 7)
    after = _fetch_bytes(cluster1)
    assert after["sendfile"] - before["sendfile"] == len(
        codec.decode_response(f12, 1, 12)[1].responses[0].partitions[0].records) + len(
        codec.decode_response(f11, 1, 11)[1].responses[0].partitions[0].records)

    # librdkafka reads them through the same path, checking every CRC
    confluent_kafka = pytest.importorskip("confluent_kafka")
    cons = confluent_kafka.Consumer({"bootstrap.servers": kafka_bootstrap(cluster1),
                                     "group.id": "sendfile-reader", "auto.offset.reset": "earliest",
                                     "enable.auto.commit": False, "check.crcs": True})
    try:
        cons.subscribe([topic])
        seen: list[Any] = []
        deadline = time.monotonic() + 60
        while len(seen) < 5 * BATCH and time.monotonic() < deadline:
            for m in cons.consume(num_messages=10_000, timeout=1):
                assert m.error() is None, m.error()
                seen.append((m.offset(), m.key(), m.value()[:8], m.headers()))
    finally:
        cons.close()
    assert [s[0] for s in seen] == list(range(5 * BATCH))
    assert all(k == b"key-%08d" % o and v == b"%08d" % o and h == [("n", b"%d" % o)]
               for o, k, v, h in seen)
    assert _fetch_bytes(cluster1)["sendfile"] > after["sendfile"]


def test_slices_that_cannot_leave_by_sendfile_are_answered_from_memory(cluster1: LocalCluster) -> None:
    """A native batch among Kafka ones is converted, and many small Kafka batches are cheaper
    to copy than to send three syscalls each: both are read into memory, and right."""
    mixed, small = "sendfile-mixed", "sendfile-small"
    create(cluster1, mixed)
    create(cluster1, small)
    _produce(cluster1, mixed, [_batch(0, BATCH)])
    with Producer(bootstrap_servers=cluster1.bootstrap, acks="all", linger_ms=50) as p:
        for i in range(BATCH, 2 * BATCH):  # one native batch (or a few)
            p.send(mixed, key=b"key-%08d" % i, value=b"%08d" % i + b"v" * 200,
                   headers=[("n", b"%d" % i)], partition=0)
        p.flush()
    _produce(cluster1, mixed, [_batch(2 * BATCH, BATCH)])
    _produce(cluster1, small, [_batch(i * 5, 5) for i in range(60)])  # 60 batches of ~1.2 KB

    before = _fetch_bytes(cluster1)
    for topic, end in ((mixed, 3 * BATCH), (small, 300)):
        offset = 0
        while offset < end:
            _, body = codec.decode_response(_roundtrip(_addr(cluster1), _fetch_frame(topic, offset, 12, 1)),
                                            1, 12)
            (p,) = body.responses[0].partitions
            assert int(p.error_code) == 0
            for b in _batches_of(p.records):
                assert b[16] == 2
                h, rows = kr.decode_batch(b)  # CRC checked: a converted batch is a good one too
                for r in rows:
                    o = h.base_offset + r.offset_delta
                    assert o == offset and r.key == b"key-%08d" % o and r.value[:8] == b"%08d" % o
                    assert list(r.headers) == [("n", b"%d" % o)]
                    offset += 1
    after = _fetch_bytes(cluster1)
    assert after["sendfile"] == before["sendfile"]
    assert after["memory"] > before["memory"]


def test_readers_that_hang_up_mid_answer_leave_no_descriptor_behind(cluster1: LocalCluster) -> None:
    """A FileFrame owns a segment descriptor until it is out: a peer that leaves first (here
    with a tiny receive buffer, so the answer cannot be out) must not leak it."""
    topic = "sendfile-hangup"
    create(cluster1, topic)
    _produce(cluster1, topic, [_batch(i * BATCH, BATCH) for i in range(4)])
    pid = cluster1.pids()[1]
    assert pid is not None

    def fds() -> int:
        return len(list(Path(f"/proc/{pid}/fd").iterdir()))

    with socket.create_connection(_addr(cluster1), timeout=30) as warm:  # the path, once, whole
        warm.sendall(_fetch_frame(topic, 0, 12, 1))
        _read_frames(warm, 1)
    before = fds()
    for i in range(30):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(_addr(cluster1))
        s.sendall(_fetch_frame(topic, 0, 12, i))
        s.recv(100)  # the answer has started: the rest is stuck behind the small window
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # a reset
    deadline = time.monotonic() + 30
    while fds() > before + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert fds() <= before + 2, f"{fds() - before} descriptors more than before the hang-ups"
    # and the listener still serves
    with socket.create_connection(_addr(cluster1), timeout=30) as again:
        again.sendall(_fetch_frame(topic, 0, 12, 99))
        (payload,) = _read_frames(again, 1)
    assert len(_batches_of(codec.decode_response(payload, 1, 12)[1].responses[0].partitions[0].records)) >= 2
