"""Kafka v2 record batches (broker/kafka/records.py): round trips under every compression,
CRC and framing errors as named errors, and the conversion to rafka's native batches and
back keeping offsets, timestamps, keys, values, headers and the producer fields."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rafka.broker.kafka import records as kr
from rafka.log import batch as nb

keys = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))),
                   max_size=3)
rows = st.lists(st.tuples(keys, keys, headers, st.integers(-10**6, 10**6)), min_size=1,
                max_size=20).map(lambda rs: [kr.KafkaRow(i, td, k, v, h)
                                             for i, (k, v, h, td) in enumerate(rs)])
codecs = st.sampled_from([kr.COMPRESSION_NONE, kr.COMPRESSION_GZIP, kr.COMPRESSION_SNAPPY,
                          kr.COMPRESSION_LZ4, kr.COMPRESSION_ZSTD])
ids = st.fixed_dictionaries({
    "producer_id": st.integers(-1, 2**40), "producer_epoch": st.integers(-1, 2**15 - 1),
    "base_sequence": st.integers(-1, 2**31 - 1), "base_offset": st.integers(0, 2**40),
    "first_timestamp": st.integers(0, 2**42)})


@settings(max_examples=150, deadline=None)
@given(rows, codecs, ids, st.booleans())
def test_batch_round_trip(rs: list[kr.KafkaRow], codec: int, fields: dict, txn: bool) -> None:
    data = kr.encode_batch(rs, compression=codec, attributes=0x10 if txn else 0, **fields)
    h, back = kr.decode_batch(data)
    assert back == rs
    assert h.size == len(data) and h.record_count == len(rs)
    assert h.attributes & 7 == codec and bool(h.attributes & 0x10) == txn
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.base_offset,
            h.first_timestamp) == (fields["producer_id"], fields["producer_epoch"],
                                   fields["base_sequence"], fields["base_offset"],
                                   fields["first_timestamp"])
    assert h.max_timestamp == fields["first_timestamp"] + max(r.timestamp_delta for r in rs)


@settings(max_examples=150, deadline=None)
@given(rows, codecs, st.data())
def test_a_flipped_bit_is_a_crc_error(rs: list[kr.KafkaRow], codec: int, data: st.DataObject) -> None:
    buf = bytearray(kr.encode_batch(rs, compression=codec, first_timestamp=1000))
    i = data.draw(st.integers(21, len(buf) - 1))  # attributes .. end: the CRC's range
    buf[i] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(kr.KafkaCrcError):
        kr.decode_batch(bytes(buf))


def test_named_errors() -> None:
    good = kr.encode_batch([kr.KafkaRow(0, 0, b"k", b"v", [])], first_timestamp=1)
    with pytest.raises(kr.KafkaBatchError):
        kr.decode_batch(good[:-1])  # truncated
    with pytest.raises(kr.KafkaBatchError):
        kr.decode_batch(good[:20])
    magic1 = bytearray(good)
    magic1[16] = 1
    with pytest.raises(kr.KafkaBatchError, match="magic"):
        kr.decode_batch(bytes(magic1))
    # compression codec 5 with a valid CRC: unsupported, not corrupt
    bad = bytearray(good)
    struct.pack_into(">h", bad, 21, 5)
    from crc32c import crc32c
    struct.pack_into(">I", bad, 17, crc32c(bytes(bad[21:])))
    with pytest.raises(kr.UnsupportedCompressionError):
        kr.decode_batch(bytes(bad))
    assert issubclass(kr.KafkaCrcError, nb.CorruptBatchError)


def test_xerial_snappy_is_read() -> None:
    import cramjam

    section = kr.encode_records([kr.KafkaRow(0, 0, b"k", b"v" * 100, [("h", b"x")])])
    blocks = [section[:50], section[50:]]
    framed = kr._XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"".join(
        struct.pack(">i", len(c)) + c for c in (bytes(cramjam.snappy.compress_raw(b)) for b in blocks))
    assert kr.decompress(kr.COMPRESSION_SNAPPY, framed) == section


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(rows, codecs, ids, st.booleans()), min_size=1, max_size=3))
def test_kafka_to_native_and_back(batches: list) -> None:
    payload = b"".join(kr.encode_batch(rs, compression=c, attributes=0x10 if t else 0, **f)
                       for rs, c, f, t in batches)
    native = kr.kafka_to_native(payload)
    positions = list(nb.iter_batches(native))
    assert len(positions) == len(batches)
    for (pos, h), (rs, c, f, t) in zip(positions, batches, strict=True):
        assert nb.crc_ok(native, pos)
        assert h.compression == ("lz4" if c else "none") and h.is_transactional == t
        assert (h.producer_id, h.producer_epoch, h.base_sequence, h.base_offset) == (
            f["producer_id"], f["producer_epoch"], f["base_sequence"], f["base_offset"])
        recs = nb.decode_records(native, pos)
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs] == [
            (f["base_offset"] + r.offset_delta, f["first_timestamp"] + r.timestamp_delta,
             r.key, r.value, list(r.headers)) for r in rs]
    back = kr.native_to_kafka(native)
    pos = 0
    for rs, _c, f, t in batches:
        h, got = kr.decode_batch(back, pos)
        assert got == rs and h.attributes & 7 == 0 and bool(h.attributes & 0x10) == t
        assert (h.producer_id, h.base_sequence, h.base_offset) == (
            f["producer_id"], f["base_sequence"], f["base_offset"])
        pos += h.size
    assert pos == len(back)


def test_native_batches_and_markers_as_kafka() -> None:
    native = nb.build_batch([(b"k", b"v", [("a", b"b")], 5000), (None, b"w", [], 5007)],
                            compression="lz4", producer_id=7, producer_epoch=1, base_sequence=3)
    marker = bytearray(nb.build_control_batch(7, 1, True, 4, 6000))
    nb.stamp(marker, 0, 2, 0)
    h, got = kr.decode_batch(kr.native_to_kafka(native))
    assert got == [kr.KafkaRow(0, 0, b"k", b"v", [("a", b"b")]),
                   kr.KafkaRow(1, 7, None, b"w", [])]
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.max_timestamp) == (7, 1, 3, 5007)
    h, got = kr.decode_batch(kr.native_to_kafka(bytes(marker)))
    assert h.attributes & 0x30 == 0x30 and h.base_offset == 2
    assert got[0].key == struct.pack(">hh", 0, 1)  # version 0, COMMIT
    assert got[0].value == struct.pack(">hi", 0, 4)  # version 0, coordinator epoch
    # a partial trailing batch (a fetch cut at max bytes) is dropped
    assert kr.native_to_kafka(native + native[:30]) == kr.native_to_kafka(native)


# --------------------------------------------------------------------------- stored as arrived


def _stored(payload: bytes) -> bytearray:
    """What a leader stores of a Kafka produce: accepted, then stamped with offsets/epoch."""
    buf = kr.accept_produce(payload)
    off = 0
    for pos, h in nb.iter_batches(buf):
        nb.stamp(buf, pos, off, 3)
        off += h.record_count
    return buf


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(rows, codecs, ids, st.booleans()), min_size=1, max_size=3))
def test_kafka_batches_are_stored_as_they_arrived(batches: list) -> None:
    encoded = [kr.encode_batch(rs, compression=c, attributes=0x10 if t else 0, **f)
               for rs, c, f, t in batches]
    stored = kr.accept_produce(b"".join(encoded))
    positions = list(nb.iter_batches(stored))
    assert len(positions) == len(batches)
    for (pos, h), raw, (rs, c, f, _t) in zip(positions, encoded, batches, strict=True):
        # the same bytes but the magic byte, which lies outside the CRC
        assert stored[pos:pos + h.size] == raw[:16] + bytes([nb.KAFKA_MAGIC & 0xFF]) + raw[17:]
        assert h.is_kafka and nb.crc_ok(stored, pos)
        assert h.compression == ("none", "gzip", "snappy", "lz4", "zstd")[c]
        # a native reader decodes the Kafka section itself: same rows, both shapes
        recs = nb.decode_records(stored, pos)
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs] == [
            (f["base_offset"] + r.offset_delta, f["first_timestamp"] + r.timestamp_delta,
             r.key, r.value, list(r.headers)) for r in rs]
        section = nb.records_section(stored, pos, h)
        assert nb.unpack_section(section, h, use_list=False) == tuple(
            (r.offset_delta, r.timestamp_delta, r.key, r.value, tuple(r.headers)) for r in rs)
    # a Kafka reader gets back exactly what was produced: magic 2, the producer's codec
    assert kr.to_kafka(stored) == b"".join(encoded)


def test_fetch_of_mixed_formats_converts_only_the_native_batches() -> None:
    kafka = kr.encode_batch([kr.KafkaRow(0, 0, b"k", b"v", [("h", b"x")])], first_timestamp=10,
                            compression=kr.COMPRESSION_GZIP)
    native = nb.build_batch([(b"n", b"w", [], 20)])
    marker = nb.build_control_batch(9, 0, False, 2, 30)
    stored = bytes(kr.accept_produce(kafka)) + native + marker + bytes(kr.accept_produce(kafka))
    out = kr.to_kafka(stored + native[:40])  # a trailing partial batch is dropped
    pos, got = 0, []
    while pos < len(out):
        h, rs = kr.decode_batch(out, pos)
        got.append((h.attributes & 0x37, [(r.key, r.value) for r in rs]))
        pos += h.size
    assert got == [(kr.COMPRESSION_GZIP, [(b"k", b"v")]), (0, [(b"n", b"w")]),
                   (0x30, [(struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 2))]),
                   (kr.COMPRESSION_GZIP, [(b"k", b"v")])]
    assert out[:len(kafka)] == kafka


def test_produce_checks_header_crc_and_codec_only() -> None:
    good = kr.encode_batch([kr.KafkaRow(0, 0, b"k", b"v", [])], first_timestamp=1)
    flipped = bytearray(good)
    flipped[-1] ^= 1
    with pytest.raises(kr.KafkaCrcError):
        kr.accept_produce(good + bytes(flipped))  # one bad batch refuses the whole payload
    with pytest.raises(kr.KafkaBatchError):
        kr.accept_produce(good[:-3])
    bad = bytearray(good)
    struct.pack_into(">h", bad, 21, 6)
    from crc32c import crc32c
    struct.pack_into(">I", bad, 17, crc32c(bytes(bad[21:])))
    with pytest.raises(kr.UnsupportedCompressionError):
        kr.accept_produce(bytes(bad))


@settings(max_examples=60, deadline=None)
@given(rows, codecs, st.data())
def test_corrupt_stored_kafka_batch_is_detected_like_a_native_one(
        rs: list[kr.KafkaRow], codec: int, data: st.DataObject) -> None:
    stored = _stored(kr.encode_batch(rs, compression=codec, first_timestamp=1000))
    i = data.draw(st.integers(21, len(stored) - 1))
    stored[i] ^= 1 << data.draw(st.integers(0, 7))
    assert not nb.crc_ok(stored, 0)
    with pytest.raises(nb.CorruptBatchError):
        nb.decode_records(stored, 0)


def test_garbage_kafka_section_with_a_good_crc_is_a_corrupt_batch() -> None:
    """A section that passes the CRC but does not decode (the broker never reads records, a
    reader does): the native reader's error is CorruptBatchError, not a crash."""
    good = kr.encode_batch([kr.KafkaRow(0, 0, b"k", b"v", [])], first_timestamp=1)
    h = nb.parse_header(kr.accept_produce(good))
    for section in (b"\x7f\x00", b"\x02", b"\x0a\x00\x00\x00\x01k\x02v\x00"):
        bad = nb.build_raw_batch(section, base_offset=0, last_offset_delta=0, record_count=1,
                                 first_timestamp=1, max_timestamp=1, attributes=0,
                                 magic=nb.KAFKA_MAGIC)
        assert nb.crc_ok(bad, 0) and h.is_kafka
        with pytest.raises(nb.CorruptBatchError):
            nb.decode_records(bad, 0)


