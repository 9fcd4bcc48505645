"""The whole-batch producer API and the columnar read, without sockets (issue 13).

* ``RecordAccumulator.append_many`` builds exactly the batches ``append`` builds record by
  record (same boundaries, rows, sizes), stops at a full buffer and goes on after a release,
  closes before ``max_request_size``, and fills the sticky partition;
* ``BatchFuture`` resolves with per-record metadata in input order, and fails with
  ``BatchSendError`` carrying successes and failures when some batch failed;
* ``CompletedFetch.take_columns`` hands out exactly what ``take`` does — offsets, timestamps,
  keys, values, headers, positions — on logs with gaps, LogAppendTime, lz4, control batches and
  an aborted transaction under read_committed, in any step size; ``to_arrow`` keeps the values.
"""

from __future__ import annotations

import time

import msgpack
import pytest
from rafka.client.aio.accumulator import RecordAccumulator, RowGroup
from rafka.client.aio.batch_send import BatchSendError, plan_batch
from rafka.client.aio.enqueue import Enqueue
from rafka.client.aio.fetch import CompletedFetch
from rafka.client.aio.producer import AsyncProducer
from rafka.client.columnar import ColumnBatch
from rafka.client.errors import RecordTooLargeError, UnknownTopicOrPartitionError
from rafka.client.partitioner import Murmur2Partitioner
from rafka.client.types import RecordMetadata, TopicPartition
from rafka.log.batch import build_batch_rows, build_control_batch, build_raw_batch, stamp

TS = 1_700_000_000_000


def _acc(batch_size: int = 1000, buffer_memory: int = 1 << 24) -> RecordAccumulator:
    return RecordAccumulator(batch_size=batch_size, buffer_memory=buffer_memory, linger_ms=5,
                             wakeup=lambda: None, loop_thread=-1)


def _cum(sizes: list[int]) -> list[int]:
    out = [0]
    for s in sizes:
        out.append(out[-1] + s)
    return out


def _drained(acc: RecordAccumulator) -> list[tuple[int, list, int]]:
    return [(b.partition, b.records, b.size) for b in acc.drain(time.monotonic(), force=True)]


# ---------------------------------------------------------------- accumulator


def test_append_many_builds_the_batches_append_builds() -> None:
    values = [b"v" * (i % 50) for i in range(300)]
    keys = [b"k%d" % i if i % 3 else None for i in range(300)]
    hdrs = [[("h", b"%d" % i)] if i % 7 == 0 else () for i in range(300)]
    sizes = [12 + len(v) + (len(k) if k else 0) + sum(len(a) + len(b) + 4 for a, b in h)
             for v, k, h in zip(values, keys, hdrs, strict=True)]
    one = _acc()
    for k, v, h, sz in zip(keys, values, hdrs, sizes, strict=True):
        assert one.append("t", 2, k, v, list(h) if h else (), TS, sz, 4) is not None
    many = _acc()
    g = RowGroup(2, keys, values, [list(h) if h else () for h in hdrs], _cum(sizes))
    assert many.append_many("t", [g], TS, 4, max_batch_bytes=1 << 20)
    assert g.done == 300 and many.used == one.used == sum(sizes)
    expected = _drained(one)
    assert len(expected) > 5  # several batches: boundaries matter
    assert _drained(many) == expected
    # every record is in exactly one segment, in order
    assert sum(n for *_, n in g.segments) == 300
    assert [a for _, _, a, _ in g.segments] == sorted(a for _, _, a, _ in g.segments)


def test_append_many_stops_at_a_full_buffer_and_goes_on_after_release() -> None:
    acc = _acc(batch_size=500, buffer_memory=1000)
    g = RowGroup(0, None, [b"x" * 88] * 25, None, _cum([100] * 25))  # 2500 bytes
    assert not acc.append_many("t", [g], TS, 1, 1 << 20)
    assert g.done == 10 and acc.used == 1000
    for b in acc.drain(time.monotonic(), force=True):
        acc.release(b)
    assert not acc.append_many("t", [g], TS, 1, 1 << 20)
    assert g.done == 20
    for b in acc.drain(time.monotonic(), force=True):
        acc.release(b)
    assert acc.append_many("t", [g], TS, 1, 1 << 20) and g.done == 25


