"""Socket-free tests of the client's pure parts."""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time

import pytest
from rafka.client.aio._core import ClientCore, ClusterMetadata
from rafka.client.aio.accumulator import (
    LINGER_TIMER_SLACK_S,
    PartitionState,
    RecordAccumulator,
    record_size,
)
from rafka.client.aio.fetch import CompletedFetch, split_fetch_response
from rafka.client.aio.futures import BatchResult, FutureRecordMetadata
from rafka.client.errors import CorruptRecordError
from rafka.client.partitioner import (
    Crc32cPartitioner,
    Murmur2Partitioner,
    make_partitioner,
    murmur2,
)
from rafka.client.types import ConsumerRecord, RecordMetadata, TopicPartition
from rafka.log.batch import build_batch

# ---------------------------------------------------------------- partitioner


def test_murmur2_matches_kafka_vectors() -> None:
    # Values from Kafka's UtilsTest.testMurmur2 (signed there).
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
             b"abc": 479470107}
    for data, signed in cases.items():
        assert murmur2(data) == signed & 0xFFFFFFFF, data


def test_partitioners_are_stable_and_in_range() -> None:
    for part in (Murmur2Partitioner(cache_size=4), Crc32cPartitioner(), make_partitioner(None)):
        for i in range(100):
            key = f"key-{i}".encode()
            p = part(key, 7)
            assert 0 <= p < 7
            assert part(key, 7) == p
    assert Murmur2Partitioner()(b"foobar", 1000) == (murmur2(b"foobar") & 0x7FFFFFFF) % 1000
    with pytest.raises(ValueError):
        make_partitioner("nope")


# ---------------------------------------------------------------- accumulator


def _acc(**kw: object) -> tuple[RecordAccumulator, list[int]]:
    wakes: list[int] = []
    opts = {"batch_size": 1000, "buffer_memory": 10_000, "linger_ms": 5,
            "wakeup": lambda: wakes.append(1), "loop_thread": -1}
    opts.update(kw)
    return RecordAccumulator(**opts), wakes  # type: ignore[arg-type]


def test_batches_close_at_batch_size_and_drain_in_order() -> None:
    acc, wakes = _acc()
    acc.wake_armed = True  # the sender is asleep
    futs = [acc.append("t", 0, None, b"x" * 88, [], 1000 + i, 100, 3) for i in range(25)]
    assert all(f is not None for f in futs)
    assert acc.used == 2500
    batches = acc.drain(time.monotonic())  # closed ones only; the open one has not lingered
    assert [len(b.records) for b in batches] == [10, 10]
    assert [f._index for f in futs[:12]] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    rest = acc.drain(time.monotonic() + 1)
    assert [len(b.records) for b in rest] == [5]
    assert wakes  # the sender was woken
    for b in batches + rest:
        acc.release(b)
    assert acc.used == 0 and not acc.incomplete


def test_linger_deadline_is_centred_on_the_millisecond_timer() -> None:
    """An open batch is due from ``LINGER_TIMER_SLACK_S`` before ``created + linger``, and the
    sender is told to wake then: trio's timers fire on whole milliseconds, rounded up, so the
    wake-up lands within half a millisecond either side of the deadline, not 0-1 ms after it.
    The clock is the argument: nothing here waits."""
    acc, _ = _acc(linger_ms=5)
    acc.append("t", 0, None, b"v", [], 0, 10, 1)
    (created,) = [b.created for by_part in acc._open.values() for b in by_part.values()]
    due = created + 0.005 - LINGER_TIMER_SLACK_S
    assert acc.next_deadline() == pytest.approx(due)
    assert acc.drain(due - 0.0001) == []  # more than the slack before the deadline: keeps filling
    (b,) = acc.drain(due)
    assert b.created == created and len(b.records) == 1
    assert acc.next_deadline() is None


def test_held_partition_keeps_filling_its_batch() -> None:
    """A partition that could not send now (``hold``) is not drained at linger: its batch keeps
    growing, so a backlog leaves as one big batch instead of many one-record batches."""
    acc, _ = _acc(linger_ms=0)
    for i in range(3):
        acc.append("t", 0, None, b"v", [], i, 10, 2)
        acc.append("t", 1, None, b"v", [], i, 10, 2)
    assert acc.next_deadline(lambda t, p: True) is None
    out = acc.drain(time.monotonic() + 1, hold=lambda t, p: p == 0)
    assert [(b.partition, len(b.records)) for b in out] == [(1, 3)]
    acc.append("t", 0, None, b"v", [], 3, 10, 2)
    out = acc.drain(time.monotonic() + 1, hold=lambda t, p: False)
    assert [(b.partition, len(b.records)) for b in out] == [(0, 4)]
    assert [r[:2] for r in out[0].records] == [(0, 0), (1, 1), (2, 2), (3, 3)]