@settings(max_examples=60, deadline=None)
@given(rows, codecs, st.data())
def test_pack_section_keeps_a_kafka_batch_kafka(rs: list[kr.KafkaRow], codec: int,
                                                data: st.DataObject) -> None:
    """What compaction writes for the records it keeps of a Kafka batch: a Kafka section in
    the batch's codec, read back by a Kafka client as it was."""
    stored = _stored(kr.encode_batch(rs, compression=codec, first_timestamp=1000))
    h = nb.parse_header(stored)
    recs = nb.decode_raw_records(stored, 0, h)
    kept = data.draw(st.lists(st.sampled_from(recs), min_size=1, unique_by=lambda r: r[0])
                     .map(lambda ks: sorted(ks, key=lambda r: r[0])))
    rebuilt = nb.build_raw_batch(nb.pack_section(h, kept), base_offset=h.base_offset,
                                 last_offset_delta=h.last_offset_delta, record_count=len(kept),
                                 first_timestamp=h.first_timestamp, max_timestamp=h.max_timestamp,
                                 attributes=h.attributes, magic=h.magic)
    assert nb.decode_raw_records(rebuilt, 0) == kept
    h2, back = kr.decode_batch(kr.to_kafka(rebuilt))
    assert h2.attributes & 7 == codec
    assert [[r.offset_delta, r.timestamp_delta, r.key, r.value, [list(x) for x in r.headers]]
            for r in back] == kept