def test_append_many_closes_before_max_batch_bytes_and_fills_the_sticky_partition() -> None:
    acc = _acc(batch_size=10_000)
    g = RowGroup(1, None, [b"x" * 288] * 10, None, _cum([300] * 10))
    assert acc.append_many("t", [g], TS, 3, max_batch_bytes=1000)
    assert [len(r) for _, r, _ in _drained(acc)] == [3, 3, 3, 1]
    sticky = _acc(batch_size=1000)
    g = RowGroup(-1, None, [b"x" * 88] * 35, None, _cum([100] * 35))
    assert sticky.append_many("t", [g], TS, 8, 1 << 20)
    batches = _drained(sticky)
    assert [len(r) for _, r, _ in batches] == [10, 10, 10, 5]  # a new partition per closed batch
    assert all(0 <= p < 8 for p, _, _ in batches)


# ---------------------------------------------------------------- BatchFuture


def _producer(**kw: object) -> Enqueue:
    p = AsyncProducer("127.0.0.1:1", **kw)  # never started: only its enqueue path's planning is used
    p._enqueue.loop_thread = -1
    return p._enqueue


def test_batch_future_orders_results_and_reports_partial_failure() -> None:
    producer = _producer()
    keys = [b"key-%d" % (i % 5) for i in range(40)]
    values = [b"%d" % i for i in range(40)]
    fut, groups = plan_batch(producer, "t", values, keys, None, None, TS, 3)
    part = Murmur2Partitioner()
    acc = _acc()
    assert acc.append_many("t", groups, TS, 3, 1 << 20)
    fut._watch()
    batches = {b.partition: b for b in acc.drain(time.monotonic(), force=True)}
    assert set(batches) == {part(k, 3) for k in keys}
    failing = part(keys[0], 3)
    assert not fut.done()
    for p, b in batches.items():
        if p == failing:
            b.result.complete(error=UnknownTopicOrPartitionError(f"t-{p} is gone"))
        else:
            b.result.complete(base_offset=100 * p)
    assert fut.done()
    err = fut.exception(0)
    assert isinstance(err, BatchSendError) and len(err.results) == 40
    seen: dict[int, int] = {}
    for i, (k, r) in enumerate(zip(keys, err.results, strict=True)):
        p = part(k, 3)
        if p == failing:
            assert isinstance(r, UnknownTopicOrPartitionError) and i in err.errors
        else:
            assert r == RecordMetadata("t", p, 100 * p + seen.get(p, 0), TS)  # input order kept
            seen[p] = seen.get(p, 0) + 1
    assert err.code == UnknownTopicOrPartitionError.code
    with pytest.raises(BatchSendError):
        fut.result(0)


def test_batch_future_succeeds_with_every_offset_and_checks_its_input() -> None:
    producer = _producer()
    fut, groups = plan_batch(producer, "t", [b"a", None, b"c"], None, [None, [("h", b"1")], ()], 1, TS, 2)
    acc = _acc()
    assert acc.append_many("t", groups, TS, 2, 1 << 20)
    fut._watch()
    (b,) = acc.drain(time.monotonic(), force=True)
    assert [r[2:] for r in b.records] == [(None, b"a", ()), (None, None, [("h", b"1")]), (None, b"c", ())]
    b.result.complete(base_offset=7, log_append_time=TS + 5)
    assert fut.result(0) == [RecordMetadata("t", 1, o, TS + 5) for o in (7, 8, 9)]
    empty, _ = plan_batch(producer, "t", [], None, None, None, None, 2)
    empty._watch()
    assert empty.result(0) == []
    with pytest.raises(ValueError, match="2 keys for 3 values"):
        plan_batch(producer, "t", [b"a", b"b", b"c"], [b"k", b"l"], None, None, None, 2)
    with pytest.raises(UnknownTopicOrPartitionError):
        plan_batch(producer, "t", [b"a"], None, None, 5, None, 2)
    small = _producer(max_request_size=1000)
    with pytest.raises(RecordTooLargeError, match="record 1"):
        plan_batch(small, "t", [b"a", b"x" * 2000], None, None, None, None, 2)


# ---------------------------------------------------------------- columnar read


def _data(base: int, rows: list[tuple], *, compression: str = "none", ts_type: int = 0,
          pid: int = -1, txn: bool = False) -> bytes:
    b = bytearray(build_batch_rows(rows, TS, compression=compression, timestamp_type=ts_type,
                                   producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                   base_sequence=0 if pid >= 0 else -1, transactional=txn))
    stamp(b, 0, base, 0)
    return bytes(b)


