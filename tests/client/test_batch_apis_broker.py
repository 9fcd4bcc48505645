"""``send_batch`` and ``poll_batch`` against a real broker (tests/client/conftest.py).

What a consumer reads back is what ``send_batch``'s metadata said (partition, offset, order,
key, value, headers), compressed and not, several batches per partition; a record too large for
the topic fails alone (``BatchSendError``) while the rest are written; ``send_batch`` joins a
transaction; ``poll_batch`` returns exactly what ``poll`` returns, also read_committed with an
aborted transaction in the middle, and honours seek and pause.
"""

from __future__ import annotations

import uuid

import pytest
import trio
from rafka.client import AsyncProducer, Consumer, Producer
from rafka.client.aio.batch_send import BatchSendError
from rafka.client.errors import IllegalTxnStateError, MessageTooLargeError, RafkaError
from rafka.client.partitioner import Murmur2Partitioner
from rafka.client.types import ConsumerRecord, TopicPartition

pytestmark = pytest.mark.timeout(300)


def _read(bootstrap: str, topic: str, parts: int, total: int, *, columnar: bool,
          level: str = "read_uncommitted", step: int | None = None) -> dict[int, list[ConsumerRecord]]:
    out: dict[int, list[ConsumerRecord]] = {p: [] for p in range(parts)}
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level=level) as c:
        c.assign([TopicPartition(topic, p) for p in range(parts)])
        empty = 0
        while sum(map(len, out.values())) < total or empty < 2:
            got = c.poll_batch(500, step) if columnar else c.poll(500, step)
            empty = 0 if got else empty + 1
            if empty > 20:
                break
            for tp, recs in got.items():
                out[tp.partition] += recs.records() if columnar else recs
    return out


@pytest.mark.parametrize("compression", [None, "lz4"])
def test_send_batch_lands_where_its_metadata_says(bootstrap: str, make_topic, compression) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(3)
    n = 3000
    keys = [b"key-%d" % (i % 17) if i % 4 else None for i in range(n)]
    values = [None if i % 11 == 10 else b"value-%05d" % i + b"." * (i % 200) for i in range(n)]
    headers = [[("i", b"%d" % i)] if i % 6 == 0 else None for i in range(n)]
    with Producer(bootstrap, compression_type=compression, batch_size=16 * 1024) as p:
        metas = p.send_batch(topic, values, keys=keys, headers=headers).result(60)
        explicit = p.send_batch(topic, [b"e%d" % i for i in range(50)], partition=1).result(60)
    assert len(metas) == n
    part = Murmur2Partitioner()
    for k, m in zip(keys, metas, strict=True):
        if k is not None:
            assert m.partition == part(k, 3)  # as send() would place it
    assert {m.partition for m in explicit} == {1}
    assert [m.offset for m in explicit] == list(range(explicit[0].offset, explicit[0].offset + 50))
    got = _read(bootstrap, topic, 3, n + 50, columnar=False)
    by_pos = {(r.partition, r.offset): r for recs in got.values() for r in recs}
    assert len(by_pos) == n + 50
    for i, m in enumerate(metas):
        r = by_pos[(m.partition, m.offset)]
        assert (r.key, r.value, r.headers) == (keys[i], values[i], tuple(headers[i] or ()))
        assert r.timestamp == m.timestamp
    for p in range(3):  # input order is log order within a partition
        mine = [m.offset for m in metas if m.partition == p]
        assert mine == sorted(mine)
    assert [by_pos[(1, m.offset)].value for m in explicit] == [b"e%d" % i for i in range(50)]


