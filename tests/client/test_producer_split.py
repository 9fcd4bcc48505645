"""The producer splits a batch refused with MESSAGE_TOO_LARGE (as Kafka's RecordBatchTooLarge).

Pure parts (split points, the accumulator's split, sequence hand-over, futures following their
records) and the real thing against a broker (tests/client/conftest.py) with topics whose
``max.message.bytes`` is smaller than the producer's ``batch_size``.
"""

from __future__ import annotations

import time

import pytest
import trio
from rafka.client import AsyncAdmin, AsyncProducer, Consumer, Producer, TopicPartition, errors
from rafka.client.aio.accumulator import PartitionState, RecordAccumulator
from rafka.client.aio.futures import FutureRecordMetadata
from rafka.client.aio.sender import _split_points
from rafka.client.types import RecordMetadata
from rafka.wire.errors import ErrorCode


def _acc() -> RecordAccumulator:
    return RecordAccumulator(batch_size=1 << 20, buffer_memory=1 << 24, linger_ms=5,
                             wakeup=lambda: None, loop_thread=-1)


def _batch_with(acc: RecordAccumulator, values: list[bytes], ts0: int = 1000):
    futs = [acc.append("t", 0, None, v, [], ts0 + 3 * i, 12 + len(v), 1)
            for i, v in enumerate(values)]
    (b,) = acc.drain(time.monotonic(), force=True)
    return b, futs


# ---------------------------------------------------------------- pure


def test_split_points_by_the_brokers_limit_and_by_halves() -> None:
    acc = _acc()
    b, _ = _batch_with(acc, [b"x" * 88] * 100)  # 100 records of 100 estimated bytes
    # the broker names its limit and the batch's wire size: parts of at most ~limit
    starts = _split_points(b, "t-0: record batch of 10061 bytes exceeds max.message.bytes=2000")
    assert starts[0] == 0 and starts == sorted(set(starts)) and len(starts) > 5
    sizes = [e - s for s, e in zip(starts, [*starts[1:], 100], strict=True)]
    assert max(sizes) * 100 <= 2000 and min(sizes) > 0
    # unknown limit: two halves by size
    assert _split_points(b, "something else") == [0, 50]
    big_first, _ = _batch_with(acc, [b"y" * 1000, b"a", b"b", b"c"])
    assert _split_points(big_first, "") == [0, 1]
    two, _ = _batch_with(acc, [b"a", b"b"])
    assert _split_points(two, "") == [0, 1]


def test_split_keeps_order_sequences_memory_and_futures() -> None:
    acc = _acc()
    values = [b"%03d" % i for i in range(10)]
    b, futs = _batch_with(acc, values)
    used = acc.used
    st = PartitionState()
    st.pending.append(b)
    st.assign_sequence(st.next_to_send(0, 5))  # seq 0..9
    later, _ = _batch_with(acc, [b"L1", b"L2"])
    st.pending.append(later)
    st.assign_sequence(st.next_to_send(0, 5))  # seq 10..11
    st.sent(b)
    st.sent(later)
    b.attempts = later.attempts = 1
    st.done(b)
    parts = acc.split(b, [0, 4, 7])
    assert acc.used == used + later.size and sum(p.size for p in parts) == used
    assert [p.base_sequence for p in parts] == [0, 4, 7]
    assert [[r[3] for r in p.records] for p in parts] == [values[:4], values[4:7], values[7:]]
    assert all([r[0] for r in p.records] == list(range(len(p.records))) for p in parts)
    assert [p.ts0 for p in parts] == [1000, 1012, 1021]
    assert all(p.attempts == 1 and p.created == b.created for p in parts)
    assert b.result not in acc.incomplete and all(p.result in acc.incomplete for p in parts)
    st.requeue_split(parts, 0.0)
    st.requeue(later, 0.0)  # came back OUT_OF_ORDER: it goes after the parts
    assert st.has_earlier(later)
    order = []
    while (nb := st.next_to_send(1.0, 5)) is not None:
        st.sent(nb)
        st.done(nb)
        order.append(nb)
    assert order == [*parts, later]
    # the futures follow their records; the original completes when every part has
    parts[2].result.complete(base_offset=200)
    parts[0].result.complete(base_offset=100)
    assert not futs[0].done()
    parts[1].result.complete(error=errors.RecordTooLargeError("too big"))
    assert all(f.done() for f in futs)
    assert [futs[i].result().offset for i in (0, 3, 7, 9)] == [100, 103, 200, 202]
    for i in (4, 5, 6):
        with pytest.raises(errors.RecordTooLargeError):
            futs[i].result()
    assert futs[8].result() == RecordMetadata("t", 0, 201, 1000 + 3 * 8)


