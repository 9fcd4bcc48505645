"""Unmodified Kafka clients against rafka's Kafka listener (broker/kafka/, issue 23): kcat,
kafka-python and confluent-kafka (librdkafka), on real ``rafka cluster up`` nodes over
loopback, and records crossing between the Kafka and the native protocol both ways."""

from __future__ import annotations

import io
import json
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_entity_schema
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from rafka.broker.kafka import codec
from rafka.broker.kafka import records as kr
from rafka.client import Admin, Consumer, Producer, TopicPartition

from tests.integration.conftest import LocalCluster

kcat_missing = pytest.mark.skipif(shutil.which("kcat") is None,
                                  reason="kcat not installed (Debian package kcat: make os-deps)")

@pytest.fixture(scope="module")
def cluster1(module_cluster1: LocalCluster) -> LocalCluster:
    """One node for this module's tests (conftest: ``module_cluster1``); a test that
    restarts its node or changes cluster-wide settings takes ``cluster_factory(1)``."""
    return module_cluster1



def kafka_bootstrap(c: LocalCluster) -> str:
    return ",".join(n["kafka"] for n in c.info()["nodes"])


def create(c: LocalCluster, topic: str, partitions: int = 1, rf: int = 1,
           config: dict[str, str] | None = None) -> None:
    """Create with the native admin, then wait until every broker's Kafka listener names a
    leader for every partition (clients would retry meanwhile; tests should not depend on it)."""
    with Admin(bootstrap_servers=c.bootstrap) as a:
        a.create_topic(topic, partitions=partitions, replication_factor=rf, config=config,
                       exist_ok=True)
    req = codec.build(codec.request_schema(3, 12), {
        "topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})
    for addr in kafka_bootstrap(c).split(","):
        host, port = addr.split(":")
        deadline = time.monotonic() + 30
        while True:
            _, md = codec.decode_response(_roundtrip((host, int(port)), codec.encode_request(req, 1)),
                                          3, 12)
            t = md.topics[0]
            if (int(t.error_code) == 0 and len(t.partitions) == partitions
                    and all(p.leader_id >= 0 for p in t.partitions)):
                break
            assert time.monotonic() < deadline, f"{topic} has no leaders at {addr}: {t}"
            time.sleep(0.05)


def native_records(c: LocalCluster, topic: str, n: int, partitions: int = 1) -> list[Any]:
    out: list[Any] = []
    with Consumer(bootstrap_servers=c.bootstrap) as cons:
        cons.assign([TopicPartition(topic, p) for p in range(partitions)])
        cons.seek_to_beginning()
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            for recs in cons.poll(timeout_ms=500).values():
                out += recs
    return sorted(out, key=lambda r: (r.partition, r.offset))


# --------------------------------------------------------------------------- kcat


@kcat_missing
def test_kcat_metadata_produce_consume(cluster1: LocalCluster) -> None:
    kb = kafka_bootstrap(cluster1)
    create(cluster1, "kc", partitions=2)
    meta = json.loads(subprocess.run(["kcat", "-b", kb, "-L", "-J"], capture_output=True,
                                     text=True, timeout=30, check=True).stdout)
    host, port = kb.split(":")
    assert [(b["id"], b["name"]) for b in meta["brokers"]] == [(1, f"{host}:{port}")]
    topic = next(t for t in meta["topics"] if t["topic"] == "kc")
    assert sorted(p["partition"] for p in topic["partitions"]) == [0, 1]
    assert all(p["leader"] == 1 for p in topic["partitions"])

    r = subprocess.run(["kcat", "-b", kb, "-P", "-t", "kc", "-p", "1", "-K", ":",
                        "-H", "trace=abc", "-H", "n=1"],
                       input="k1:v1\nk2:v2\nk3:v3\n", capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    out = subprocess.run(["kcat", "-b", kb, "-C", "-t", "kc", "-o", "beginning", "-e",
                          "-f", "%p|%o|%k|%s|%h\n"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"1|{i}|k{i + 1}|v{i + 1}|trace=abc,n=1" for i in range(3)]
    # the native client reads the same records
    recs = native_records(cluster1, "kc", 3, partitions=2)
    assert [(r.partition, r.offset, r.key, r.value, list(map(tuple, r.headers))) for r in recs] == [
        (1, i, f"k{i + 1}".encode(), f"v{i + 1}".encode(), [("trace", b"abc"), ("n", b"1")])
        for i in range(3)]


# --------------------------------------------------------------------------- kafka-python


def test_kafka_python_and_native_interop(cluster1: LocalCluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    kb = kafka_bootstrap(cluster1)
    create(cluster1, "kp")
    ts0 = 1_700_000_000_000
    with_kafka = [(b"a", b"1", [("h", b"x")], ts0), (None, b"2", [], ts0 + 5),
                  (b"c", None, [("h", b"y"), ("i", b"")], ts0 + 9)]
    prod = KafkaProducer(bootstrap_servers=kb, acks="all", compression_type="gzip", linger_ms=20)
    futs = [prod.send("kp", key=k, value=v, headers=h, timestamp_ms=t, partition=0)
            for k, v, h, t in with_kafka]
    offsets = [f.get(timeout=30).offset for f in futs]
    prod.close()
    assert offsets == [0, 1, 2]
    # Kafka -> native: same offset, timestamp, key, value, headers
    recs = native_records(cluster1, "kp", 3)
    assert [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
            for r in recs] == [(i, t, k, v, h) for i, (k, v, h, t) in enumerate(with_kafka)]

    # native -> Kafka
    with Producer(bootstrap_servers=cluster1.bootstrap, acks="all",
                  compression_type="lz4") as p:
        metas = [p.send("kp", value=b"n%d" % i, key=b"nk%d" % i, headers=[("src", b"native")],
                        partition=0, timestamp_ms=ts0 + 100 + i) for i in range(4)]
        p.flush()
        assert [m.result(timeout=30).offset for m in metas] == [3, 4, 5, 6]
    cons = KafkaConsumer(bootstrap_servers=kb, auto_offset_reset="earliest",
                         consumer_timeout_ms=5000, enable_auto_commit=False)
    cons.assign([KTP("kp", 0)])
    cons.seek_to_beginning()
    got = []
    for r in cons:
        got.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
        if len(got) == 7:
            break
    cons.close()
    assert got[:3] == [(i, t, k, v, h) for i, (k, v, h, t) in enumerate(with_kafka)]
    assert got[3:] == [(3 + i, ts0 + 100 + i, b"nk%d" % i, b"n%d" % i, [("src", b"native")])
                       for i in range(4)]


# --------------------------------------------------------------------------- confluent-kafka


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_idempotent_compressed_produce_and_consume(cluster1: LocalCluster,
                                                             compression: str) -> None:
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import Producer as CProducer
    from confluent_kafka import TopicPartition as CTP

    kb = kafka_bootstrap(cluster1)
    topic = f"cf-{compression}"
    create(cluster1, topic)
    n = 500
    errors: list[Any] = []
    prod = CProducer({"bootstrap.servers": kb, "enable.idempotence": True, "acks": "all",
                      "compression.type": compression, "linger.ms": 5})
    for i in range(n):
        prod.produce(topic, key=b"k%d" % i, value=b"v%d" % i * 10, headers=[("i", str(i))],
                     partition=0, on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert prod.flush(30) == 0
    assert errors == []
    cons = CConsumer({"bootstrap.servers": kb, "group.id": "unused", "enable.auto.commit": False})
    cons.assign([CTP(topic, 0, OFFSET_BEGINNING)])
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        for m in cons.consume(num_messages=1000, timeout=1):
            assert m.error() is None, m.error()
            got.append((m.offset(), m.key(), m.value(), m.headers(), m.timestamp()[1]))
    cons.close()
    assert [g[:4] for g in got] == [(i, b"k%d" % i, b"v%d" % i * 10, [("i", str(i).encode())])
                                    for i in range(n)]
    # stored as produced (a Kafka records section in the producer's codec): the native client
    # decodes it itself — same offset, key, value, headers and timestamp
    recs = native_records(cluster1, topic, n)
    assert [(r.offset, r.key, r.value, [tuple(h) for h in r.headers], r.timestamp)
            for r in recs] == [(o, k, v, h, ts) for o, k, v, h, ts in got]


def test_confluent_three_brokers_acks_all(cluster3: LocalCluster) -> None:
    from confluent_kafka import Producer as CProducer
    from confluent_kafka.admin import AdminClient

    kb = kafka_bootstrap(cluster3)
    create(cluster3, "rf3", partitions=3, rf=3)
    md = AdminClient({"bootstrap.servers": kb}).list_topics(timeout=20)
    assert sorted(f"{b.host}:{b.port}" for b in md.brokers.values()) == sorted(kb.split(","))
    assert {p.id: len(p.replicas) for p in md.topics["rf3"].partitions.values()} == {0: 3, 1: 3, 2: 3}
    prod = CProducer({"bootstrap.servers": kb, "enable.idempotence": True, "acks": "all"})
    delivered: list[Any] = []
    for i in range(90):
        prod.produce("rf3", key=b"k%d" % i, value=b"v%d" % i,
                     on_delivery=lambda err, msg: delivered.append((err, msg.partition())))
    assert prod.flush(30) == 0
    assert all(err is None for err, _ in delivered) and len(delivered) == 90
    assert len({p for _, p in delivered}) > 1  # the partitions are led by different brokers
    recs = native_records(cluster3, "rf3", 90, partitions=3)
    assert sorted(r.key for r in recs) == sorted(b"k%d" % i for i in range(90))


# --------------------------------------------------------------------------- bad input


def _roundtrip(addr: tuple[str, int], frame: bytes, *, hang_up: bool = False) -> bytes:
    """Send one frame (``hang_up``: then close our side); the answer frame's payload, or b""
    when the broker closed the connection."""
    with socket.create_connection(addr, timeout=10) as s:
        s.sendall(frame)
        if hang_up:
            s.shutdown(socket.SHUT_WR)
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            if not chunk:
                return b""
            head += chunk
        (n,) = struct.unpack(">i", head)
        body = b""
        while len(body) < n:
            chunk = s.recv(n - len(body))
            assert chunk, "closed mid-answer"
            body += chunk
        return body


def _api_versions_ok(addr: tuple[str, int]) -> bool:
    req = codec.build(codec.request_schema(18, 3), {"client_software_name": "t",
                                                   "client_software_version": "1"})
    payload = _roundtrip(addr, codec.encode_request(req, 5))
    cid, body = codec.decode_response(payload, 18, 3)
    return cid == 5 and int(body.error_code) == 0


def test_bad_input_is_answered_or_closed_and_the_broker_stays_up(cluster1: LocalCluster) -> None:
    host, port = kafka_bootstrap(cluster1).split(":")
    addr = (host, int(port))
    create(cluster1, "bad")
    assert _api_versions_ok(addr)
    # oversized and negative frame lengths, garbage, unknown api key, Produce v2: closed
    for frame in (struct.pack(">i", 2**31 - 1), struct.pack(">i", -5),
                  struct.pack(">i", 8) + b"\xff" * 8,
                  codec.frame([struct.pack(">hhih", 99, 0, 1, -1)]),
                  codec.frame([struct.pack(">hhih", 0, 2, 1, -1) + b"\x00" * 16])):
        assert _roundtrip(addr, frame) == b""
    # a frame cut short by a client that hangs up: the broker closes too
    assert _roundtrip(addr, struct.pack(">i", 100) + b"\x00" * 10, hang_up=True) == b""
    # a produce whose batch fails its CRC: CORRUPT_MESSAGE for that partition, nothing stored
    batch = bytearray(kr.encode_batch([kr.KafkaRow(0, 0, b"k", b"v", [])], first_timestamp=1))
    batch[-1] ^= 0xFF
    req = codec.build(codec.request_schema(0, 9), {
        "transactional_id": None, "acks": -1, "timeout": 5000,
        "topic_data": [{"name": "bad", "partition_data": [{"index": 0, "records": bytes(batch)}]}]})
    cid, resp = codec.decode_response(_roundtrip(addr, codec.encode_request(req, 11)), 0, 9)
    part = resp.responses[0].partition_responses[0]
    assert cid == 11 and int(part.error_code) == 2  # CORRUPT_MESSAGE
    # unsupported compression (codec 5, good CRC): UNSUPPORTED_COMPRESSION_TYPE
    from crc32c import crc32c
    odd = bytearray(kr.encode_batch([kr.KafkaRow(0, 0, b"k", b"v", [])], first_timestamp=1))
    struct.pack_into(">h", odd, 21, 5)
    struct.pack_into(">I", odd, 17, crc32c(bytes(odd[21:])))
    req = codec.build(codec.request_schema(0, 9), {
        "transactional_id": None, "acks": 1, "timeout": 5000,
        "topic_data": [{"name": "bad", "partition_data": [{"index": 0, "records": bytes(odd)}]}]})
    _, resp = codec.decode_response(_roundtrip(addr, codec.encode_request(req, 12)), 0, 9)
    assert int(resp.responses[0].partition_responses[0].error_code) == 76
    # still up, on both listeners, and nothing was appended
    assert _api_versions_ok(addr)
    with Admin(bootstrap_servers=cluster1.bootstrap) as a:
        assert "bad" in a.list_topics()
    req = codec.build(codec.request_schema(2, 7), {"replica_id": -1, "isolation_level": 0,
                                                   "topics": [{"name": "bad", "partitions": [
                                                       {"partition_index": 0, "timestamp": -1}]}]})
    _, resp = codec.decode_response(_roundtrip(addr, codec.encode_request(req, 13)), 2, 7)
    latest = resp.topics[0].partitions[0]
    assert (int(latest.error_code), latest.offset) == (0, 0)  # nothing was appended


def test_pipelined_large_produces_each_keep_their_own_records(cluster1: LocalCluster) -> None:
    """Twelve produce requests of ~200 KiB (each received into the listener's one kept frame
    buffer), different records in each, sent back to back before any answer is read: every
    request is answered in order and every record reads back as sent — the buffer is decoded
    before the next frame overwrites it (broker/kafka/listener.py ``_reader``)."""
    topic = "pipelined-large"
    create(cluster1, topic)
    addr_s = kafka_bootstrap(cluster1).split(",")[0]
    host, port = addr_s.split(":")
    per, frames = 800, []
    for r in range(12):
        rows = [kr.KafkaRow(i, 0, b"k%d-%d" % (r, i), bytes([65 + r]) * 250, [])
                for i in range(per)]
        batch = kr.encode_batch(rows, first_timestamp=int(time.time() * 1000))
        assert len(batch) > 128 * 1024  # a large frame: received straight into the kept buffer
        req = codec.build(codec.request_schema(0, 9), {
            "transactional_id": None, "acks": -1, "timeout": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
        frames.append(codec.encode_request(req, 100 + r))
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"".join(frames))
        f = s.makefile("rb")
        for r in range(12):
            (n,) = struct.unpack(">i", f.read(4))
            cid, resp = codec.decode_response(f.read(n), 0, 9)
            p = resp.responses[0].partition_responses[0]
            assert (cid, int(p.error_code), int(p.base_offset)) == (100 + r, 0, r * per)
    recs = native_records(cluster1, topic, 12 * per)
    assert len(recs) == 12 * per
    for rec in recs:
        r, i = divmod(rec.offset, per)
        assert (rec.key, rec.value) == (b"k%d-%d" % (r, i), bytes([65 + r]) * 250)


def test_a_quick_answer_waits_behind_a_long_poll_on_its_connection(cluster1: LocalCluster) -> None:
    """A Fetch that long-polls an empty partition, then an ApiVersions, pipelined on one
    connection: the ApiVersions completes first but is written second (answers leave in
    request order: ``_Pipe`` in broker/kafka/listener.py), then a produce from another
    connection ends the poll and both arrive, fetch first, with the record."""
    topic = "long-poll-order"
    create(cluster1, topic)
    host, port = kafka_bootstrap(cluster1).split(",")[0].split(":")
    fetch = codec.build(codec.request_schema(1, 12), {
        "cluster_id": None, "replica_id": -1, "max_wait": 20000, "min_bytes": 1,
        "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "rack_id": "", "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
             "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": []})
    versions = codec.build(codec.request_schema(18, 3), {"client_software_name": "t",
                                                        "client_software_version": "1"})
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(codec.encode_request(fetch, 1) + codec.encode_request(versions, 2))
        s.settimeout(1.0)  # the ApiVersions is done by now; nothing may arrive before the fetch
        with pytest.raises(TimeoutError):
            s.recv(1)
        s.settimeout(30)
        with Producer(bootstrap_servers=cluster1.bootstrap) as p:
            p.send(topic, value=b"wake", partition=0).result(timeout=30)
        f = s.makefile("rb")
        (n,) = struct.unpack(">i", f.read(4))
        cid, resp = codec.decode_response(f.read(n), 1, 12)
        assert cid == 1 and int(resp.responses[0].partitions[0].error_code) == 0
        assert _fetched(resp)[0] == [b"wake"]
        (n,) = struct.unpack(">i", f.read(4))
        assert codec.decode_response(f.read(n), 18, 3)[0] == 2


def test_an_acks_0_produce_is_not_answered_and_holds_nothing_up(cluster1: LocalCluster) -> None:
    """Produce with acks=0 gets no answer (Kafka's rule); the ApiVersions pipelined behind it
    on the same connection is answered next, and the record is in the log."""
    topic = "acks-zero"
    create(cluster1, topic)
    host, port = kafka_bootstrap(cluster1).split(",")[0].split(":")
    batch = kr.encode_batch([kr.KafkaRow(0, 0, b"k", b"fire-and-forget", [])],
                            first_timestamp=int(time.time() * 1000))
    produce = codec.build(codec.request_schema(0, 9), {
        "transactional_id": None, "acks": 0, "timeout": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    versions = codec.build(codec.request_schema(18, 3), {"client_software_name": "t",
                                                        "client_software_version": "1"})
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(codec.encode_request(produce, 1) + codec.encode_request(versions, 2))
        f = s.makefile("rb")
        (n,) = struct.unpack(">i", f.read(4))
        assert codec.decode_response(f.read(n), 18, 3)[0] == 2
    assert [r.value for r in native_records(cluster1, topic, 1)] == [b"fire-and-forget"]


def test_idempotent_sequence_checks_answer_kafka_error_codes(cluster1: LocalCluster) -> None:
    host, port = kafka_bootstrap(cluster1).split(":")
    addr = (host, int(port))
    create(cluster1, "seq")
    init = codec.build(codec.request_schema(22, 4), {"transactional_id": None,
                                                   "transaction_timeout": -1})
    _, pid = codec.decode_response(_roundtrip(addr, codec.encode_request(init, 1)), 22, 4)
    assert int(pid.error_code) == 0 and pid.producer_id >= 0

    def produce(seq: int, n: int = 2) -> tuple[int, int]:
        batch = kr.encode_batch([kr.KafkaRow(i, i, b"k", b"v%d" % (seq + i), []) for i in range(n)],
                                first_timestamp=1_700_000_000_000, producer_id=pid.producer_id,
                                producer_epoch=pid.producer_epoch, base_sequence=seq)
        req = codec.build(codec.request_schema(0, 9), {
            "transactional_id": None, "acks": -1, "timeout": 5000,
            "topic_data": [{"name": "seq", "partition_data": [{"index": 0, "records": batch}]}]})
        _, resp = codec.decode_response(_roundtrip(addr, codec.encode_request(req, 2)), 0, 9)
        part = resp.responses[0].partition_responses[0]
        return int(part.error_code), part.base_offset

    assert produce(0) == (0, 0)
    assert produce(2) == (0, 2)
    assert produce(2) == (0, 2)  # a retried batch: its original offsets, nothing appended
    assert produce(9)[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(4) == (0, 4)
    assert [r.value for r in native_records(cluster1, "seq", 6)] == [
        b"v0", b"v1", b"v2", b"v3", b"v4", b"v5"]


def test_offsets_committed_outside_a_generation(cluster1: LocalCluster) -> None:
    """assign() consumers commit and fetch offsets (generation -1) through the Kafka listener;
    the native client reads the same committed offsets, and the reverse."""
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import TopicPartition as CTP
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    kb = kafka_bootstrap(cluster1)
    create(cluster1, "off", partitions=2)
    with Producer(bootstrap_servers=cluster1.bootstrap, acks="all") as p:
        for i in range(10):
            p.send("off", value=b"%d" % i, partition=i % 2)
        p.flush()
    cons = CConsumer({"bootstrap.servers": kb, "group.id": "cg", "enable.auto.commit": False})
    cons.commit(offsets=[CTP("off", 0, 3), CTP("off", 1, 5)], asynchronous=False)
    got = cons.committed([CTP("off", 0), CTP("off", 1)], timeout=20)
    assert [(t.partition, t.offset, t.error) for t in got] == [(0, 3, None), (1, 5, None)]
    cons.assign([CTP("off", 0)])  # no offset given: it starts at the committed one
    first = None
    deadline = time.monotonic() + 20
    while first is None and time.monotonic() < deadline:
        m = cons.poll(1)
        if m is not None and m.error() is None:
            first = (m.partition(), m.offset())
    cons.close()
    assert first == (0, 3)
    with Consumer(bootstrap_servers=cluster1.bootstrap, group_id="cg") as native:
        assert native.committed(TopicPartition("off", 0)) == 3
        assert native.committed(TopicPartition("off", 1)) == 5

    kc = KafkaConsumer(bootstrap_servers=kb, group_id="kg", enable_auto_commit=False)
    kc.assign([KTP("off", 0)])
    kc.commit({KTP("off", 0): OffsetAndMetadata(4, "m", -1)})
    assert kc.committed(KTP("off", 0)) == 4
    assert kc.committed(KTP("off", 1)) is None
    kc.close()
    with Consumer(bootstrap_servers=cluster1.bootstrap, group_id="ng",
                  enable_auto_commit=False) as native:
        native.assign([TopicPartition("off", 1)])
        native.commit({TopicPartition("off", 1): 7})
    cons = CConsumer({"bootstrap.servers": kb, "group.id": "ng"})
    assert [t.offset for t in cons.committed([CTP("off", 1)], timeout=20)] == [7]
    cons.close()


# --------------------------------------------------------------------------- fetch sessions


def _fetch(addr: tuple[str, int], session_id: int, epoch: int, parts: dict[int, int],
           forgotten: list[int] | None = None) -> Any:
    """One Fetch v12 of topic "fs" over a fresh connection (a session outlives connections)."""
    req = codec.build(codec.request_schema(1, 12), {
        "cluster_id": None, "replica_id": -1, "max_wait": 50, "min_bytes": 1,
        "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
        "session_epoch": epoch, "rack_id": "",
        "topics": [{"topic": "fs", "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": off,
             "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
            for p, off in parts.items()]}] if parts else [],
        "forgotten_topics_data": [{"topic": "fs", "partitions": forgotten}] if forgotten else []})
    _, resp = codec.decode_response(_roundtrip(addr, codec.encode_request(req, 7)), 1, 12)
    return resp


def _fetched(resp: Any) -> dict[int, list[bytes]]:
    out = {}
    for t in resp.responses:
        for p in t.partitions:
            data = bytes(p.records or b"")
            out[p.partition_index] = [r.value for pos in kr.iter_kafka_batches(data)
                                      for r in kr.decode_batch(data, pos).rows]
    return out


def test_fetch_sessions_full_incremental_and_errors(cluster1: LocalCluster) -> None:
    """KIP-227 over raw Fetch v12 requests: an initial fetch opens a session answering every
    partition; incremental fetches answer only partitions with news; bad ids / epochs get
    their errors; epoch -1 closes the session."""
    host, port = kafka_bootstrap(cluster1).split(":")
    addr = (host, int(port))
    create(cluster1, "fs", partitions=3)
    with Producer(bootstrap_servers=cluster1.bootstrap, acks="all") as p:
        p.send("fs", value=b"a0", partition=0).result(timeout=30)
    full = _fetch(addr, 0, 0, {0: 0, 1: 0, 2: 0})
    sid = full.session_id
    assert int(full.error_code) == 0 and sid != 0
    assert _fetched(full) == {0: [b"a0"], 1: [], 2: []}
    inc = _fetch(addr, sid, 1, {0: 1})  # only partition 0 moved on; nothing new anywhere
    assert (int(inc.error_code), inc.session_id, _fetched(inc)) == (0, sid, {})
    with Producer(bootstrap_servers=cluster1.bootstrap, acks="all") as p:
        p.send("fs", value=b"b2", partition=2).result(timeout=30)
    inc = _fetch(addr, sid, 2, {})  # partition 2 from the session's remembered offset 0
    assert _fetched(inc) == {2: [b"b2"]}
    assert int(_fetch(addr, sid, 2, {}).error_code) == 71  # INVALID_FETCH_SESSION_EPOCH
    assert int(_fetch(addr, sid + 1, 1, {}).error_code) == 70  # FETCH_SESSION_ID_NOT_FOUND
    inc = _fetch(addr, sid, 3, {}, forgotten=[2])  # 2 forgotten, nothing new: empty
    assert (int(inc.error_code), _fetched(inc)) == (0, {})
    closed = _fetch(addr, sid, -1, {2: 0})  # close: a sessionless full fetch
    assert (closed.session_id, _fetched(closed)) == (0, {2: [b"b2"]})
    assert int(_fetch(addr, sid, 4, {}).error_code) == 70
    assert _api_versions_ok(addr)


def test_kafka_python_consumes_through_a_fetch_session(cluster1: LocalCluster) -> None:
    """kafka-python 3 opens KIP-227 sessions: every record arrives in order through
    incremental fetches, records produced after the session opened included."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    kb = kafka_bootstrap(cluster1)
    create(cluster1, "kfs", partitions=2)

    def produce(start: int) -> None:
        with Producer(bootstrap_servers=cluster1.bootstrap, acks="all") as p:
            for i in range(start, start + 50):
                p.send("kfs", value=b"%d" % i, partition=i % 2)
            p.flush()

    produce(0)
    c = KafkaConsumer(bootstrap_servers=kb, auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=15000)
    c.assign([KTP("kfs", 0), KTP("kfs", 1)])
    got: list[tuple[int, int, bytes]] = []
    for r in c:
        got.append((r.partition, r.offset, r.value))
        if len(got) == 50:
            produce(50)
        if len(got) == 100:
            break
    handlers = list(c._fetcher._session_handlers.values())  # noqa: SLF001 - the client's own state
    sessions = [h.next_metadata.session_id for h in handlers]
    epochs = [h.next_metadata.epoch for h in handlers]
    c.close()
    assert sorted(got) == sorted((i % 2, i // 2, b"%d" % i) for i in range(100))
    assert sessions and all(s != 0 for s in sessions)  # the broker granted a session
    assert all(e > 1 for e in epochs)  # and incremental fetches were made in it


# --------------------------------------------------------------------------- classic groups


@kcat_missing
def test_kcat_group_mode_consumes_and_commits(cluster1: LocalCluster) -> None:
    kb = kafka_bootstrap(cluster1)
    create(cluster1, "kg", partitions=2)
    with Producer(bootstrap_servers=cluster1.bootstrap, acks="all") as p:
        for i in range(20):
            p.send("kg", value=b"v%d" % i, key=b"k%d" % i, partition=i % 2)
        p.flush()
    fmt = ["-f", "%p %o %k %s\n"]
    first = subprocess.run(["kcat", "-b", kb, "-G", "kgroup", "kg", "-o", "beginning", "-e", *fmt],
                           capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert "assigned: kg [0], kg [1]" in first.stderr
    assert sorted(first.stdout.splitlines()) == sorted(
        f"{i % 2} {i // 2} k{i} v{i}" for i in range(20))
    with Consumer(bootstrap_servers=cluster1.bootstrap, group_id="kgroup") as native:
        assert [native.committed(TopicPartition("kg", p)) for p in (0, 1)] == [10, 10]
    with Producer(bootstrap_servers=cluster1.bootstrap, acks="all") as p:
        p.send("kg", value=b"late", key=b"x", partition=1)
        p.flush()
    again = subprocess.run(["kcat", "-b", kb, "-G", "kgroup", "kg", "-e", *fmt],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == ["1 10 x late"]  # from the committed offsets on


_GROUP_MEMBER = r"""
import sys
from confluent_kafka import Consumer
bootstrap, group, topic, out = sys.argv[1:5]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
              "heartbeat.interval.ms": 500})
f = open(out, "a")


def seen(kind):
    def cb(consumer, partitions):
        parts = [] if kind == "R" else [p.partition for p in partitions]
        f.write("A " + " ".join(map(str, parts)) + "\n")  # its assignment now
        f.flush()
    return cb


c.subscribe([topic], on_assign=seen("A"), on_revoke=seen("R"))
with f:
    while True:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        f.write(f"{m.partition()} {m.offset()}\n")
        f.flush()
        c.commit(message=m, asynchronous=False)
"""


def test_confluent_group_of_three_with_a_member_killed(cluster1: LocalCluster, tmp_path: Any) -> None:
    import signal
    import sys

    kb = kafka_bootstrap(cluster1)
    create(cluster1, "g3", partitions=3)
    outs = [tmp_path / f"member-{i}.txt" for i in range(3)]
    procs = [subprocess.Popen([sys.executable, "-c", _GROUP_MEMBER, kb, "grp3", "g3", str(o)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for o in outs]

    def consumed(files: list[Any]) -> dict[Any, set[tuple[int, int]]]:
        got: dict[Any, set[tuple[int, int]]] = {}
        for f in files:
            lines = f.read_text().split("\n") if f.exists() else []
            got[f] = {tuple(map(int, ln.split())) for ln in lines  # type: ignore[misc]
                      if ln[:1].isdigit()}
        return got

    def assigned(f: Any) -> list[int] | None:
        """The member's assignment as its own rebalance callbacks last saw it."""
        lines = [ln for ln in f.read_text().splitlines() if ln.startswith("A")] if f.exists() else []
        return sorted(int(x) for x in lines[-1][1:].split()) if lines else None

    def produce(start: int, n: int) -> set[tuple[int, int]]:
        with Producer(bootstrap_servers=cluster1.bootstrap, acks="all") as p:
            futs = [p.send("g3", value=b"%d" % i, partition=i % 3) for i in range(start, start + n)]
            p.flush()
            return {(m.partition, m.offset) for m in (f.result(timeout=30) for f in futs)}

    try:
        deadline = time.monotonic() + 60
        while True:  # the three members settle on one partition each (records come after:
            views = [assigned(o) for o in outs]  # else the first member reads them all)
            if all(v is not None and len(v) == 1 for v in views) and sorted(
                    v[0] for v in views if v) == [0, 1, 2]:
                break
            assert time.monotonic() < deadline, views
            time.sleep(0.2)
        want = produce(0, 150)
        deadline = time.monotonic() + 60
        while True:  # each member reads its partition
            got = consumed(outs)
            if set().union(*got.values()) >= want:
                break
            assert time.monotonic() < deadline, {str(k): len(v) for k, v in got.items()}
            time.sleep(0.2)
        assert [{p for p, _ in got[o]} for o in outs] == [set(assigned(o) or ()) for o in outs]
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        want |= produce(150, 150)
        deadline = time.monotonic() + 90
        while True:  # the two left take over the killed member's partition
            got = consumed(outs[1:])
            if set().union(*got.values()) >= want - consumed(outs[:1])[outs[0]]:
                break
            assert time.monotonic() < deadline, sorted(want - set().union(*got.values()))[:10]
            time.sleep(0.2)
        all_got = set().union(*consumed(outs).values())
        assert all_got >= want  # at least once, every record
        # AdminClient sees the two members left and who holds what
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": kb})
        deadline = time.monotonic() + 30
        while True:
            desc = admin.describe_consumer_groups(["grp3"])["grp3"].result(30)
            held = sorted(tp.partition for m in desc.members
                          for tp in m.assignment.topic_partitions)
            if len(desc.members) == 2 and held == [0, 1, 2]:
                break
            assert time.monotonic() < deadline, (desc.members, held)
            time.sleep(0.2)
    finally:
        for p in procs:
            p.kill()
            p.wait(10)


class _RawMember:
    """A classic group member speaking raw JoinGroup / SyncGroup / Heartbeat over its own
    connection (the listener answers a connection's requests in order)."""

    def __init__(self, addr: tuple[str, int], group: str, topic: str,
                 session_ms: int = 10_000) -> None:
        self.sock = socket.create_connection(addr, timeout=60)
        self.group, self.topic, self.session_ms = group, topic, session_ms
        self.member_id, self.generation, self.cid = "", -1, 0

    def call(self, key: int, version: int, body: dict[str, Any]) -> Any:
        self.cid += 1
        self.sock.sendall(codec.encode_request(codec.build(codec.request_schema(key, version),
                                                           body), self.cid))
        head = self._recv(4)
        cid, resp = codec.decode_response(self._recv(struct.unpack(">i", head)[0]), key, version)
        assert cid == self.cid
        return resp

    def _recv(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "closed"
            buf += chunk
        return buf

    def join_once(self, version: int = 7) -> Any:
        cls = load_entity_schema("consumer_protocol_subscription", 0, EntityType.data)
        buf = io.BytesIO()
        entity_writer(cls)(buf, codec.build(cls, {"topics": [self.topic], "user_data": None}))
        return self.call(11, version, {
            "group_id": self.group, "session_timeout": self.session_ms,
            "rebalance_timeout": 30_000, "member_id": self.member_id, "group_instance_id": None,
            "protocol_type": "consumer", "protocols": [
                {"name": "range", "metadata": struct.pack(">h", 0) + buf.getvalue()}]})

    def join(self) -> int:
        """JoinGroup as clients do: a first join without a member id is answered
        MEMBER_ID_REQUIRED (KIP-394) with one, and joins again with it."""
        resp = self.join_once()
        if int(resp.error_code) == 79:
            self.member_id = resp.member_id
            resp = self.join_once()
        if int(resp.error_code) == 0:
            self.member_id, self.generation = resp.member_id, resp.generation_id
        return int(resp.error_code)

    def sync(self) -> set[int]:
        resp = self.call(14, 5, {"group_id": self.group, "generation_id": self.generation,
                                 "member_id": self.member_id, "group_instance_id": None,
                                 "protocol_type": "consumer", "protocol_name": "range",
                                 "assignments": []})
        assert int(resp.error_code) == 0, resp
        raw = bytes(resp.assignment)
        cls = load_entity_schema("consumer_protocol_assignment", 0, EntityType.data)
        entity, _ = entity_reader(cls)(raw, 2)
        return {p for t in entity.assigned_partitions for p in t.partitions}

    def heartbeat(self, generation: int | None = None) -> int:
        resp = self.call(12, 4, {"group_id": self.group, "member_id": self.member_id,
                                 "group_instance_id": None,
                                 "generation_id": self.generation if generation is None
                                 else generation})
        return int(resp.error_code)

    def close(self) -> None:
        self.sock.close()


def test_classic_group_generation_is_the_groups(cluster1: LocalCluster) -> None:
    """Raw classic protocol: a join moves the group's generation once; the stable member is
    told REBALANCE_IN_PROGRESS, rejoins, and both are answered the same generation; a member
    that never rejoins is dropped after its session timeout and the others go on."""
    import threading

    host, port = kafka_bootstrap(cluster1).split(":")
    addr = (host, int(port))
    create(cluster1, "raw", partitions=4)
    a = _RawMember(addr, "rawg", "raw")
    b = _RawMember(addr, "rawg", "raw", session_ms=3000)
    c = _RawMember(addr, "rawg", "raw")
    try:
        assert a.join() == 0
        first = a.generation
        assert a.sync() == {0, 1, 2, 3}
        assert a.heartbeat() == 0
        joined: dict[str, int] = {}
        t = threading.Thread(target=lambda: joined.update(b=b.join()))
        t.start()  # b waits at the barrier until a rejoined
        deadline = time.monotonic() + 30
        while a.heartbeat() == 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert a.heartbeat() == 27  # REBALANCE_IN_PROGRESS until it rejoins
        assert a.join() == 0
        t.join(30)
        assert joined == {"b": 0}
        assert a.generation == b.generation == first + 1  # one rebalance, one generation
        assert a.heartbeat(generation=first) == 22  # ILLEGAL_GENERATION: the old one
        got_a, got_b = a.sync(), b.sync()
        deadline = time.monotonic() + 30
        while not (got_a | got_b == {0, 1, 2, 3} and not got_a & got_b and got_a and got_b):
            # the controller may move partitions once more: members hear of it by heartbeat
            assert time.monotonic() < deadline, (got_a, got_b)
            codes = {a.heartbeat(), b.heartbeat()}
            if codes != {0}:
                ta = threading.Thread(target=a.join)
                ta.start()
                assert b.join() == 0
                ta.join(30)
                assert a.generation == b.generation
                got_a, got_b = a.sync(), b.sync()
            time.sleep(0.1)
        # c joins; b (session 3 s) never answers again: after its session timeout the
        # barrier drops it, a and c share the next generation, b is an unknown member
        joined.clear()
        t = threading.Thread(target=lambda: joined.update(c=c.join()))
        t.start()
        deadline = time.monotonic() + 30
        while a.heartbeat() == 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert a.join() == 0
        t.join(60)
        assert joined == {"c": 0} and a.generation == c.generation > b.generation
        assert b.heartbeat() == 25  # UNKNOWN_MEMBER_ID
    finally:
        for m in (a, b, c):
            m.close()


def test_join_group_v4_without_a_member_id_is_member_id_required(cluster1: LocalCluster) -> None:
    """KIP-394: a JoinGroup v4+ without a member id makes no member: it is answered
    MEMBER_ID_REQUIRED with a member id, and the join with that id makes the member (so a
    client retrying its first JoinGroup leaves no ghost members). v3 still joins at once."""
    host, port = kafka_bootstrap(cluster1).split(":")
    addr = (host, int(port))
    create(cluster1, "kip394", partitions=2)
    a = _RawMember(addr, "kip394g", "kip394")
    b = _RawMember(addr, "kip394g3", "kip394")
    try:
        first, retried = a.join_once(), a.join_once()  # a client retrying its first join
        assert int(first.error_code) == int(retried.error_code) == 79  # MEMBER_ID_REQUIRED
        assert first.member_id and retried.member_id and first.member_id != retried.member_id
        assert first.generation_id == -1
        from rafka.client.errors import GroupIdNotFoundError

        with Admin(bootstrap_servers=cluster1.bootstrap) as admin:  # nobody joined natively
            with pytest.raises(GroupIdNotFoundError):
                admin.describe_consumer_groups(["kip394g"])
        a.member_id = first.member_id
        joined = a.join_once()
        assert int(joined.error_code) == 0 and joined.member_id == first.member_id
        a.generation = joined.generation_id
        assert a.sync() == {0, 1} and a.heartbeat() == 0
        with Admin(bootstrap_servers=cluster1.bootstrap) as admin:
            members = admin.describe_consumer_groups(["kip394g"])["kip394g"]["members"]
        assert [m["member_id"] for m in members] == [first.member_id]  # one member, no ghost
        old = b.join_once(version=3)  # before KIP-394: the member id comes with the join
        assert int(old.error_code) == 0 and old.member_id
    finally:
        a.close()
        b.close()


# A cooperative-sticky group member (KIP-429), as a process: writes "A t p..." when partitions
# are added, "R t p..." revoked, "L t p..." lost (t: time.time()), "M p offset" per record,
# committing each record before the next.
_COOP_CONFLUENT = r"""
import sys, time
from confluent_kafka import Consumer
bootstrap, group, topic, out = sys.argv[1:5]
f = open(out, "a")
def log(kind):
    def cb(consumer, partitions):
        f.write(f"{kind} {time.time()} " + " ".join(str(p.partition) for p in partitions) + "\n")
        f.flush()
    return cb
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
              "heartbeat.interval.ms": 500,
              "partition.assignment.strategy": "cooperative-sticky"})
c.subscribe([topic], on_assign=log("A"), on_revoke=log("R"), on_lost=log("L"))
while True:
    m = c.poll(0.2)
    if m is None or m.error():
        continue
    f.write(f"M {m.partition()} {m.offset()}\n")
    f.flush()
    try:
        c.commit(message=m, asynchronous=False)
    except Exception:
        pass
"""

_COOP_KAFKA_PYTHON = r"""
import sys, time
from kafka import KafkaConsumer
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
bootstrap, group, topic, out = sys.argv[1:5]
f = open(out, "a")
def log(kind, partitions):
    f.write(f"{kind} {time.time()} " + " ".join(str(p.partition) for p in partitions) + "\n")
    f.flush()
class Listener(ConsumerRebalanceListener):
    def on_partitions_revoked(self, revoked):
        log("R", revoked)
    def on_partitions_assigned(self, assigned):
        log("A", assigned)
    def on_partitions_lost(self, lost):
        log("L", lost)
c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                  auto_offset_reset="earliest", session_timeout_ms=6000,
                  heartbeat_interval_ms=500,
                  partition_assignment_strategy=[CooperativeStickyAssignor])
c.subscribe([topic], listener=Listener())
while True:
    for tp, recs in c.poll(200).items():
        for r in recs:
            f.write(f"M {r.partition} {r.offset}\n")
            f.flush()
            try:
                c.commit({tp: __import__("kafka").OffsetAndMetadata(r.offset + 1, "", -1)})
            except Exception:
                pass
"""


class _Member:
    """One member process and what its log says."""

    def __init__(self, script: str, kb: str, group: str, topic: str, out: Any) -> None:
        self.out = out
        self.proc = subprocess.Popen([sys.executable, "-c", script, kb, group, topic, str(out)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.killed_at: float | None = None

    def events(self) -> list[tuple[str, float, list[int]]]:
        out = []
        for ln in (self.out.read_text().splitlines() if self.out.exists() else []):
            kind, *rest = ln.split()
            if kind in "ARL" and rest:
                out.append((kind, float(rest[0]), [int(x) for x in rest[1:]]))
        return out

    def records(self) -> set[tuple[int, int]]:
        lines = self.out.read_text().splitlines() if self.out.exists() else []
        return {(int(ln.split()[1]), int(ln.split()[2])) for ln in lines
                if ln.startswith("M ") and len(ln.split()) == 3}

    def owned(self) -> set[int]:
        held: set[int] = set()
        for kind, _, parts in self.events():
            held = held | set(parts) if kind == "A" else held - set(parts)
        return held

    def intervals(self, now: float) -> list[tuple[int, float, float]]:
        """(partition, from, to) of each stretch the member owned a partition."""
        since: dict[int, float] = {}
        out = []
        for kind, t, parts in self.events():
            for p in parts:
                if kind == "A":
                    since.setdefault(p, t)
                elif p in since:
                    out.append((p, since.pop(p), t))
        end = self.killed_at if self.killed_at is not None else now
        out += [(p, t0, end) for p, t0 in since.items()]
        return out

    def revoked(self, after: float) -> set[int]:
        return {p for kind, t, parts in self.events() if kind in "RL" and t > after for p in parts}

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def _cooperative_group(cluster: LocalCluster, tmp_path: Any, script: str, name: str) -> None:
    """Three cooperative-sticky members on six partitions, one SIGKILLed, one added: every
    record consumed; the survivors keep what they held (only partitions that move to another
    member are revoked); no partition is ever owned by two members at once."""
    kb = kafka_bootstrap(cluster)
    topic = f"coop-{name}"
    create(cluster, topic, partitions=6)
    members = [_Member(script, kb, f"g-{name}", topic, tmp_path / f"{name}-{i}.txt")
               for i in range(3)]

    def settle(live: list[_Member], sizes: list[int]) -> None:
        deadline = time.monotonic() + 90
        while True:
            owned = [m.owned() for m in live]
            if (sorted(len(o) for o in owned) == sizes
                    and set().union(*owned) == set(range(6))):
                return
            assert time.monotonic() < deadline, owned
            time.sleep(0.2)

    def produce(start: int) -> set[tuple[int, int]]:
        with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as p:
            futs = [p.send(topic, value=b"%d" % i, partition=i % 6) for i in range(start, start + 120)]
            p.flush()
            return {(m.partition, m.offset) for m in (f.result(timeout=30) for f in futs)}

    def consumed(want: set[tuple[int, int]]) -> None:
        deadline = time.monotonic() + 90
        while True:
            got = set().union(*(m.records() for m in members))
            if got >= want:
                return
            assert time.monotonic() < deadline, sorted(want - got)[:10]
            time.sleep(0.2)

    try:
        settle(members, [2, 2, 2])
        want = produce(0)
        consumed(want)
        # one member SIGKILLed: the two left take its partitions and give up none of theirs
        held = [m.owned() for m in members]
        members[0].proc.send_signal(signal.SIGKILL)
        members[0].proc.wait(10)
        members[0].killed_at = time.time()
        want |= produce(120)
        settle(members[1:], [3, 3])
        consumed(want)
        assert all(held[i] <= members[i].owned() for i in (1, 2))
        assert not members[1].revoked(members[0].killed_at)
        assert not members[2].revoked(members[0].killed_at)
        # one member added: it gets partitions, and only those are revoked from the others
        added_at = time.time()
        members.append(_Member(script, kb, f"g-{name}", topic, tmp_path / f"{name}-3.txt"))
        live = members[1:]
        settle(live, [2, 2, 2])
        want |= produce(240)
        consumed(want)
        moved = members[1].revoked(added_at) | members[2].revoked(added_at)
        assert moved == members[3].owned()  # nothing else was taken away and given back
        # and the group committed every partition up to its end (60 records each)
        deadline = time.monotonic() + 30
        with Consumer(bootstrap_servers=cluster.bootstrap, group_id=f"g-{name}") as native:
            while True:
                committed = [native.committed(TopicPartition(topic, p)) for p in range(6)]
                if committed == [60] * 6:
                    break
                assert time.monotonic() < deadline, committed
                time.sleep(0.2)
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": kb})  # kept: the futures need its handle
        desc = admin.describe_consumer_groups([f"g-{name}"])[f"g-{name}"].result(30)
        assert desc.partition_assignor == "cooperative-sticky"  # the members' protocol
        # never two owners at once: per partition, the ownership stretches do not overlap
        now = time.time()
        by_part: dict[int, list[tuple[float, float]]] = {}
        for m in members:
            for p, t0, t1 in m.intervals(now):
                by_part.setdefault(p, []).append((t0, t1))
        for p, spans in by_part.items():
            spans.sort()
            for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
                assert start >= end, (p, spans)
    finally:
        for m in members:
            m.stop()


def test_confluent_cooperative_sticky_group(cluster1: LocalCluster, tmp_path: Any) -> None:
    _cooperative_group(cluster1, tmp_path, _COOP_CONFLUENT, "cf")


def test_kafka_python_cooperative_sticky_group(cluster1: LocalCluster, tmp_path: Any) -> None:
    _cooperative_group(cluster1, tmp_path, _COOP_KAFKA_PYTHON, "kp")


def test_kafka_python_group_subscribe_and_commit(cluster1: LocalCluster) -> None:
    from kafka import KafkaConsumer

    kb = kafka_bootstrap(cluster1)
    create(cluster1, "kpg", partitions=2)
    with Producer(bootstrap_servers=cluster1.bootstrap, acks="all") as p:
        for i in range(10):
            p.send("kpg", value=b"%d" % i, partition=i % 2)
        p.flush()
    c = KafkaConsumer("kpg", bootstrap_servers=kb, group_id="kpgroup",
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=15000)
    got = []
    for r in c:
        got.append((r.partition, r.offset))
        if len(got) == 10:
            break
    assert sorted(got) == sorted((i % 2, i // 2) for i in range(10))
    assert {tp.partition for tp in c.assignment()} == {0, 1}
    c.commit()
    c.close()
    with Consumer(bootstrap_servers=cluster1.bootstrap, group_id="kpgroup") as native:
        assert [native.committed(TopicPartition("kpg", p)) for p in (0, 1)] == [5, 5]


# --------------------------------------------------------------------------- transactions


def _read_all(kb: str, topic: str, isolation: str, expect_at_least: int) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import TopicPartition as CTP

    c = CConsumer({"bootstrap.servers": kb, "group.id": "reader", "enable.auto.commit": False,
                   "isolation.level": isolation, "enable.partition.eof": True})
    c.assign([CTP(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    eof = False
    while time.monotonic() < deadline and not (eof and len(got) >= expect_at_least):
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            eof = True  # _PARTITION_EOF: caught up to what this isolation level may read
            continue
        got.append(m.value())
    c.close()
    return got


def test_confluent_transactional_consume_transform_produce(cluster1: LocalCluster) -> None:
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import Producer as CProducer

    kb = kafka_bootstrap(cluster1)
    create(cluster1, "tin")
    create(cluster1, "tout")
    with Producer(bootstrap_servers=cluster1.bootstrap, acks="all") as p:
        for i in range(10):
            p.send("tin", value=b"in-%d" % i, partition=0)
        p.flush()
    cons = CConsumer({"bootstrap.servers": kb, "group.id": "ctp", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    cons.subscribe(["tin"])
    prod = CProducer({"bootstrap.servers": kb, "transactional.id": "ctp-tx"})
    prod.init_transactions(30)
    seen = []
    deadline = time.monotonic() + 45
    while len(seen) < 10 and time.monotonic() < deadline:
        m = cons.poll(0.5)
        if m is not None and m.error() is None:
            seen.append(m)
    assert [m.value() for m in seen] == [b"in-%d" % i for i in range(10)]
    prod.begin_transaction()
    for m in seen:
        prod.produce("tout", value=m.value().replace(b"in", b"out"), partition=0)
    prod.send_offsets_to_transaction(cons.position(cons.assignment()),
                                     cons.consumer_group_metadata(), 30)
    prod.commit_transaction(30)
    prod.begin_transaction()
    for i in range(3):
        prod.produce("tout", value=b"aborted-%d" % i, partition=0)
    prod.flush(30)
    prod.abort_transaction(30)
    cons.close()

    committed = _read_all(kb, "tout", "read_committed", 10)
    assert committed == [b"out-%d" % i for i in range(10)]
    everything = _read_all(kb, "tout", "read_uncommitted", 13)
    assert everything == committed + [b"aborted-%d" % i for i in range(3)]
    with Consumer(bootstrap_servers=cluster1.bootstrap, group_id="ctp") as native:
        assert native.committed(TopicPartition("tin", 0)) == 10  # the transaction's offsets
    # the native consumer in read_committed hides the Kafka-written aborted batch too
    with Consumer(bootstrap_servers=cluster1.bootstrap,
                  isolation_level="read_committed") as native:
        native.assign([TopicPartition("tout", 0)])
        native.seek_to_beginning()
        vals: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(vals) < 10 and time.monotonic() < deadline:
            for recs in native.poll(timeout_ms=500).values():
                vals += [r.value for r in recs]
        for recs in native.poll(timeout_ms=1000).values():  # nothing after the committed ten
            vals += [r.value for r in recs]
    assert vals == committed


def test_a_timed_out_transaction_is_fenced_in_librdkafka(cluster1: LocalCluster) -> None:
    """rafka's TRANSACTION_TIMED_OUT (1008) reaches a Kafka client as INVALID_PRODUCER_EPOCH
    (47, KIP-588), which librdkafka reports as its fatal ``_FENCED`` — what it reports after a
    transaction timeout on Kafka. Answered −1 before, the commit failed as an unknown error."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka import Producer as CProducer

    kb = kafka_bootstrap(cluster1)
    create(cluster1, "txto")
    prod = CProducer({"bootstrap.servers": kb, "transactional.id": "txto-tx",
                      "transaction.timeout.ms": 1000, "socket.timeout.ms": 1000})
    prod.init_transactions(30)
    prod.begin_transaction()
    prod.produce("txto", value=b"left open", partition=0)
    assert prod.flush(30) == 0
    with Admin(bootstrap_servers=cluster1.bootstrap) as a:
        epoch = a.describe_transactions(["txto-tx"])["txto-tx"].producer_epoch

        def aborted() -> bool:  # the coordinator's timeout abort bumped the epoch and finished
            d = a.describe_transactions(["txto-tx"])["txto-tx"]
            return d.producer_epoch > epoch and d.state in ("CompleteAbort", "Empty")

        deadline = time.monotonic() + 30
        while not aborted():
            assert time.monotonic() < deadline, "the coordinator never aborted the transaction"
            time.sleep(0.2)
    with pytest.raises(KafkaException) as info:
        prod.commit_transaction(30)
    err = info.value.args[0]
    assert err.code() == KafkaError._FENCED, err
    assert err.fatal()
    # the transactional id is not lost: a new producer takes it and commits
    again = CProducer({"bootstrap.servers": kb, "transactional.id": "txto-tx"})
    again.init_transactions(30)
    again.begin_transaction()
    again.produce("txto", value=b"committed", partition=0)
    again.commit_transaction(30)
    assert _read_all(kb, "txto", "read_committed", 1) == [b"committed"]


def test_compaction_of_a_kafka_written_topic_read_by_both_clients(cluster_factory: Any) -> None:
    """A compacted topic written by confluent-kafka (gzip: stored as produced) is compacted by
    the broker's cleaner, which keeps the Kafka format; both clients read the same survivors."""
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import Producer as CProducer
    from confluent_kafka import TopicPartition as CTP

    c = cluster_factory(1, broker_config={"log.cleaner.backoff.ms": 200})
    kb = kafka_bootstrap(c)
    create(c, "kcomp", config={"cleanup.policy": "compact", "segment.bytes": "100"})
    keys = [b"K1", b"K2", b"K1", b"K1", b"K3", b"K2", b"K4", b"K5", b"K5", b"K2", b"K6"]
    prod = CProducer({"bootstrap.servers": kb, "compression.type": "gzip", "linger.ms": 0,
                      "acks": "all"})
    for i, k in enumerate(keys):  # one batch each: flushed one by one
        prod.produce("kcomp", key=k, value=b"v%d" % i, partition=0, headers=[("i", b"%d" % i)])
        assert prod.flush(30) == 0
    survivors = [(3, b"K1", b"v3"), (4, b"K3", b"v4"), (6, b"K4", b"v6"), (8, b"K5", b"v8"),
                 (9, b"K2", b"v9"), (10, b"K6", b"v10")]
    deadline = time.monotonic() + 90
    while True:  # a hang guard on the cleaner, no timing assertion
        recs = native_records(c, "kcomp", len(survivors))
        got = [(r.offset, r.key, r.value) for r in recs]
        if got == survivors or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert got == survivors
    assert [[tuple(h) for h in r.headers] for r in recs] == [[("i", b"%d" % o)]
                                                             for o, _, _ in survivors]
    cons = CConsumer({"bootstrap.servers": kb, "group.id": "unused", "enable.auto.commit": False})
    cons.assign([CTP("kcomp", 0, OFFSET_BEGINNING)])
    kgot: list[Any] = []
    deadline = time.monotonic() + 30
    while len(kgot) < len(survivors) and time.monotonic() < deadline:
        for m in cons.consume(num_messages=100, timeout=1):
            assert m.error() is None, m.error()
            kgot.append((m.offset(), m.key(), m.value()))
    cons.close()
    assert kgot == survivors


def test_retention_of_kafka_written_batches(cluster_factory: Any) -> None:
    """Retention by time and by size reads batch headers only: Kafka-written segments expire
    like native ones, and both clients start reading at the new log start offset."""
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import Producer as CProducer
    from confluent_kafka import TopicPartition as CTP

    c = cluster_factory(1, broker_config={"log.retention.check.interval.ms": 200})
    kb = kafka_bootstrap(c)
    create(c, "kret-size", config={"retention.bytes": "3000", "segment.bytes": "1024",
                                   "file.delete.delay.ms": "0"})
    create(c, "kret-time", config={"retention.ms": "60000", "segment.bytes": "1024",
                                   "file.delete.delay.ms": "0"})
    old = int(time.time() * 1000) - 3_600_000  # an hour old: past retention.ms already
    prod = CProducer({"bootstrap.servers": kb, "linger.ms": 0, "compression.type": "snappy"})
    for i in range(60):  # one batch each
        prod.produce("kret-size", value=b"%04d" % i + b"." * 200, partition=0)
        prod.produce("kret-time", value=b"%04d" % i + b"." * 200, partition=0, timestamp=old)
        assert prod.flush(30) == 0
    prod.produce("kret-time", value=b"new", partition=0)  # a fresh segment keeps the log open
    assert prod.flush(30) == 0
    for topic, total in (("kret-size", 60), ("kret-time", 61)):
        tp = TopicPartition(topic, 0)
        with Consumer(bootstrap_servers=c.bootstrap, auto_offset_reset="earliest") as cons:
            # the cleaner deletes a segment per check (every 200 ms): wait until the log start
            # offset has moved and then held for a few checks (a hang guard, not a timing test)
            seen: list[int] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (
                    len(seen) >= 4 and seen[-1] > 0 and len(set(seen[-4:])) == 1):
                seen.append(cons.beginning_offsets([tp])[tp])
                time.sleep(0.5)
            start = seen[-1]
            assert 0 < start < total, (topic, seen)
        recs = native_records(c, topic, total - start)
        assert [r.offset for r in recs] == list(range(start, total))
        kc = CConsumer({"bootstrap.servers": kb, "group.id": "unused", "enable.auto.commit": False,
                        "auto.offset.reset": "earliest"})
        kc.assign([CTP(topic, 0, OFFSET_BEGINNING)])
        kgot: list[int] = []
        deadline = time.monotonic() + 30
        while (not kgot or kgot[-1] < total - 1) and time.monotonic() < deadline:
            kgot += [m.offset() for m in kc.consume(num_messages=100, timeout=1) if m.error() is None]
        kc.close()
        assert kgot == list(range(start, total))


def test_corrupt_kafka_batch_on_disk_is_detected_like_a_native_one(cluster_factory: Any) -> None:
    """Bit rot inside a stored Kafka batch (lz4, as confluent-kafka produced it): the broker's
    fetch answers CORRUPT_MESSAGE for that range, the native consumer raises
    CorruptRecordError naming it, the records around it are served to both clients."""
    cluster1 = cluster_factory(1)  # its own node: it corrupts a segment and restarts the node
    import trio
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import Producer as CProducer
    from confluent_kafka import TopicPartition as CTP
    from rafka.client import errors
    from rafka.log.batch import iter_batches
    from rafka.wire.connection import connect
    from rafka.wire.errors import ErrorCode
    from rafka.wire.protocol import ApiKey

    from tests.broker.harness import fetch_body, part

    kb = kafka_bootstrap(cluster1)
    create(cluster1, "krot")
    prod = CProducer({"bootstrap.servers": kb, "compression.type": "lz4", "linger.ms": 0})
    for i in range(40):  # one batch each
        prod.produce("krot", value=b"a%d" % i * 20, partition=0)
        assert prod.flush(30) == 0
    [seg] = sorted(next(p for p in cluster1.data_dir.rglob("krot-0") if p.is_dir()).glob("*.log"))
    assert cluster1.down().returncode == 0
    data = seg.read_bytes()
    batches = list(iter_batches(data))
    assert len(batches) == 40 and all(h.is_kafka for _, h in batches)
    pos, h = batches[20]
    with open(seg, "r+b") as f:  # inside batch 20's (compressed) records
        f.seek(pos + h.size - 3)
        f.write(bytes(b ^ 0xFF for b in data[pos + h.size - 3:pos + h.size]))
    cluster1.up()

    async def fetch(offset: int) -> Any:
        async with connect("127.0.0.1", cluster1.port) as conn:
            return part((await conn.request(ApiKey.FETCH, fetch_body("krot", offset))).body)
    p = trio.run(fetch, 20)
    assert p["error"] == ErrorCode.CORRUPT_MESSAGE and "[20, 21)" in p["message"], p
    tp = TopicPartition("krot", 0)
    with Consumer(bootstrap_servers=cluster1.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        got: list[Any] = []
        with pytest.raises(errors.CorruptRecordError) as ei:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=300).values():
                    got.extend(recs)
        assert [r.value for r in got] == [b"a%d" % i * 20 for i in range(20)]
        assert "[20, 21)" in str(ei.value)
    cons = CConsumer({"bootstrap.servers": kb, "group.id": "unused", "enable.auto.commit": False})
    cons.assign([CTP("krot", 0, 21)])  # a Kafka client past the damage: served as produced
    kgot: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(kgot) < 19 and time.monotonic() < deadline:
        kgot += [m.value() for m in cons.consume(num_messages=100, timeout=1) if m.error() is None]
    cons.close()
    assert kgot == [b"a%d" % i * 20 for i in range(21, 40)]


# --------------------------------------------------------------------------- AdminClient


def test_confluent_admin_client(cluster1: LocalCluster) -> None:
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        ResourceType,
    )

    kb = kafka_bootstrap(cluster1)
    admin = AdminClient({"bootstrap.servers": kb})
    for f in admin.create_topics([NewTopic("adm", num_partitions=2, replication_factor=1,
                                           config={"retention.ms": "3600000"})]).values():
        f.result(30)
    bad = admin.create_topics([NewTopic("adm", num_partitions=1, replication_factor=1)])
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS|already exists"):
        bad["adm"].result(30)
    create(cluster1, "adm", partitions=2)  # (exists: waits for the leaders)

    res = ConfigResource(ResourceType.TOPIC, "adm")
    configs = admin.describe_configs([res])[res].result(30)
    assert configs["retention.ms"].value == "3600000"
    assert not configs["retention.ms"].is_default and configs["segment.bytes"].is_default
    inc = ConfigResource(ResourceType.TOPIC, "adm", incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([inc])[inc].result(30)
    deadline = time.monotonic() + 20
    while admin.describe_configs([res])[res].result(30)["retention.ms"].value != "7200000":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    # list-valued operations are refused by name, and change nothing
    append = ConfigResource(ResourceType.TOPIC, "adm", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    with pytest.raises(Exception, match="INVALID_REQUEST|APPEND"):
        admin.incremental_alter_configs([append])[append].result(30)
    assert admin.describe_configs([res])[res].result(30)["retention.ms"].value == "7200000"

    for f in admin.create_partitions([NewPartitions("adm", 4)]).values():
        f.result(30)
    deadline = time.monotonic() + 20
    while len(admin.list_topics(timeout=10).topics["adm"].partitions) != 4:
        assert time.monotonic() < deadline
        time.sleep(0.1)

    # a group with committed offsets: listed and described (Empty: no members)
    with Consumer(bootstrap_servers=cluster1.bootstrap, group_id="adm-g",
                  enable_auto_commit=False) as native:
        native.assign([TopicPartition("adm", 0)])
        native.commit({TopicPartition("adm", 0): 0})
    listed = admin.list_consumer_groups().result(30)
    assert "adm-g" in {g.group_id for g in listed.valid}
    desc = admin.describe_consumer_groups(["adm-g"])["adm-g"].result(30)
    assert desc.group_id == "adm-g" and desc.state == ConsumerGroupState.EMPTY
    admin.delete_consumer_groups(["adm-g"])["adm-g"].result(30)

    cluster = admin.describe_cluster().result(30)
    assert [f"{n.host}:{n.port}" for n in cluster.nodes] == [kb]

    for f in admin.delete_topics(["adm"]).values():
        f.result(30)
    deadline = time.monotonic() + 20
    while "adm" in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_kafka_python_auto_created_topic_and_offsets_in_a_transaction(cluster1: LocalCluster) -> None:
    """A producer's METADATA creates a missing topic (auto.create.topics.enable, Kafka's
    default); send_offsets_to_transaction on a cluster with no __consumer_offsets yet."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    kb = kafka_bootstrap(cluster1)
    prod = KafkaProducer(bootstrap_servers=kb, transactional_id="auto-tx")
    prod.init_transactions()
    prod.begin_transaction()
    assert prod.send("auto-made", value=b"x").get(timeout=30).offset == 0
    prod.send_offsets_to_transaction({KTP("auto-made", 0): OffsetAndMetadata(1, "", -1)}, "auto-g")
    prod.commit_transaction()
    prod.close()
    with Admin(bootstrap_servers=cluster1.bootstrap) as a:
        assert "auto-made" in a.list_topics()
    admin = KafkaAdminClient(bootstrap_servers=kb)
    offsets = admin.list_group_offsets("auto-g")["auto-g"]
    admin.close()
    assert {tp: o.offset for tp, o in offsets.items()} == {KTP("auto-made", 0): 1}


def test_confluent_admin_acls(cluster1: LocalCluster) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap(cluster1)})
    read = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice",
                      "*", AclOperation.READ, AclPermissionType.ALLOW)
    write = AclBinding(ResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED, "User:bob",
                       "*", AclOperation.WRITE, AclPermissionType.DENY)
    for f in admin.create_acls([read, write]).values():
        f.result(30)
    any_topic = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
    deadline = time.monotonic() + 20
    while True:  # the controller's records reach this broker's image
        got = admin.describe_acls(any_topic).result(30)
        if len(got) == 2:
            break
        assert time.monotonic() < deadline, got
        time.sleep(0.1)
    assert sorted(got, key=str) == sorted([read, write], key=str)
    listed = subprocess.run(  # the same ACLs, natively (rafka acl list)
        [str(Path(sys.executable).with_name("rafka")), "acl", "list", "--json",
         "--bootstrap", cluster1.bootstrap], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert {(a["principal"], a["operation"], a["pattern_type"], a["permission"])
            for a in json.loads(listed.stdout)} == {("User:alice", "read", "literal", "allow"),
                                                    ("User:bob", "write", "prefixed", "deny")}
    bob = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
                           AclOperation.ANY, AclPermissionType.ANY)
    deleted = list(admin.delete_acls([bob]).values())[0].result(30)
    assert deleted == [write]
    deadline = time.monotonic() + 20
    while admin.describe_acls(any_topic).result(30) != [read]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