def test_fetch_of_kafka_batches_patches_in_place() -> None:
    """A fetch read into a bytearray holding stored Kafka batches only (a fresh copy the answer
    owns: broker/kafka/apis.py fetch): the magic bytes are set back in place (no further
    copy), a trailing partial batch left out; any native batch in it takes
    the converting path and gives the same bytes as from immutable input."""
    kafka = kr.encode_batch([kr.KafkaRow(0, 0, b"k", b"v" * 50, [])], first_timestamp=10,
                            compression=kr.COMPRESSION_ZSTD)
    stored = bytes(kr.accept_produce(kafka * 3))
    buf = bytearray(stored + stored[:70])
    out = kr.to_kafka(buf)
    assert isinstance(out, memoryview) and out.obj is buf
    assert out == kafka * 3
    mixed = stored + nb.build_batch([(b"n", b"w", [], 20)])
    assert kr.to_kafka(bytearray(mixed)) == kr.to_kafka(mixed)
    bad = bytearray(stored)
    bad[8:12] = b"\x00\x00\x00\x01"  # a length below the header's: the named error
    with pytest.raises(nb.CorruptBatchError):
        kr.to_kafka(bad)


@settings(max_examples=40, deadline=None)
@given(rows, codecs)
def test_log_append_time_stamping_keeps_a_kafka_batch_valid(rs: list[kr.KafkaRow], codec: int) -> None:
    """A LogAppendTime topic stamps max_timestamp and the attribute bit (inside the CRC range)
    and recomputes the CRC: the same for a stored Kafka batch — a Kafka client verifies it,
    and both clients read every record at the append time."""
    stored = _stored(kr.encode_batch(rs, compression=codec, first_timestamp=1000))
    nb.stamp_log_append_time(stored, 0, 1_800_000_000_000)
    assert nb.crc_ok(stored, 0)
    h, back = kr.decode_batch(kr.to_kafka(bytes(stored)))  # CRC checked the Kafka way
    assert h.attributes & 0x08 and h.max_timestamp == 1_800_000_000_000
    assert [(r.key, r.value) for r in back] == [(r.key, r.value) for r in rs]
    assert {r.timestamp for r in nb.decode_records(stored, 0)} == {1_800_000_000_000}