def test_futures_of_a_part_split_again() -> None:
    acc = _acc()
    b, futs = _batch_with(acc, [b"%d" % i for i in range(8)])
    f_materialized = futs[5]
    got: list[int] = []
    f_materialized.add_done_callback(lambda f: got.append(f.result().offset))
    p1, p2 = acc.split(b, [0, 4])
    p2a, p2b = acc.split(p2, [0, 2])
    for r, base in ((p1.result, 0), (p2a.result, 50), (p2b.result, 70)):
        r.complete(base_offset=base)
    assert [f.result().offset for f in futs] == [0, 1, 2, 3, 50, 51, 70, 71]
    assert got == [51]
    assert isinstance(futs[0], FutureRecordMetadata)


def test_release_sequences_moves_later_batches_down() -> None:
    acc = _acc()
    st = PartitionState()
    bs = [_batch_with(acc, [b"v"] * n)[0] for n in (3, 1, 4)]
    st.pending.extend(bs)
    for _ in bs:
        nb = st.next_to_send(0, 5)
        st.assign_sequence(nb)
        nb.payload = b"built"
        st.sent(nb)
    assert [b.base_sequence for b in bs] == [0, 3, 4] and st.next_seq == 8
    st.done(bs[1])  # the one-record batch is refused for good, nothing appended
    st.release_sequences(bs[1])
    assert [b.base_sequence for b in bs] == [0, 3, 3] and st.next_seq == 7
    assert bs[0].payload == b"built" and bs[2].payload is None  # rebuilt with its new sequence


# ---------------------------------------------------------------- real broker


def _offsets(bootstrap: str, topic: str, n: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 60
        while len(out) < n and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                out += [(r.offset, r.value) for r in recs]
    return out


def test_batches_over_max_message_bytes_are_split_in_order(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1, {"max.message.bytes": "2000"})
    values = [b"%04d:" % i + b"." * 40 for i in range(1000)]
    with Producer(bootstrap, batch_size=16 * 1024, linger_ms=50) as p:
        futs = [p.send(topic, value=v, partition=0) for v in values]
        metas = [f.result(60) for f in futs]
        assert p.statistics()["batches_split"] > 0
    assert [m.offset for m in metas] == list(range(1000))
    assert _offsets(bootstrap, topic, 1000) == list(enumerate(values))


def test_split_without_idempotence_and_with_lz4(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1, {"max.message.bytes": "3000"})
    values = [b"%04d-" % i + bytes(range(256))[:100] for i in range(600)]
    with Producer(bootstrap, batch_size=64 * 1024, linger_ms=50, acks=1,
                  compression_type="lz4", max_in_flight_requests_per_connection=1) as p:
        metas = [f.result(60) for f in [p.send(topic, value=v, partition=0) for v in values]]
        assert p.statistics()["batches_split"] > 0
    assert [m.offset for m in metas] == list(range(600))
    assert [v for _o, v in _offsets(bootstrap, topic, 600)] == values


def test_single_record_over_the_limit_fails_and_later_records_go_through(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1, {"max.message.bytes": "2000"})
    with Producer(bootstrap, batch_size=16 * 1024, linger_ms=20) as p:
        # alone in its batch
        with pytest.raises(errors.MessageTooLargeError) as ei:
            p.send(topic, value=b"x" * 5000, partition=0).result(30)
        assert ei.value.code == ErrorCode.MESSAGE_TOO_LARGE and "max.message.bytes" in str(ei.value)
        assert p.send(topic, value=b"after", partition=0).result(30).offset == 0
        # in the middle of a stream, sent without waiting: same batch or pipelined ones
        futs = [p.send(topic, value=b"%d" % i, partition=0) for i in range(300)]
        big = p.send(topic, value=b"y" * 5000, partition=0)
        futs += [p.send(topic, value=b"%d" % i, partition=0) for i in range(300, 600)]
        with pytest.raises(errors.MessageTooLargeError):
            big.result(60)
        assert [f.result(60).offset for f in futs] == list(range(1, 601))
        assert p.statistics()["buffer_used_bytes"] == 0
    got = _offsets(bootstrap, topic, 601)
    assert got == [(0, b"after")] + [(i + 1, b"%d" % i) for i in range(600)]


async def test_async_producer_splits_pipelined_batches(bootstrap: str, topic_name: str) -> None:
    topic = topic_name
    async with AsyncAdmin(bootstrap) as admin:
        await admin.create_topic(topic, 1, 1, {"max.message.bytes": "1500"})
    async with AsyncProducer(bootstrap, batch_size=4096, linger_ms=0) as p:
        futs = [await p.send(topic, value=b"%05d" % i + b"-" * 60, partition=0)
                for i in range(1000)]
        with trio.fail_after(60):
            metas = [await f for f in futs]
        assert p.statistics()["incomplete_batches"] == 0
        assert p.statistics()["batches_split"] > 0
        assert p.statistics()["buffer_used_bytes"] == 0
    assert [m.offset for m in metas] == list(range(1000))