def test_a_record_too_large_fails_alone(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(2, {"max.message.bytes": "3000"})
    values = [b"v%03d" % i for i in range(40)]
    values[17] = b"x" * 5000
    keys = [b"k%d" % (i % 4) for i in range(40)]
    with Producer(bootstrap, batch_size=64 * 1024) as p:
        fut = p.send_batch(topic, values, keys=keys)
        with pytest.raises(BatchSendError) as ei:
            fut.result(60)
    err = ei.value
    assert list(err.errors) == [17] and isinstance(err.errors[17], MessageTooLargeError)
    assert isinstance(err, RafkaError) and err.code == MessageTooLargeError.code
    got = _read(bootstrap, topic, 2, 39, columnar=False)
    by_pos = {(r.partition, r.offset): r.value for recs in got.values() for r in recs}
    written = [r for i, r in enumerate(err.results) if i != 17]
    assert sorted(by_pos) == sorted((m.partition, m.offset) for m in written)
    assert all(by_pos[(m.partition, m.offset)] == values[i]
               for i, m in enumerate(err.results) if i != 17)


def test_async_send_batch_waits_for_buffer_room(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1)
    values = [b"%06d" % i + b"." * 200 for i in range(2000)]  # ~440 KB through a 64 KiB buffer

    async def main() -> list:
        async with AsyncProducer(bootstrap, buffer_memory=64 * 1024, batch_size=16 * 1024,
                                 linger_ms=1) as p:
            fut = await p.send_batch(topic, values)
            return await fut

    metas = trio.run(main)
    assert [m.offset for m in metas] == list(range(2000))
    got = _read(bootstrap, topic, 1, 2000, columnar=True)
    assert [r.value for r in got[0]] == values


def test_send_batch_joins_the_transaction(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(2)
    with Producer(bootstrap, transactional_id=f"sb-{uuid.uuid4().hex[:8]}", linger_ms=1) as p:
        p.init_transactions()
        with pytest.raises(IllegalTxnStateError):
            p.send_batch(topic, [b"outside"])
        with p.transaction():
            p.send_batch(topic, [b"c%d" % i for i in range(30)], keys=[b"%d" % i for i in range(30)])
        p.begin_transaction()
        p.send_batch(topic, [b"a%d" % i for i in range(30)], keys=[b"%d" % i for i in range(30)]).result(60)
        p.abort_transaction()
        with p.transaction():
            p.send_batch(topic, [b"d%d" % i for i in range(10)])
    committed = _read(bootstrap, topic, 2, 40, columnar=True, level="read_committed")
    values = sorted(r.value for recs in committed.values() for r in recs)
    assert values == sorted([b"c%d" % i for i in range(30)] + [b"d%d" % i for i in range(10)])
    # the same data, read_committed, record by record: identical (aborted middle, markers)
    assert _read(bootstrap, topic, 2, 40, columnar=False, level="read_committed", step=7) == \
        _read(bootstrap, topic, 2, 40, columnar=True, level="read_committed", step=7)
    everything = _read(bootstrap, topic, 2, 70, columnar=True)
    assert sum(map(len, everything.values())) == 70


@pytest.mark.parametrize("compression", [None, "lz4"])
def test_poll_batch_equals_poll_and_honours_seek_and_pause(bootstrap: str, make_topic, compression) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(3)
    n = 4000
    with Producer(bootstrap, compression_type=compression, batch_size=8 * 1024) as p:
        for i in range(n):
            p.send(topic, None if i % 9 == 8 else b"v%d" % i, key=b"k%d" % (i % 13) if i % 2 else None,
                   headers=[("n", b"%d" % i)] if i % 5 == 0 else None)
        p.flush()
    by_poll = _read(bootstrap, topic, 3, n, columnar=False)
    for step in (None, 333):
        assert _read(bootstrap, topic, 3, n, columnar=True, step=step) == by_poll
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    mid = len(by_poll[0]) // 2
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp0, tp1])
        c.pause(tp1)
        c.seek(tp0, mid)
        got: list[ConsumerRecord] = []
        while len(got) < len(by_poll[0]) - mid:
            batch = c.poll_batch(500)
            assert tp1 not in batch
            got += batch[tp0].records() if tp0 in batch else []
        assert got == by_poll[0][mid:] and c.position(tp0) == len(by_poll[0])
        c.resume(tp1)
        cols = c.poll_batch(2000, max_records=5)
        assert list(cols) == [tp1] and cols[tp1].records() == by_poll[1][:5]
        assert c.position(tp1) == 5