def test_sticky_partition_changes_when_batch_closes() -> None:
    acc, _ = _acc()
    first = {acc.append("t", -1, None, b"v", [], 0, 100, 50)._batch.partition for _ in range(10)}  # type: ignore[union-attr]
    assert len(first) == 1  # stuck to one partition for a whole batch
    seen = set()
    for _ in range(200):
        f = acc.append("t", -1, None, b"v", [], 0, 100, 50)
        if f is None:
            for b in acc.drain(time.monotonic(), force=True):
                acc.release(b)
            continue
        seen.add(f._batch.partition)
    assert len(seen) > 1


def test_buffer_full_returns_none_then_waits_for_release() -> None:
    acc, _ = _acc(buffer_memory=300, batch_size=100)
    assert acc.append("t", 0, None, b"", [], 0, 100, 1) is not None
    assert acc.append("t", 0, None, b"", [], 0, 100, 1) is not None
    assert acc.append("t", 0, None, b"", [], 0, 100, 1) is not None
    assert acc.append("t", 0, None, b"", [], 0, 100, 1) is None
    assert not acc.wait_for_memory_sync(100, 0.01)
    batches = acc.drain(time.monotonic())
    t = threading.Timer(0.05, acc.release, args=(batches[0],))
    t.start()
    assert acc.wait_for_memory_sync(100, 5)
    t.join()
    assert acc.append("t", 0, None, b"", [], 0, 100, 1) is not None


def test_record_size_counts_key_value_headers() -> None:
    assert record_size(None, None, None) == 12
    assert record_size(b"ab", b"cde", [("h", b"xy")]) == 12 + 2 + 3 + 1 + 2 + 4


# ---------------------------------------------------------------- sequences


def _batch(acc: RecordAccumulator, n: int, p: int = 0):  # type: ignore[no-untyped-def]
    for _ in range(n):
        acc.append("t", p, None, b"v", [], 0, 1, 1)
    (b,) = acc.drain(time.monotonic(), force=True)
    return b


def test_sequences_assigned_per_batch_and_kept_on_retry() -> None:
    acc, _ = _acc()
    st = PartitionState()
    b1, b2, b3 = _batch(acc, 3), _batch(acc, 5), _batch(acc, 2)
    st.pending.extend([b1, b2, b3])
    sent = []
    while (b := st.next_to_send(0, 5)) is not None:
        st.assign_sequence(b)
        st.sent(b)
        sent.append(b)
    assert [b.base_sequence for b in sent] == [0, 3, 8]
    assert st.next_seq == 10
    # b1 fails (retriable); b2 then gets OUT_OF_ORDER: it has an earlier batch outstanding
    st.requeue(b1, retry_at=1.0)
    assert st.has_earlier(b2)
    st.requeue(b2, retry_at=1.0)
    st.done(b3)  # say b3 also failed and is requeued later
    st.requeue(b3, retry_at=1.0)
    assert st.next_to_send(0.5, 5) is None  # backoff
    order = []
    while (b := st.next_to_send(2.0, 5)) is not None:
        st.assign_sequence(b)  # no-op: keeps its sequence
        st.sent(b)
        assert st.next_to_send(2.0, 5) is None  # one at a time while retrying
        st.done(b)
        order.append(b.base_sequence)
    assert order == [0, 3, 8]
    assert not st.has_earlier(b1)


def test_in_flight_limit_per_partition() -> None:
    acc, _ = _acc()
    st = PartitionState()
    st.pending.extend(_batch(acc, 1) for _ in range(7))
    n = 0
    while (b := st.next_to_send(0, 5)) is not None:
        st.sent(b)
        n += 1
    assert n == 5


# ---------------------------------------------------------------- futures


def test_record_future_is_a_concurrent_future_and_resolves_from_batch() -> None:
    res = BatchResult("t", 2, loop_thread=-1)
    f0 = FutureRecordMetadata(res, 0, 111)
    f1 = FutureRecordMetadata(res, 1, 222)
    assert isinstance(f0, cf.Future)
    assert not f0.done()
    called = []
    f1.add_done_callback(lambda f: called.append(f.result()))
    threading.Timer(0.02, res.complete, args=(40,)).start()
    assert f0.result(timeout=5) == RecordMetadata("t", 2, 40, 111)
    done, _ = cf.wait([f1], timeout=5)
    assert f1 in done
    assert called == [RecordMetadata("t", 2, 41, 222)]
    with pytest.raises(cf.TimeoutError):
        FutureRecordMetadata(BatchResult("t", 0, -1), 0, 0).result(timeout=0.01)