def _marker(base: int, pid: int, commit: bool) -> bytes:
    b = bytearray(build_control_batch(pid, 0, commit, 1, TS))
    stamp(b, 0, base, 0)
    return bytes(b)


def _rows(n: int, tag: str, ts_step: int = 1) -> list[tuple]:
    return [(i, i * ts_step, (b"k%d" % i) if i % 2 else None,
             None if i % 5 == 4 else f"{tag}{i}".encode(), [("h", b"%d" % i)] if i % 3 == 0 else [])
            for i in range(n)]


def _log() -> tuple[bytes, list[tuple[int, int]]]:
    """plain | lz4 | LogAppendTime | txn 9 aborted | ABORT | txn 9 committed | COMMIT | compacted"""
    gap = build_raw_batch(msgpack.packb([[1, 0, b"a", b"A", []], [4, 2, None, b"B", [["x", b"y"]]]]),
                          base_offset=0, last_offset_delta=5, record_count=2, first_timestamp=TS,
                          max_timestamp=TS + 2, attributes=0)
    gap = bytearray(gap)
    stamp(gap, 0, 46, 0)
    raw = (_data(0, _rows(10, "a")) + _data(10, _rows(12, "b", 0), compression="lz4")
           + _data(22, _rows(5, "c"), ts_type=1) + _data(27, _rows(8, "x"), pid=9, txn=True)
           + _marker(35, 9, False) + _data(36, _rows(9, "d"), pid=9, txn=True)
           + _marker(45, 9, True) + bytes(gap))
    return raw, [(9, 27)]


def _equivalent(raw: bytes, aborted: list[tuple[int, int]] | None, start: int, step: int) -> list:
    tp = TopicPartition("t", 0)
    rec_cf = CompletedFetch(tp, memoryview(raw), 0, aborted)
    col_cf = CompletedFetch(tp, memoryview(raw), 0, aborted)
    by_rec: list = []
    by_col = ColumnBatch("t", 0)
    pr = pc = start
    while True:
        recs, pr = rec_cf.take(pr, step)
        cols, pc = col_cf.take_columns(pc, step)
        assert pr == pc and len(recs) == len(cols) <= step
        by_rec += recs
        by_col.extend(cols)
        if not recs:
            break
    assert rec_cf.exhausted and col_cf.exhausted and pr == 52
    assert by_col.records() == by_rec
    return by_rec


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
@pytest.mark.parametrize("start", [0, 12, 30])
def test_take_columns_equals_take(step: int, start: int) -> None:
    raw, aborted = _log()
    committed = _equivalent(raw, aborted, start, step)
    uncommitted = _equivalent(raw, None, start, step)
    assert [r.offset for r in committed] == [o for o in range(start, 52)
                                            if o < 27 or 36 <= o <= 44 or o in (47, 50)]
    assert len(uncommitted) == len(committed) + 35 - max(start, 27)  # + the aborted ones
    stamps = {r.offset: (r.timestamp, r.timestamp_type) for r in uncommitted}
    if start == 0:
        assert stamps[3] == (TS + 3, 0) and stamps[24] == (TS + 4, 1) and stamps[15] == (TS, 0)


def test_to_arrow_keeps_every_column() -> None:
    pa = pytest.importorskip("pyarrow")
    raw, aborted = _log()
    cols, _ = CompletedFetch(TopicPartition("t", 0), memoryview(raw), 0, aborted).take_columns(0, 100)
    rb = cols.to_arrow()
    assert isinstance(rb, pa.RecordBatch) and rb.num_rows == len(cols)
    assert rb.column("offset").to_pylist() == cols.offsets
    assert rb.column("key").to_pylist() == cols.keys and rb.column("value").to_pylist() == cols.values
    assert [int(t.timestamp() * 1000) for t in rb.column("timestamp").to_pylist()] == cols.timestamps
    assert rb.column("timestamp_type").to_pylist() == cols.timestamp_types
    assert [tuple((h["key"], h["value"]) for h in hs) for hs in rb.column("headers").to_pylist()] == cols.headers
    assert rb.schema.metadata[b"topic"] == b"t"
    plain, _ = CompletedFetch(TopicPartition("t", 1), memoryview(_data(0, [(0, 0, None, b"v", [])] * 1))
                              ).take_columns(0, 10)
    assert plain.to_arrow().column("headers").to_pylist() == [[]]
