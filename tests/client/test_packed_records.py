"""A producer batch's ``send`` records packed as they come (``ProducerBatch.add``,
``_codec.pack_record``; ``client/_sendpath.c`` writes the same bytes) against the rows of the
pure-Python path: the same batch bytes, record counts, rows and max timestamp, through
headers, odd types that switch a batch to rows, ``send_batch`` segments after packed records,
lz4, re-encoding with a new sequence and splits. No broker: ``tests/client/test_fast_send.py``
compares the two ``send`` paths on a real one."""

from __future__ import annotations

import time
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rafka.client.aio import accumulator as accumulator_mod
from rafka.client.aio import batch_send
from rafka.client.aio.accumulator import ProducerBatch, RecordAccumulator, RowGroup
from rafka.log import batch as batch_mod
from rafka.log import speedups
from rafka.log.batch import build_batch_rows, parse_header

TS = 1_700_000_000_000
needs_c = pytest.mark.skipif(speedups.codec is None, reason="C codec not built or RAFKA_NO_SPEEDUPS set")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_blob = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=250, max_size=300),
                  st.integers(65_536, 66_000).map(lambda n: b"x" * n))
_headers = st.one_of(st.just(()), st.just([]),
                     st.lists(st.tuples(st.text(max_size=40), st.binary(max_size=300)), max_size=3))
# (timestamp delta, key, value, headers); now and then a record the packer leaves to rows
_record = st.tuples(st.integers(-2**40, 2**40), _blob, _blob, _headers)
_odd = st.tuples(st.integers(-5, 5), st.sampled_from(["a str key", b"k"]),
                 st.sampled_from([1.5, bytearray(b"ba"), b"v"]), st.just(()))


def _switch(c: Any) -> pytest.MonkeyPatch:
    mp = pytest.MonkeyPatch()
    for mod in (batch_mod, batch_send, accumulator_mod):
        mp.setattr(mod, "_c", c)
    return mp


def _norm(rows: list[Any]) -> list[tuple]:
    return [(i, dt, k, v, tuple(tuple(h) for h in hs)) for i, dt, k, v, hs in rows]


def _fill(records: list[tuple], seg_at: int | None) -> ProducerBatch:
    b = ProducerBatch("t", 0, time.monotonic(), -1, TS)
    for n, (dt, k, v, h) in enumerate(records):
        if n == seg_at:  # send_batch's records in between, as a segment (C) or rows (pure)
            i0 = b.record_count
            seg = (i0, 3, [b"s1", None], [b"v1", b"v2"], None, 0, 2)
            if accumulator_mod._c is not None:
                b.segs = [*(b.segs or []), seg]
            else:
                b.records.extend(batch_mod.segment_rows(*seg))
        assert b.add(dt, k, v, h) == b.record_count - 1
    return b


@needs_c
@SETTINGS
@given(records=st.lists(_record, max_size=30))
def test_pack_record_is_msgpack_byte_for_byte(records: list[tuple]) -> None:
    buf, used = bytearray(), 0
    packer = msgpack.Packer(use_bin_type=True)
    want = b""
    for i, (dt, k, v, h) in enumerate(records):
        used = speedups.codec.pack_record(buf, used, i, dt, k, v, h)
        want += packer.pack((i, dt, k, v, h))
    assert bytes(buf[:used]) == want
    assert len(buf) >= used  # room behind the records, never counted


@needs_c
def test_pack_record_defers_without_writing() -> None:
    for k, v, h in ((1.5, None, ()), (None, "str", ()), (None, None, [("a", "b")]),
                    (None, None, [(b"a", b"b")]), (None, None, None), (None, None, [("\ud800", b"")])):
        buf = bytearray(b"xy")
        with pytest.raises(speedups.Unsupported):
            speedups.codec.pack_record(buf, 1, 0, 0, k, v, h)
        assert buf == bytearray(b"xy")


@needs_c
@SETTINGS
@given(records=st.lists(st.one_of(_record, _record, _record, _odd), min_size=1, max_size=25),
       seg_at=st.one_of(st.none(), st.integers(0, 24)), compression=st.sampled_from(["none", "lz4"]),
       base_sequence=st.integers(-1, 2**31 - 1))
