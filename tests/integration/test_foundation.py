"""Issue 2 (Foundation) on a real node process (``rafka cluster up --nodes 1``), over TCP.

One node for the whole module (started once; a few tests stop/kill and restart it on the same
data dir, which is itself one of the things checked). Its housekeeping runs every 200 ms
(``log.retention.check.interval.ms``, ``log.cleaner.backoff.ms``) so retention and compaction
are seen soon; every wait below is a hang guard on a condition, never a timing assertion.

- kill -9 while an acks=1 producer is sending, ``cluster up`` again: every acknowledged record
  is found at its acknowledged offset (flush policy ``batch``), and records sent while the node
  was down are delivered by the producer's retries;
- a segment corrupted in the middle (node stopped, bytes flipped, node restarted): the good
  part is served, the damaged range gets CORRUPT_MESSAGE naming it, the consumer raises
  ``CorruptRecordError`` naming it, the rest of the log is served;
- retention by time and by size, compaction (the seeds' example), ``auto_offset_reset``
  earliest/latest/none on an out-of-range position, MESSAGE_TOO_LARGE, consumer prefetch;
- a full disk (data dir on a small tmpfs; root only): KAFKA_STORAGE_ERROR, acknowledged data
  intact, the node keeps answering and accepts writes again once space is freed.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from rafka.client import Admin, Consumer, ConsumerRecord, Producer, TopicPartition, errors
from rafka.log.batch import iter_batches
from rafka.wire.connection import connect
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

from rafka.cluster import free_port_block
from tests.broker.harness import batch, fetch_body, part, produce_body
from tests.integration.conftest import LocalCluster
from tests.tmpfs import mounted_tmpfs

HANG_GUARD = 90  # seconds; for conditions that become true
HOUSEKEEPING = {"log.retention.check.interval.ms": 200, "log.cleaner.backoff.ms": 200}


def wait_for(cond: Callable[[], Any], what: str, timeout_s: float = HANG_GUARD) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = cond()
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - not yet
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s} s (last: {last!r})")


def _start(data_dir: Path, **broker: Any) -> LocalCluster:
    c = LocalCluster(data_dir, 1, free_port_block(1), broker_config={**HOUSEKEEPING, **broker})
    c.up()
    return c


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = _start(tmp_path_factory.mktemp("foundation") / "cluster")
    try:
        yield c
    finally:
        c.stop()


def new_topic(c: LocalCluster, partitions: int = 1, config: dict[str, str] | None = None) -> str:
    name = f"f-{uuid.uuid4().hex[:8]}"
    with Admin(c.bootstrap) as admin:
        admin.create_topic(name, partitions, 1, config)
    return name


def produce(c: LocalCluster, topic: str, values: list[bytes], *, one_batch_each: bool = False,
            batch_size: int = 16384, **kw: Any) -> list[Any]:
    with Producer(c.bootstrap, linger_ms=5, batch_size=batch_size) as p:
        metas = []
        for v in values:
            f = p.send(topic, value=v, **kw)
            if one_batch_each:
                p.flush()
                metas.append(f.result(30))
            else:
                metas.append(f)
        p.flush()
        return [m if not hasattr(m, "result") else m.result(30) for m in metas]


def drain(c: Consumer, n: int, timeout_s: float = HANG_GUARD) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=300).values():
            out.extend(recs)
    return out


def raw(c: LocalCluster, api: ApiKey, body: dict[str, Any]) -> Any:
    async def go() -> Any:
        async with connect("127.0.0.1", c.port) as conn:
            return await conn.request(api, body)
    return trio.run(go)


def partition_dir(c: LocalCluster, topic: str, partition: int = 0) -> Path:
    found = [p for p in c.data_dir.rglob(f"{topic}-{partition}") if p.is_dir()]
    assert len(found) == 1, found
    return found[0]


def segment_files(c: LocalCluster, topic: str) -> list[Path]:
    return sorted(partition_dir(c, topic).glob("*.log"))


def still_answers(c: LocalCluster) -> None:
    md = raw(c, ApiKey.METADATA, {"topics": []}).body
    assert md.get("error", 0) == 0 and md["brokers"]


# ------------------------------------------------------------------ kill -9 mid-stream, restart


@pytest.mark.parametrize("acks", [1, "all"])
def test_kill9_mid_stream_every_acknowledged_record_survives(node: LocalCluster, acks: Any) -> None:
    topic = new_topic(node, 2)
    acked: dict[bytes, tuple[int, int]] = {}
    failed: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()
    sent = [0]

    def on_done(value: bytes, fut: Any) -> None:
        exc = fut.exception()
        with lock:
            if exc is not None:
                failed.append(exc)
            else:
                m = fut.result()
                acked[value] = (m.partition, m.offset)

    # delivery_timeout_ms long enough to outlive the restart: what is sent while the node is
    # down is delivered by retries (with backoff) once it is back
    with Producer(node.bootstrap, acks=acks, linger_ms=2, retry_backoff_ms=50, request_timeout_ms=5000,
                  delivery_timeout_ms=300_000, max_block_ms=300_000) as p:
        def sender() -> None:
            i = 0
            while not stop.is_set():
                v = b"r%07d" % i
                p.send(topic, value=v, key=b"k%d" % (i % 13)).add_done_callback(
                    lambda f, v=v: on_done(v, f))
                i += 1
                sent[0] = i
                if i % 50 == 0:
                    time.sleep(0.002)

        t = threading.Thread(target=sender, daemon=True)
        t.start()
        try:
            wait_for(lambda: len(acked) >= 3000, "3000 acknowledged records before the kill")
            node.kill(1)  # SIGKILL, mid-stream
            at_kill = sent[0]
            wait_for(lambda: sent[0] >= at_kill + 500, "the producer keeps accepting sends")
            node.up()  # `rafka cluster up` on the same data dir
            acked_at_restart = len(acked)
            wait_for(lambda: len(acked) >= acked_at_restart + 3000, "acknowledgements after the restart")
        finally:
            stop.set()
            t.join(30)
        p.flush(120)
    total = sent[0]
    assert not failed, f"{len(failed)} sends failed, e.g. {failed[0]!r}"
    assert len(acked) == total  # everything sent while the node was down was retried and delivered

    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    at: dict[tuple[int, int], bytes] = {}
    with Consumer(bootstrap_servers=node.bootstrap, auto_offset_reset="earliest") as c:
        c.assign(tps)
        end = c.end_offsets(tps)
        deadline = time.monotonic() + HANG_GUARD
        while any(c.position(tp) < end[tp] for tp in tps) and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=300).values():
                at.update(((r.partition, r.offset), r.value) for r in recs)
    missing = [(v, where, at.get(where)) for v, where in acked.items() if at.get(where) != v]
    assert not missing, f"{len(missing)} acknowledged records not at their offsets, e.g. {missing[:5]}"
    if acks == "all":  # idempotent by default with acks=all: retries after the restart add no copies
        assert len(at) == total and sorted(at.values()) == sorted(acked)


# ------------------------------------------------------------------ corrupt segment, real broker


def test_segment_corrupted_in_the_middle(node: LocalCluster) -> None:
    topic = new_topic(node, 1)
    produce(node, topic, [b"a%d" % i for i in range(40)], one_batch_each=True)  # 40 batches
    [seg] = segment_files(node, topic)
    assert node.down().returncode == 0  # clean stop
    data = seg.read_bytes()
    batches = list(iter_batches(data))
    assert len(batches) == 40
    pos, h = batches[20]
    assert h.base_offset == 20
    with open(seg, "r+b") as f:  # bit rot inside batch 20's records (offset 20)
        f.seek(pos + h.size - 3)
        f.write(bytes(b ^ 0xFF for b in data[pos + h.size - 3:pos + h.size]))
    node.up()  # the same node, its data back

    # the good part before the damage
    p = part(raw(node, ApiKey.FETCH, fetch_body(topic, 0)).body)
    assert p["error"] == 0 and p["high_watermark"] == 40 and p["records_len"] > 0
    # the damaged range: CORRUPT_MESSAGE, naming the range and the file
    p = part(raw(node, ApiKey.FETCH, fetch_body(topic, 20)).body)
    assert p["error"] == ErrorCode.CORRUPT_MESSAGE, p
    assert "[20, 21)" in p["message"] and seg.name in p["message"], p["message"]
    # the good part after it
    p = part(raw(node, ApiKey.FETCH, fetch_body(topic, 21)).body)
    assert p["error"] == 0 and p["records_len"] > 0

    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=node.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        got: list[ConsumerRecord] = []
        with pytest.raises(errors.CorruptRecordError) as ei:
            deadline = time.monotonic() + HANG_GUARD
            while time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=300).values():
                    got.extend(recs)
        assert [r.value for r in got] == [b"a%d" % i for i in range(20)]
        assert "[20, 21)" in str(ei.value) and topic in str(ei.value), str(ei.value)
        c.seek(tp, 21)  # the application may skip the damaged range
        assert [r.offset for r in drain(c, 19)] == list(range(21, 40))
    # the partition still takes writes, the node still answers
    assert produce(node, topic, [b"after"])[0].offset == 40
    still_answers(node)


# ------------------------------------------------------------------ retention and compaction


def test_retention_by_time(node: LocalCluster) -> None:
    topic = new_topic(node, 1, {"retention.ms": "60000", "segment.bytes": "1024",
                                "file.delete.delay.ms": "0"})
    old = int(time.time() * 1000) - 3_600_000  # an hour old: past retention.ms already
    produce(node, topic, [b"old-%03d" % i + b"." * 100 for i in range(60)], timestamp_ms=old,
            batch_size=800)  # a batch must fit a segment
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=node.bootstrap, auto_offset_reset="earliest") as c:
        start = wait_for(lambda: c.beginning_offsets([tp])[tp], "log start offset advances")
        assert 0 < start <= 60

        def old_files_gone() -> bool:  # segment files are named by their base offset
            bases = [int(f.stem) for f in segment_files(node, topic)]
            return bool(bases) and min(bases) >= start

        wait_for(old_files_gone, "the expired segment files are deleted")
        p = part(raw(node, ApiKey.FETCH, fetch_body(topic, 0)).body)
        assert p["error"] == ErrorCode.OFFSET_OUT_OF_RANGE and p["log_start_offset"] >= start
    produce(node, topic, [b"new"])
    with Consumer(bootstrap_servers=node.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        first = drain(c, 1)[0]
        start = c.beginning_offsets([tp])[tp]
        assert first.offset == start and first.offset > 0


def test_retention_by_size(node: LocalCluster) -> None:
    topic = new_topic(node, 1, {"retention.bytes": "3000", "segment.bytes": "1024",
                                "file.delete.delay.ms": "0"})
    produce(node, topic, [b"%04d" % i + b"." * 200 for i in range(100)], one_batch_each=True)
    tp = TopicPartition(topic, 0)

    def small_enough() -> bool:
        return sum(s.stat().st_size for s in segment_files(node, topic)) <= 3000 + 1024

    wait_for(small_enough, "segments beyond retention.bytes deleted")
    with Consumer(bootstrap_servers=node.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        start = c.beginning_offsets([tp])[tp]
        assert 0 < start < 100
        got = drain(c, 100 - start)
        assert [r.offset for r in got] == list(range(start, 100))
        assert got[-1].value.startswith(b"0099")


def test_altered_topic_config_reaches_open_partitions(node: LocalCluster) -> None:
    """ALTER_CONFIGS on a topic whose partitions are already open: the broker applies the new
    retention at its next check (it used to keep the config the partition was opened with)."""
    topic = new_topic(node, 1, {"segment.bytes": "1024", "file.delete.delay.ms": "0"})
    produce(node, topic, [b"%04d" % i + b"." * 200 for i in range(100)], one_batch_each=True)
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=node.bootstrap) as c:
        assert c.beginning_offsets([tp])[tp] == 0  # no retention yet: everything kept
    with Admin(node.bootstrap) as admin:
        admin.alter_configs(topic, {"retention.bytes": "3000"})
        assert admin.describe_configs(topic)["retention.bytes"] == "3000"

    def trimmed() -> bool:
        with Consumer(bootstrap_servers=node.bootstrap) as c:
            return c.beginning_offsets([tp])[tp] > 0

    wait_for(trimmed, "the altered retention.bytes applied to the open partition")
    assert sum(s.stat().st_size for s in segment_files(node, topic)) <= 3000 + 1024


SEEDS_KEYS = [b"K1", b"K2", b"K1", b"K1", b"K3", b"K2", b"K4", b"K5", b"K5", b"K2", b"K6"]


def test_compaction_seeds_example(node: LocalCluster) -> None:
    # segment.bytes=100: one ~80-byte batch per segment, so all but offset 10 are cleanable
    topic = new_topic(node, 1, {"cleanup.policy": "compact", "segment.bytes": "100"})
    with Producer(node.bootstrap) as p:
        for i, k in enumerate(SEEDS_KEYS):
            assert p.send(topic, key=k, value=b"v%d" % i).result(30).offset == i
    tp = TopicPartition(topic, 0)

    def compacted() -> list[tuple[int, bytes, bytes]] | None:
        with Consumer(bootstrap_servers=node.bootstrap, auto_offset_reset="earliest") as c:
            c.assign([tp])
            got: list[ConsumerRecord] = []
            while not got or got[-1].offset < 10:
                batch_ = c.poll(timeout_ms=2000).get(tp, [])
                if not batch_:
                    return None
                got += batch_
        out = [(r.offset, r.key, r.value) for r in got]
        return out if len(out) == 6 else None

    got = wait_for(compacted, "the broker's cleaner compacts the log")
    assert got == [(3, b"K1", b"v3"), (4, b"K3", b"v4"), (6, b"K4", b"v6"), (8, b"K5", b"v8"),
                   (9, b"K2", b"v9"), (10, b"K6", b"v10")]


# ------------------------------------------------------------------ out of range → auto_offset_reset


@pytest.mark.parametrize("reset", ["earliest", "latest", "none"])
def test_offset_out_of_range_follows_auto_offset_reset(node: LocalCluster, reset: str) -> None:
    topic = new_topic(node, 1)
    produce(node, topic, [b"%d" % i for i in range(10)])
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=node.bootstrap, auto_offset_reset=reset) as c:
        c.assign([tp])
        c.seek(tp, 1000)  # beyond the log end
        if reset == "none":
            with pytest.raises(errors.OffsetOutOfRangeError) as ei:
                drain(c, 1)
            assert ei.value.code == ErrorCode.OFFSET_OUT_OF_RANGE and f"{topic}-0" in str(ei.value)
        elif reset == "earliest":
            assert [r.value for r in drain(c, 10)] == [b"%d" % i for i in range(10)]
        else:
            wait_for(lambda: (c.poll(timeout_ms=100), c.position(tp))[1] == 10, "reset to the end")
            produce(node, topic, [b"later"])
            assert [(r.offset, r.value) for r in drain(c, 1)] == [(10, b"later")]


# ------------------------------------------------------------------ limits


def test_batch_larger_than_max_message_bytes(node: LocalCluster) -> None:
    topic = new_topic(node, 1, {"max.message.bytes": "2000"})
    with Producer(node.bootstrap) as p:
        with pytest.raises(errors.RafkaError) as ei:
            p.send(topic, value=b"x" * 5000).result(30)
        assert ei.value.code == ErrorCode.MESSAGE_TOO_LARGE and "max.message.bytes" in str(ei.value)
        assert p.send(topic, value=b"small").result(30).offset == 0  # nothing appended before
    r = part(raw(node, ApiKey.PRODUCE, produce_body(topic, batch(b"y" * 5000))).body)
    assert r["error"] == ErrorCode.MESSAGE_TOO_LARGE
    still_answers(node)


# ------------------------------------------------------------------ consumer prefetch


def test_consumer_prefetches_while_the_application_processes(node: LocalCluster) -> None:
    topic = new_topic(node, 1)
    produce(node, topic, [b"%05d" % i + b"." * 100 for i in range(2000)], batch_size=2000)
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=node.bootstrap, auto_offset_reset="earliest",
                  max_partition_fetch_bytes=4096, max_buffered_fetches=3) as c:
        c.assign([tp])
        first: list[ConsumerRecord] = []
        while not first:
            first = c.poll(timeout_ms=300, max_records=1).get(tp, [])
        assert first[0].offset == 0
        state = c._async._states[tp]  # the consumer's own buffer, observed from outside
        # no poll() meanwhile: the fetch loop keeps fetching ahead, up to max_buffered_fetches
        wait_for(lambda: len(state.buffered) >= 3, "fetches buffered ahead of the application")
        assert state.fetch_offset > c.position(tp)


# ------------------------------------------------------------------ full disk, real broker


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "tmpfs", "48m") as where:
        yield where


def test_full_disk_on_a_real_broker(tmpfs: Path) -> None:
    c = _start(tmpfs / "cluster")
    try:
        topic = new_topic(c, 1)
        first = produce(c, topic, [b"kept-%d" % i for i in range(100)])
        assert [m.offset for m in first] == list(range(100))
        # leave ~256 KiB free
        free = shutil.disk_usage(tmpfs).free
        filler = tmpfs / "filler"
        with open(filler, "wb") as f:
            f.truncate(0)
            remaining = free - 256 * 1024
            chunk = b"\0" * (1 << 20)
            while remaining > 0:
                remaining -= f.write(chunk[:min(len(chunk), remaining)])
        codes = []
        value = b"z" * 60_000
        for _ in range(20):  # ~1.2 MB into 256 KiB
            r = part(raw(c, ApiKey.PRODUCE, produce_body(topic, batch(value), acks=1)).body)
            codes.append(r["error"])
            if r["error"]:
                break
        assert codes[-1] == ErrorCode.KAFKA_STORAGE_ERROR, codes
        assert "disk full" in r["message"] or "No space" in r["message"], r["message"]
        ok = codes.count(0)
        with Producer(c.bootstrap, retries=0) as p:  # the client names it too
            with pytest.raises(errors.RafkaError) as ei:
                p.send(topic, value=value).result(60)
            assert ei.value.code == ErrorCode.KAFKA_STORAGE_ERROR, ei.value
        still_answers(c)
        tp = TopicPartition(topic, 0)
        with Consumer(bootstrap_servers=c.bootstrap, auto_offset_reset="earliest") as cons:
            cons.assign([tp])
            got = drain(cons, 100 + ok)
        assert [r.value for r in got[:100]] == [b"kept-%d" % i for i in range(100)]
        assert [r.offset for r in got] == list(range(100 + ok))
        filler.unlink()  # space again: writes work again
        m = wait_for(lambda: produce(c, topic, [b"after"])[0], "a produce after space is freed")
        assert m.offset == 100 + ok
    finally:
        c.stop()


# ------------------------------------------------------------------ the wire, on the real process


def test_long_poll_fetch_wakes_up_on_new_data(node: LocalCluster) -> None:
    topic = new_topic(node, 1)

    async def go() -> dict[str, Any]:
        result: dict[str, Any] = {}
        async with connect("127.0.0.1", node.port) as conn:
            async def poll() -> None:
                resp = await conn.request(ApiKey.FETCH, fetch_body(topic, 0, max_wait_ms=600_000))
                result["p"] = part(resp.body)

            with trio.fail_after(HANG_GUARD):  # without a wake-up it would wait 10 minutes
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(poll)
                    await trio.sleep(0.2)
                    assert "p" not in result  # parked: nothing to return yet
                    async with connect("127.0.0.1", node.port) as other:
                        r = await other.request(ApiKey.PRODUCE, produce_body(topic, batch(b"wake")))
                        assert part(r.body)["error"] == 0
        return result["p"]

    p = trio.run(go)
    assert p["error"] == 0 and p["records_len"] > 0 and p["high_watermark"] == 1


def test_hostile_bytes_on_the_port(node: LocalCluster) -> None:
    """Garbage, a truncated frame, an unknown api and a non-msgpack frame: each gets a named
    error or a closed connection; the node keeps answering."""
    import socket
    import struct

    import msgpack

    def exchange(payload: bytes, close_after_send: bool = False) -> bytes:
        with socket.create_connection(("127.0.0.1", node.port), timeout=HANG_GUARD) as s:
            s.sendall(payload)
            if close_after_send:
                return b""
            s.shutdown(socket.SHUT_WR)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
            return out

    def first_error(answer: bytes) -> tuple[int, int]:
        (n,) = struct.unpack(">I", answer[:4])
        frame = answer[4:4 + n]
        (hlen,) = struct.unpack(">I", frame[:4])
        cid, body = msgpack.unpackb(frame[4:4 + hlen], raw=False, strict_map_key=False)
        return cid, body["error"]

    assert first_error(exchange(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")) == (-1, ErrorCode.FRAME_TOO_LARGE)
    still_answers(node)
    assert first_error(exchange(struct.pack(">I", 5) + b"\xc1" * 5)) == (-1, ErrorCode.MALFORMED_FRAME)
    body = msgpack.packb([999, 0, 42, "raw", {}], use_bin_type=True)
    assert first_error(exchange(struct.pack(">I", len(body)) + body)) == (42, ErrorCode.UNKNOWN_API)
    exchange(struct.pack(">I", 1000) + b"\x95" + b"\0" * 10, close_after_send=True)  # truncated
    exchange(os.urandom(4096), close_after_send=True)
    still_answers(node)
