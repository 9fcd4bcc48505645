"""Record batch codec: layout, round trips, CRC, stamping."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rafka.log.batch import (
    HEADER_SIZE,
    CorruptBatchError,
    build_batch,
    build_batch_rows,
    crc_ok,
    decode_records,
    iter_batches,
    parse_header,
    stamp,
    stamp_log_append_time,
)

from .conftest import T0

_bytes_or_none = st.one_of(st.none(), st.binary(max_size=64))
_headers = st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=16)), max_size=3)
_record = st.tuples(_bytes_or_none, _bytes_or_none, _headers,
                    st.integers(min_value=0, max_value=2**41))


@settings(max_examples=150, deadline=None)
@given(records=st.lists(_record, min_size=1, max_size=20),
       compression=st.sampled_from(["none", "lz4"]),
       base_offset=st.integers(0, 2**40), producer_id=st.integers(-1, 2**40))
def test_round_trip(records, compression, base_offset, producer_id):
    buf = build_batch(records, compression=compression, base_offset=base_offset,
                      producer_id=producer_id, producer_epoch=3, base_sequence=7,
                      leader_epoch=5)
    h = parse_header(buf)
    assert h.size == len(buf) and h.batch_length == len(buf) - 12
    assert h.record_count == len(records) and h.last_offset == base_offset + len(records) - 1
    assert h.compression == compression and h.magic == 2
    assert h.first_timestamp == records[0][3]
    assert h.max_timestamp == max(r[3] for r in records)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (producer_id, 3, 7)
    assert h.partition_leader_epoch == 5
    assert crc_ok(buf)
    decoded = decode_records(buf)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (base_offset + i, ts, k, v, [tuple(x) for x in hs])
        for i, (k, v, hs, ts) in enumerate(records)]


def test_layout_matches_internals_doc():
    buf = build_batch([(b"k", b"v", [("h", b"x")], T0)], producer_id=9, producer_epoch=2,
                      base_sequence=4, base_offset=77, leader_epoch=3)
    (base, length, epoch, magic, crc) = struct.unpack_from(">qiibI", buf, 0)
    assert (base, length, epoch, magic) == (77, len(buf) - 12, 3, 2)
    assert struct.unpack_from(">hiqqqhii", buf, 21) == (0, 0, T0, T0, 9, 2, 4, 1)
    assert HEADER_SIZE == 61


def test_unicode_headers_and_lz4():
    recs = [(None, "ünïcødé ✓".encode(), [("ключ", b"\x00\xff"), ("🙂", b"")], T0)] * 50
    buf = build_batch(recs, compression="lz4")
    assert parse_header(buf).compression == "lz4"
    out = decode_records(buf)
    assert out[0].headers == [("ключ", b"\x00\xff"), ("🙂", b"")] and out[49].key is None


def test_corrupt_crc_is_detected():
    buf = bytearray(build_batch([(b"k", b"value", [], T0)] * 3))
    assert crc_ok(buf)
    buf[-1] ^= 0x01
    assert not crc_ok(buf)
    with pytest.raises(CorruptBatchError):
        decode_records(buf)


def test_stamp_leaves_crc_valid():
    buf = bytearray(build_batch([(b"k", b"v", [], T0)]))
    stamp(buf, 0, 12345, 7)
    h = parse_header(buf)
    assert (h.base_offset, h.partition_leader_epoch) == (12345, 7) and crc_ok(buf)
    assert decode_records(buf)[0].offset == 12345


def test_log_append_time_stamp_recomputes_crc():
    buf = bytearray(build_batch([(b"k", b"v", [], T0), (b"k", b"w", [], T0 + 5)]))
    stamp_log_append_time(buf, 0, T0 + 999)
    h = parse_header(buf)
    assert h.timestamp_type == 1 and h.max_timestamp == T0 + 999 and crc_ok(buf)
    assert [r.timestamp for r in decode_records(buf)] == [T0 + 999] * 2


def test_bad_headers_raise():
    good = build_batch([(b"k", b"v", [], T0)])
    with pytest.raises(CorruptBatchError):
        parse_header(good[:40])
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    with pytest.raises(CorruptBatchError, match="magic"):
        parse_header(bad_magic)
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError):
        build_batch([(b"k", b"v", [], T0)], compression="zstd")


def test_iter_batches_stops_at_partial():
    a = build_batch([(b"a", b"1", [], T0)], base_offset=0)
    b = build_batch([(b"b", b"2", [], T0)] * 2, base_offset=1)
    buf = a + b + b[:30]
    got = [(pos, h.base_offset) for pos, h in iter_batches(buf)]
    assert got == [(0, 0), (len(a), 1)]
    assert list(iter_batches(a + b[:-1])) == [(0, parse_header(a))]


def test_build_batch_rows_is_build_batch_of_the_same_records():
    recs = [(b"k%d" % i, b"v" * i, [("h", b"x")] if i % 3 == 0 else [], T0 + (7 * i) % 5)
            for i in range(50)]
    rows = [(i, r[3] - T0, r[0], r[1], r[2]) for i, r in enumerate(recs)]
    for compression in ("none", "lz4"):
        assert build_batch_rows(rows, T0, compression=compression, producer_id=3,
                                producer_epoch=1, base_sequence=9) == build_batch(
            recs, compression=compression, producer_id=3, producer_epoch=1, base_sequence=9)
    h = parse_header(build_batch_rows(rows, T0))
    assert (h.first_timestamp, h.max_timestamp, h.record_count) == (T0, T0 + 4, 50)
    with pytest.raises(ValueError):
        build_batch_rows([], T0)
