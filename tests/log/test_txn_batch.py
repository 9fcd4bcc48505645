"""Transaction bits of the batch codec: transactional/control attributes and markers."""

from __future__ import annotations

import msgpack
import pytest
from rafka.log.batch import (
    CONTROL_ABORT,
    CONTROL_BIT,
    CONTROL_COMMIT,
    TRANSACTIONAL_BIT,
    build_batch,
    build_batch_rows,
    build_control_batch,
    build_raw_batch,
    control_type,
    crc_ok,
    decode_records,
    parse_header,
)
from rafka.log.errors import CorruptBatchError

from .conftest import T0


@pytest.mark.parametrize("commit", [False, True])
def test_control_batch_round_trip(commit):
    buf = build_control_batch(42, 3, commit, 7, T0)
    h = parse_header(buf)
    assert crc_ok(buf)
    assert h.is_control and h.is_transactional
    assert h.attributes & (TRANSACTIONAL_BIT | CONTROL_BIT) == 0x30
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, -1)
    assert (h.record_count, h.last_offset_delta, h.max_timestamp) == (1, 0, T0)
    assert control_type(buf) == (CONTROL_COMMIT if commit else CONTROL_ABORT)
    (rec,) = decode_records(buf)  # consumers can still decode it (and skip it by header)
    assert msgpack.unpackb(rec.key) == [0, int(commit)]
    assert msgpack.unpackb(rec.value) == [7]


def test_control_type_at_a_position():
    buf = build_batch([(b"k", b"v", [], T0)]) + build_control_batch(1, 0, True, 0, T0)
    assert control_type(buf, parse_header(buf).size) == CONTROL_COMMIT


def test_control_type_refuses_other_batches():
    with pytest.raises(CorruptBatchError, match="not a control batch"):
        control_type(build_batch([(b"k", b"v", [], T0)], transactional=True))
    bad_key = msgpack.packb([[0, 0, msgpack.packb([0, 9]), msgpack.packb([0]), []]])
    forged = build_raw_batch(bad_key, base_offset=0, last_offset_delta=0, record_count=1,
                             first_timestamp=T0, max_timestamp=T0, attributes=0x30,
                             producer_id=1, producer_epoch=0)
    with pytest.raises(CorruptBatchError, match="bad control record"):
        control_type(forged)
    corrupted = bytearray(build_control_batch(1, 0, False, 0, T0))
    corrupted[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="CRC"):
        control_type(corrupted)


def test_marker_needs_a_producer():
    with pytest.raises(ValueError):
        build_control_batch(-1, 0, True, 0, T0)


def test_transactional_flag_in_both_builders():
    plain = parse_header(build_batch([(b"k", b"v", [], T0)], producer_id=1, producer_epoch=0,
                                     base_sequence=0))
    assert not plain.is_transactional and not plain.is_control
    h = parse_header(build_batch([(b"k", b"v", [], T0)], producer_id=1, producer_epoch=0,
                                 base_sequence=0, transactional=True, compression="lz4"))
    assert h.is_transactional and not h.is_control and h.compression == "lz4"
    rows = [(0, 0, b"k", b"v", []), (1, 5, None, b"w", [])]
    buf = build_batch_rows(rows, T0, producer_id=1, producer_epoch=0, base_sequence=0,
                           transactional=True)
    h = parse_header(buf)
    assert h.is_transactional and h.record_count == 2
    assert [r.value for r in decode_records(buf)] == [b"v", b"w"]
