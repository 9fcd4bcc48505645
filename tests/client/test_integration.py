"""Client against a real broker (see conftest.py): produce, consume, seek, admin, CLI."""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time

import pytest
import trio
from rafka.client import (
    Admin,
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    Producer,
    RecordMetadata,
    TopicPartition,
    errors,
)

from .conftest import drain, rafka


def test_100k_records_round_trip_in_order(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(3)
    n = 100_000
    sent: dict[int, tuple[bytes, bytes, list[tuple[str, bytes]], int]] = {}
    with Producer(bootstrap, linger_ms=5) as p:
        futs = []
        for i in range(n):
            key = b"k%d" % (i % 97)
            headers = [("i", b"%d" % i)] if i % 10 == 0 else []
            ts = 1_600_000_000_000 + i
            futs.append(p.send(topic, value=b"value-%d" % i, key=key, headers=headers, timestamp_ms=ts))
            sent[i] = (key, b"value-%d" % i, headers, ts)
        p.flush()
        metas = [f.result(timeout=60) for f in futs]
    assert all(isinstance(m, RecordMetadata) and m.offset >= 0 for m in metas)
    # same key → same partition, offsets increase in send order within a partition
    by_key: dict[bytes, set[int]] = {}
    last: dict[int, int] = {}
    for i, m in enumerate(metas):
        by_key.setdefault(sent[i][0], set()).add(m.partition)
        assert m.offset > last.get(m.partition, -1)
        last[m.partition] = m.offset
        assert m.timestamp == sent[i][3]
    assert all(len(ps) == 1 for ps in by_key.values())

    tps = [TopicPartition(topic, p) for p in range(3)]
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign(tps)
        got = drain(c, n)
    assert len(got) == n
    where = {(m.partition, m.offset): i for i, m in enumerate(metas)}
    prev: dict[int, int] = {}
    for r in got:
        i = where[(r.partition, r.offset)]
        key, value, headers, ts = sent[i]
        assert (r.key, r.value, list(r.headers), r.timestamp, r.topic) == (key, value, headers, ts, topic)
        assert r.offset > prev.get(r.partition, -1)
        prev[r.partition] = r.offset


def test_lz4_batches(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1)
    with Producer(bootstrap, compression_type="lz4", linger_ms=20) as p:
        futs = [p.send(topic, value=b"lz4 payload %d " % i * 10) for i in range(5000)]
        p.flush()
        assert futs[-1].result(30).offset == 4999
    with Consumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        got = drain(c, 5000)
    assert [r.value for r in got] == [b"lz4 payload %d " % i * 10 for i in range(5000)]


def test_seek_position_offsets_for_times(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1)
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap) as p:
        for i in range(100):
            p.send(topic, value=b"%d" % i, timestamp_ms=1_000_000 + i * 10)
        p.flush()
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert c.assignment() == {tp}
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 100}
        assert c.position(tp) == 0
        c.seek(tp, 42)
        assert c.position(tp) == 42
        got = drain(c, 58)
        assert [r.offset for r in got] == list(range(42, 100))
        assert c.position(tp) == 100
        c.seek_to_beginning()
        assert c.position(tp) == 0
        c.seek_to_end(tp)
        assert c.position(tp) == 100
        found = c.offsets_for_times({tp: 1_000_000 + 255})
        assert found[tp] is not None and found[tp].offset == 26 and found[tp].timestamp == 1_000_260
        assert c.offsets_for_times({tp: 9_999_999_999})[tp] is None


def test_pause_resume(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(2)
    t0, t1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with Producer(bootstrap) as p:
        for _ in range(50):
            p.send(topic, value=b"a", partition=0)
            p.send(topic, value=b"b", partition=1)
        p.flush()
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([t0, t1])
        c.pause(t1)
        assert c.paused() == {t1}
        got = drain(c, 50)
        assert {r.partition for r in got} == {0}
        assert c.poll(timeout_ms=300) == {}
        c.resume(t1)
        got = drain(c, 50)
        assert len(got) == 50 and {r.partition for r in got} == {1}


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(bootstrap: str, make_topic, acks) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1)
    with Producer(bootstrap, acks=acks) as p:
        futs = [p.send(topic, value=b"%d" % i) for i in range(1000)]
        p.flush()
        metas = [f.result(10) for f in futs]
    if acks == 0:
        assert all(m.offset == -1 for m in metas)
    else:
        assert [m.offset for m in metas] == list(range(1000))
    with Consumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        assert len(drain(c, 1000)) == 1000