def test_packed_batch_is_the_rows_batch(records: list[tuple], seg_at: int | None,
                                        compression: str, base_sequence: int) -> None:
    records[0] = (0, *records[0][1:])  # a batch's first record is its first timestamp
    out = []
    for c in (speedups.codec, None):
        mp = _switch(c)
        try:
            b = _fill(records, seg_at)
            kw = {"compression": compression, "base_sequence": base_sequence}
            raw = b.encode(**kw)
            again = b.encode(**kw)  # a retry or a renumbered sequence builds it again
            count = b.record_count
            rows = _norm(b.records)  # packed records and segments become rows
            assert b.encode(**kw) == raw  # and rows build the same batch
            out.append((raw, again, count, rows))
        finally:
            mp.undo()
    assert out[0] == out[1]
    raw, _, count, rows = out[0]
    h = parse_header(raw)
    assert h.record_count == count == len(rows)
    assert h.max_timestamp == TS + max(r[1] for r in rows)
    assert raw == build_batch_rows(rows, TS, compression=compression, base_sequence=base_sequence)


@needs_c
def test_records_packed_while_send_runs_in_c() -> None:
    """The accumulator's own appends pack; a split cuts a packed batch into row batches that
    carry the same records."""
    acc = RecordAccumulator(batch_size=1 << 20, buffer_memory=1 << 24, linger_ms=5,
                            wakeup=lambda: None, loop_thread=-1)
    for i in range(10):
        assert acc.append("t", 0, b"k%d" % i, b"v" * i, [("h", b"%d" % i)] if i % 3 else (),
                          TS + i, 20 + i, 1) is not None
    (b,) = acc.drain(time.monotonic(), force=True)
    assert b.npacked == 10 and b.packed is not None and not b._rows
    whole = _norm(b.records)
    parts = acc.split(b, [0, 4, 7])
    assert [r for p in parts for r in _norm([(0, p.ts0 - TS + r[1], *r[2:]) for r in p.records])] == [
        (0, *r[1:]) for r in whole]
    assert [p.record_count for p in parts] == [4, 3, 3]
    for p in parts:
        assert parse_header(p.encode()).record_count == p.record_count


@needs_c
def test_send_batch_segments_follow_packed_records() -> None:
    acc = RecordAccumulator(batch_size=1 << 20, buffer_memory=1 << 24, linger_ms=5,
                            wakeup=lambda: None, loop_thread=-1)
    acc.append("t", 0, b"first", b"x", (), TS, 20, 1)
    g = RowGroup(0, [b"a", b"b"], [b"1", b"2"], None, [0, 14, 28])
    assert acc.append_many("t", [g], TS + 1, 1, 1 << 20)
    acc.append("t", 0, b"last", b"y", (), TS + 2, 20, 1)  # after segments: the batch turns to rows
    (b,) = acc.drain(time.monotonic(), force=True)
    assert _norm(b.records) == [(0, 0, b"first", b"x", ()), (1, 1, b"a", b"1", ()),
                                (2, 1, b"b", b"2", ()), (3, 2, b"last", b"y", ())]


@needs_c
def test_pack_batch_copies_a_packed_prefix_from_any_address() -> None:
    """pack_batch moves its output when the prefix sits a few bytes behind its scratch buffer
    modulo 4 KiB (a slow memcpy there): the bytes are the same wherever the prefix starts."""
    packer = msgpack.Packer(use_bin_type=True)
    records = [(i, i % 3, b"k%d" % i, b"v" * 300, ()) for i in range(900)]  # ~280 KiB
    packed = b"".join(packer.pack(r) for r in records)
    want = packer.pack(records)
    big = bytearray(8192) + packed
    for shift in range(0, 4096, 61):
        view = memoryview(big)[8192 - shift:8192 - shift + len(packed)]
        big[8192 - shift:8192 - shift + len(packed)] = packed
        assert speedups.codec.pack_batch([], [], view, len(records)) == want
        view.release()
        big[8192 - shift:8192 - shift + len(packed)] = bytes(len(packed))