def test_record_future_error() -> None:
    from rafka.client.errors import KafkaTimeoutError

    res = BatchResult("t", 0, loop_thread=-1)
    f = FutureRecordMetadata(res, 0, 1)
    res.complete(error=KafkaTimeoutError("late"))
    assert isinstance(f.exception(), KafkaTimeoutError)
    with pytest.raises(KafkaTimeoutError):
        f.result()
    assert list(cf.as_completed([f])) == [f]


def test_result_inside_loop_thread_raises_instead_of_deadlocking() -> None:
    res = BatchResult("t", 0, loop_thread=threading.get_ident())
    with pytest.raises(RuntimeError, match="await"):
        FutureRecordMetadata(res, 0, 1).result()


# ---------------------------------------------------------------- fetch decoding


def _fetch_raw(batches: list[tuple[int, list[tuple]]], **kw: object) -> bytes:
    out = b""
    for base, recs in batches:
        out += build_batch(recs, base_offset=base, **kw)  # type: ignore[arg-type]
    return out


def test_split_and_decode_with_position_inside_first_batch() -> None:
    recs = [(b"k%d" % i, b"v%d" % i, [("h", b"x")] if i % 2 else [], 1000 + i) for i in range(5)]
    raw0 = _fetch_raw([(10, recs), (15, recs)])
    raw1 = _fetch_raw([(0, recs[:2])], compression="lz4")
    body = {"topics": [{"name": "t", "partitions": [
        {"partition": 0, "error": 0, "high_watermark": 20, "records_len": len(raw0)},
        {"partition": 1, "error": 0, "high_watermark": 2, "records_len": len(raw1)}]}]}
    p0, p1 = split_fetch_response(body, raw0 + raw1)
    assert p0.tp == TopicPartition("t", 0) and p0.high_watermark == 20
    cf0 = CompletedFetch(p0.tp, p0.raw)
    assert cf0.end_offset == 20
    got, pos = cf0.take(12, 4)
    assert [r.offset for r in got] == [12, 13, 14, 15] and pos == 16
    assert got[0] == ConsumerRecord("t", 0, 12, 1002, 0, b"k2", b"v2", ())
    assert got[1].headers == (("h", b"x"),)
    got, pos = cf0.take(pos, 100)
    assert [r.offset for r in got] == [16, 17, 18, 19] and pos == 20
    assert cf0.exhausted
    cf1 = CompletedFetch(p1.tp, p1.raw)
    got, pos = cf1.take(0, 10)
    assert [r.value for r in got] == [b"v0", b"v1"] and pos == 2


def test_offset_gaps_and_partial_tail() -> None:
    # a compacted batch: base 100, last_offset_delta 9 but only 2 records (deltas 3 and 7)
    import msgpack
    from rafka.log.batch import build_raw_batch

    section = msgpack.packb([[3, 0, b"a", b"A", []], [7, 0, b"b", b"B", []]], use_bin_type=True)
    compacted = build_raw_batch(section, base_offset=100, last_offset_delta=9, record_count=2,
                                first_timestamp=5, max_timestamp=5, attributes=0)
    nxt = build_batch([(None, b"n", [], 6)], base_offset=110)
    raw = memoryview(compacted + nxt + nxt[:30])  # + a partial batch
    c = CompletedFetch(TopicPartition("t", 0), raw)
    assert c.end_offset == 111
    got, pos = c.take(100, 1)
    assert [r.offset for r in got] == [103] and pos == 104
    got, pos = c.take(pos, 1)
    assert [r.offset for r in got] == [107] and pos == 110  # gap stepped over
    got, pos = c.take(pos, 10)
    assert [r.offset for r in got] == [110] and pos == 111
    assert c.exhausted


def test_corrupt_batch_names_the_range() -> None:
    raw = bytearray(_fetch_raw([(50, [(None, b"v", [], 1)] * 3)]))
    raw[-1] ^= 0xFF
    c = CompletedFetch(TopicPartition("t", 3), memoryview(raw))
    with pytest.raises(CorruptRecordError) as ei:
        c.take(50, 10)
    assert ei.value.start_offset == 50 and ei.value.end_offset == 52
    assert "t-3" in str(ei.value) and "[50, 52]" in str(ei.value)


def test_log_append_time_batches_use_max_timestamp() -> None:
    raw = _fetch_raw([(0, [(None, b"v", [], 1), (None, b"w", [], 2)])], timestamp_type=1)
    got, _ = CompletedFetch(TopicPartition("t", 0), memoryview(raw)).take(0, 10)
    assert [(r.timestamp, r.timestamp_type) for r in got] == [(2, 1), (2, 1)]


# ---------------------------------------------------------------- metadata