def test_buffer_full_blocks_then_raises_named_error(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1)
    # linger 60 s: the first batch is not sent until flush, so its memory stays used
    with Producer(bootstrap, buffer_memory=1000, batch_size=100_000, linger_ms=60_000, max_block_ms=200) as p:
        first = p.send(topic, value=b"x" * 600)
        with pytest.raises(errors.BufferExhaustedError):
            p.send(topic, value=b"y" * 600)
        p.flush()
        assert first.result(10).offset == 0
    # blocking that succeeds: memory comes back when the lingering batch is sent
    with Producer(bootstrap, buffer_memory=1000, linger_ms=200, max_block_ms=30_000) as p:
        p.send(topic, value=b"x" * 600)
        assert p.send(topic, value=b"y" * 600).result(30).offset == 2


def test_sync_facade_threads_and_close(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1)
    before = set(threading.enumerate())
    p = Producer(bootstrap)
    fut = p.send(topic, value=b"v")
    assert isinstance(fut, cf.Future)
    done, _ = cf.wait([fut], timeout=30)
    assert fut in done and fut.result().offset == 0
    p.close()
    p.close()  # idempotent
    with pytest.raises(errors.IllegalStateError):
        p.send(topic, value=b"late")
    with Consumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=2000) as c:
        assert [r.value for r in c] == [b"v"]
    assert set(threading.enumerate()) <= before


def test_admin(bootstrap: str, topic_name: str) -> None:
    with Admin(bootstrap) as a:
        a.create_topic(topic_name, partitions=3, replication_factor=1, config={"retention.ms": "3600000"})
        assert topic_name in a.list_topics()
        with pytest.raises(errors.TopicAlreadyExistsError):
            a.create_topic(topic_name, partitions=1)
        d = a.describe_topic(topic_name)
        assert [p.partition for p in d.partitions] == [0, 1, 2]
        assert all(p.leader >= 0 and p.isr and p.high_watermark == 0 for p in d.partitions)
        assert a.describe_configs(topic_name)["retention.ms"] in (3600000, "3600000")
        cluster = a.describe_cluster()
        assert cluster.brokers
        a.delete_topic(topic_name)
        assert topic_name not in a.list_topics()
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            a.describe_topic(topic_name)


async def test_async_clients(bootstrap: str, topic_name: str) -> None:
    async with AsyncAdmin(bootstrap) as admin:
        await admin.create_topic(topic_name, 2, 1)
    async with AsyncProducer(bootstrap, linger_ms=1) as p:
        futs = [await p.send(topic_name, value=b"%d" % i, key=b"%d" % (i % 5)) for i in range(500)]
        metas = [await f for f in futs]
    assert len({(m.partition, m.offset) for m in metas}) == 500
    async with AsyncConsumer(topic_name, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000) as c:
        values = [r.value async for r in c]
    assert sorted(values) == sorted(b"%d" % i for i in range(500))


def test_cli_tour(bootstrap: str, topic_name: str) -> None:
    env = {"RAFKA_BOOTSTRAP": bootstrap}
    r = rafka("topic", "create", topic_name, "--partitions", "2", "--replication-factor", "1", env=env)
    assert r.returncode == 0, r.stderr
    r = rafka("topic", "list", "--json", env=env)
    assert topic_name in r.stdout.decode()
    lines = b"".join(b"k%d:line %d\n" % (i % 3, i) for i in range(200))
    r = rafka("produce", topic_name, "--key-separator", ":", "--acks", "all", input=lines, env=env)
    assert r.returncode == 0, r.stderr
    r = rafka("consume", topic_name, "--from-beginning", "--max-messages", "200", "--timeout-ms", "20000", env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.decode().splitlines()) == sorted(f"line {i}" for i in range(200))
    r = rafka("topic", "describe", topic_name, "--json", env=env)
    assert r.returncode == 0, r.stderr
    import json

    d = json.loads(r.stdout)
    assert sum(p["high_watermark"] for p in d["partitions"]) == 200
    r = rafka("topic", "create", topic_name, env=env)
    assert r.returncode != 0
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "TOPIC_ALREADY_EXISTS" in err[0] and "Traceback" not in r.stderr.decode()
    r = rafka("topic", "delete", topic_name, env=env)
    assert r.returncode == 0, r.stderr


def test_unknown_topic_send_times_out_with_named_error(bootstrap: str) -> None:
    with Producer(bootstrap, max_block_ms=500) as p:
        with pytest.raises((errors.KafkaTimeoutError, errors.UnknownTopicOrPartitionError)):
            p.send("no-such-topic-" + str(time.time_ns()), value=b"v")


def test_trio_mode_is_available() -> None:
    assert trio.__version__