def test_cluster_metadata_fold() -> None:
    m = ClusterMetadata()
    m.update({"cluster_id": "c", "controller_id": 1,
              "brokers": [{"node_id": 1, "host": "h", "port": 1}, {"node_id": 2, "host": "h", "port": 2}],
              "topics": [{"name": "a", "error": 0, "partitions": [
                  {"partition": 0, "leader": 1, "leader_epoch": 3, "replicas": [1, 2], "isr": [1, 2]},
                  {"partition": 1, "leader": -1, "leader_epoch": 3, "replicas": [2], "isr": [], "error": 5}]},
                  {"name": "b", "error": 3, "partitions": []}]}, all_topics=True)
    assert m.num_partitions("a") == 2 and m.num_partitions("b") is None
    assert m.leader(TopicPartition("a", 0)) == 1
    assert m.leader(TopicPartition("a", 1)) == -1
    assert m.topic_errors == {"b": 3}
    m.invalidate_leader(TopicPartition("a", 0))
    assert m.leader(TopicPartition("a", 0)) == -1


def test_cluster_metadata_never_rolls_a_leader_epoch_back() -> None:
    """A stale broker's answer (older leader epoch) keeps the newer entry — per partition, for
    partial and full refreshes; a re-created topic (new topic id) starts over; an unknown
    epoch (-1) is taken as is."""
    def body(leader: int, epoch: int, topic_id: str = "id-1") -> dict:
        return {"brokers": [{"node_id": n, "host": "h", "port": n} for n in (1, 2, 3)],
                "topics": [{"name": "a", "error": 0, "topic_id": topic_id, "partitions": [
                    {"partition": 0, "leader": leader, "leader_epoch": epoch, "replicas": [1, 2, 3],
                     "isr": [leader]},
                    {"partition": 1, "leader": 2, "leader_epoch": 4, "replicas": [1, 2, 3], "isr": [2]}]}]}
    tp, tp1 = TopicPartition("a", 0), TopicPartition("a", 1)
    m = ClusterMetadata()

    def epoch(t: TopicPartition) -> int:
        pm = m.partition(t)
        assert pm is not None
        return pm.leader_epoch
    m.update(body(3, 1), all_topics=False)
    for all_topics in (False, True):
        m.update(body(1, 0), all_topics=all_topics)  # node 1 still thinks it leads epoch 0
        assert (m.leader(tp), epoch(tp)) == (3, 1)
        assert epoch(tp1) == 4
    m.invalidate_leader(tp)
    m.update(body(1, 0), all_topics=False)
    assert m.leader(tp) == -1  # still waiting for a view at least as new as epoch 1
    m.update(body(2, 2), all_topics=False)
    assert (m.leader(tp), epoch(tp)) == (2, 2)
    m.update(body(2, -1), all_topics=False)
    assert epoch(tp) == -1
    m.update(body(2, 5), all_topics=False)
    m.update(body(1, 0, topic_id="id-2"), all_topics=False)  # deleted and re-created
    assert (m.leader(tp), epoch(tp)) == (1, 0)


# ---------------------------------------------------------------- connection framing


async def test_connection_writes_the_frames_encode_request_writes() -> None:
    """Connection packs requests itself (reused Packer, large ones written in two parts): the
    bytes on the wire are exactly ``encode_request``'s, for small and large bodies."""
    from rafka.wire.connection import Connection
    from rafka.wire.protocol import Request, encode_request

    class Capture:
        def __init__(self) -> None:
            self.data = bytearray()

        async def send_all(self, data: bytes | memoryview) -> None:
            self.data += data

    stream = Capture()
    conn = Connection(stream, client_id="cid-test")  # type: ignore[arg-type]
    bodies = [{"topics": []}, {"acks": 1, "records": b"r" * 300_000}, {"x": "y"}]
    expected = b""
    for i, body in enumerate(bodies):
        await conn.send_only(0, body)
        expected += encode_request(Request(0, i, body, 0, "cid-test"))
    assert bytes(stream.data) == expected


def test_request_any_tries_fenced_brokers_last() -> None:
    """Found with the compose cluster: METADATA lists fenced brokers too (marked), and
    ``candidates`` picked among all of them at random — a read-back right after a broker kill
    tried the dead one first in 1 of 3 runs and waited out the connection setup timeout."""
    core = ClientCore("10.0.0.1:9092,10.0.0.2:9092,10.0.0.9:9092", client_id="t")
    core.metadata.update({"brokers": [
        {"node_id": 1, "host": "10.0.0.1", "port": 9092, "fenced": False},
        {"node_id": 2, "host": "10.0.0.2", "port": 9092, "fenced": True},
        {"node_id": 3, "host": "10.0.0.3", "port": 9092},
    ], "topics": []}, all_topics=True)
    assert core.metadata.fenced == {2}
    for _ in range(20):  # the live ones are shuffled; the fenced one never comes before them
        got = core.candidates()
        assert sorted(got[:2]) == [("10.0.0.1", 9092), ("10.0.0.3", 9092)]
        assert got[2:] == [("10.0.0.9", 9092), ("10.0.0.2", 9092)]
