"""PartitionLog: append, roll, indexes, reads, timestamps, follower appends, truncation."""

from __future__ import annotations

import os

import pytest
from rafka.log.batch import crc_ok, decode_records, iter_batches, parse_header
from rafka.log.config import LogConfig
from rafka.log.errors import (
    CorruptBatchError,
    InvalidConfigError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)

from .conftest import T0, keyed_batch, make_batch

SMALL = {"segment.bytes": "2000", "index.interval.bytes": "200"}


def offsets_in(data: bytes) -> list[int]:
    out = []
    for pos, _h in iter_batches(data):
        out += [r.offset for r in decode_records(data, pos)]
    return out


def test_config_from_dict():
    cfg = LogConfig.from_dict({"segment.bytes": "1048576", "cleanup.policy": "delete,compact",
                               "message.timestamp.type": "LogAppendTime",
                               "retention.ms": "-1", "min.insync.replicas": 2})
    assert cfg.segment_bytes == 1048576 and cfg.compact and cfg.delete and cfg.log_append_time
    assert cfg.retention_ms == -1 and cfg.to_dict()["cleanup.policy"] == "compact,delete"
    with pytest.raises(InvalidConfigError, match="segment.byte"):
        LogConfig.from_dict({"segment.byte": "1"})
    with pytest.raises(InvalidConfigError) as ei:
        LogConfig.from_dict({"retention.bytes": "lots"})
    assert ei.value.key == "retention.bytes"
    with pytest.raises(InvalidConfigError):
        LogConfig.from_dict({"cleanup.policy": "shred"})


def test_append_assigns_offsets_and_stamps_epoch(open_log):
    log = open_log()
    a = log.append(make_batch(3), leader_epoch=4)
    b = log.append(make_batch(2) + make_batch(5), leader_epoch=4)  # two batches, one payload
    assert (a.base_offset, a.last_offset) == (0, 2)
    assert (b.base_offset, b.last_offset) == (3, 9) and log.log_end_offset == 10
    data = log.read_bytes(0, 1 << 20)
    assert offsets_in(data) == list(range(10))
    hs = [h for _p, h in iter_batches(data)]
    assert [h.base_offset for h in hs] == [0, 3, 5]
    assert all(h.partition_leader_epoch == 4 for h in hs)
    assert log.epochs.entries == [(4, 0)]
    log.append(make_batch(1), leader_epoch=6)
    assert log.epochs.entries == [(4, 0), (6, 10)]


def test_append_rejects_bad_payloads(open_log):
    log = open_log({"max.message.bytes": "500"})
    bad = bytearray(make_batch(2))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError):
        log.append(bad, 0)
    with pytest.raises(CorruptBatchError):
        log.append(make_batch(2)[:-3], 0)
    with pytest.raises(RecordTooLargeError):
        log.append(make_batch(1, value=b"x" * 600), 0)
    with pytest.raises(InvalidRecordError):
        log.append(b"", 0)
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_log_append_time(open_log, clock):
    log = open_log({"message.timestamp.type": "LogAppendTime"})
    clock.t = T0 + 10_000
    info = log.append(make_batch(3, ts=5), 0)
    assert info.log_append_time == T0 + 10_000 and info.max_timestamp == T0 + 10_000
    data = log.read_bytes(0, 1 << 20)
    assert crc_ok(data) and parse_header(data).timestamp_type == 1
    assert [r.timestamp for r in decode_records(data)] == [T0 + 10_000] * 3


def test_append_leaves_the_callers_buffer_alone(open_log):
    """The leader append stamps copies of the headers: the payload is neither copied nor
    modified, and the caller may reuse its buffer once append returns (the broker's receive
    buffer is reused for the next request)."""
    log = open_log()
    log.append(make_batch(1), 0)
    payload = bytearray(make_batch(2) + make_batch(3))
    original = bytes(payload)
    info = log.append(memoryview(payload), leader_epoch=7)
    assert bytes(payload) == original and (info.base_offset, info.last_offset) == (1, 5)
    payload[:] = b"\0" * len(payload)  # reused by the caller
    data = log.read_bytes(1, 1 << 20)
    hs = [h for _p, h in iter_batches(data)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in hs] == [(1, 7), (3, 7)]
    assert offsets_in(data) == [1, 2, 3, 4, 5] and all(crc_ok(data, p) for p, _h in iter_batches(data))
    assert [r.value for r in decode_records(data)] == [b"v" * 20] * 2


def test_log_append_time_several_batches_caller_bytes_untouched(open_log, clock):
    log = open_log({"message.timestamp.type": "LogAppendTime"})
    clock.t = T0 + 20_000
    payload = make_batch(2, ts=5) + make_batch(4, ts=6)
    info = log.append(payload, 0)
    assert payload == make_batch(2, ts=5) + make_batch(4, ts=6)
    assert info.log_append_time == T0 + 20_000
    data = log.read_bytes(0, 1 << 20)
    batches = list(iter_batches(data))
    assert len(batches) == 2
    for p, h in batches:
        assert crc_ok(data, p) and h.timestamp_type == 1 and h.max_timestamp == T0 + 20_000
    log.close()
    reopened = open_log({"message.timestamp.type": "LogAppendTime"})  # recovery checks CRCs
    assert reopened.log_end_offset == 6


def test_segment_writev_continues_short_writes_and_many_parts(open_log, monkeypatch):
    import rafka.log.segment as segment_mod

    log = open_log()
    real = os.writev
    calls = []

    def short_writev(fd, bufs):  # writes at most 7 bytes per call
        calls.append(len(bufs))
        taken, out = 0, []
        for b in bufs:
            b = bytes(b)[:7 - taken]
            out.append(b)
            taken += len(b)
            if taken >= 7:
                break
        return real(fd, out)

    monkeypatch.setattr(segment_mod.os, "writev", short_writev)
    log.append(make_batch(2) + make_batch(3), 0)
    monkeypatch.setattr(segment_mod.os, "writev", real)
    many = b"".join(make_batch(1) for _ in range(1500))  # 3,000 iovecs > IOV_MAX
    log.append(many, 0)
    data = log.read_bytes(0, 1 << 22)
    assert len(calls) > 10
    assert offsets_in(data) == list(range(1505))
    assert all(crc_ok(data, p) for p, _h in iter_batches(data))


def test_compacted_topic_rejects_keyless_records(open_log):
    log = open_log({"cleanup.policy": "compact"})
    log.append(keyed_batch([(b"a", b"1")]), 0)
    with pytest.raises(InvalidRecordError, match="key"):
        log.append(keyed_batch([(b"a", b"1"), (None, b"2")]), 0)
    assert log.log_end_offset == 1


def test_roll_by_size_and_index_lookups(open_log):
    log = open_log(SMALL)
    for _ in range(60):
        log.append(make_batch(2), 0)  # 2-record batches of ~150 bytes
    segs = log.segments
    assert len(segs) >= 4
    assert all(s.size <= 2000 for s in segs)
    assert [s.base_offset for s in segs] == sorted(s.base_offset for s in segs)
    assert any(len(s.offset_index) > 0 for s in segs)
    for off in range(0, 120, 7):  # every offset is found through the sparse index
        got = offsets_in(log.read_bytes(off, 1))
        assert got[0] <= off <= got[-1]


def test_roll_by_time(open_log, clock):
    log = open_log({"segment.ms": "1000"})
    log.append(make_batch(1), 0)
    clock.advance(500)
    log.append(make_batch(1), 0)
    assert len(log.segments) == 1
    clock.advance(600)
    log.append(make_batch(1), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_read_across_many_segments_and_limits(open_log):
    log = open_log(SMALL)
    for _ in range(100):
        log.append(make_batch(3), 0)
    assert len(log.segments) >= 6
    # reading everything by following the slices
    seen, off = [], 0
    while (sl := log.read(off, 1000)) is not None:
        with sl:
            data = sl.read_bytes()
        assert sl.length == len(data) <= max(1000, parse_header(data).size)
        seen += offsets_in(data)
        off = sl.last_offset + 1
    assert seen == list(range(300))
    # max_offset (high watermark): only whole batches below it
    assert offsets_in(log.read_bytes(0, 1 << 20, max_offset=7)) == list(range(6))
    assert log.read(6, 1 << 20, max_offset=7) is None
    # the first batch is returned whole even if larger than max_bytes
    assert offsets_in(log.read_bytes(4, 10)) == [3, 4, 5]
    assert log.read(300, 100) is None
    with pytest.raises(OffsetOutOfRangeError) as ei:
        log.read(301, 100)
    assert (ei.value.log_start, ei.value.log_end) == (0, 300)


def test_fetch_slice_owns_its_fd(open_log):
    log = open_log()
    log.append(make_batch(2), 0)
    sl = log.read(0, 1000)
    log.close()
    assert len(sl.read_bytes()) == sl.length  # fd still valid after the log closed
    assert os.sendfile is not None and sl.fileno() >= 0
    sl.close()
    assert sl.fd == -1


def test_offset_for_timestamp(open_log):
    log = open_log(SMALL)
    for i in range(50):
        log.append(make_batch(2, ts=T0 + 10 * i), 0)  # record j of batch i: T0 + 10i + j
    assert log.offset_for_timestamp(T0) == (0, T0)
    assert log.offset_for_timestamp(T0 + 1) == (1, T0 + 1)
    assert log.offset_for_timestamp(T0 + 2) == (2, T0 + 10)
    assert log.offset_for_timestamp(T0 + 255) == (52, T0 + 260)
    assert log.offset_for_timestamp(T0 + 491) == (99, T0 + 491)
    assert log.offset_for_timestamp(T0 + 492) is None
    assert log.offset_for_timestamp(T0 + 255, max_offset=40) is None


def test_follower_append_keeps_offsets_and_epochs(open_log):
    leader = open_log(name="leader")
    leader.append(make_batch(2), 1)
    leader.append(make_batch(3), 2)
    follower = open_log(name="follower")
    info = follower.append_as_follower(leader.read_bytes(0, 1 << 20))
    assert (info.base_offset, info.last_offset) == (0, 4)
    assert follower.log_end_offset == 5 and follower.epochs.entries == [(1, 0), (2, 2)]
    assert follower.read_bytes(0, 1 << 20) == leader.read_bytes(0, 1 << 20)
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(leader.read_bytes(2, 1 << 20))


def test_truncate_to(open_log):
    log = open_log(SMALL)
    for i in range(40):
        log.append(make_batch(2), leader_epoch=i // 10)
    log.flush()
    log.truncate_to(31)  # inside batch [30, 31]: the whole batch goes
    assert log.log_end_offset == 30 and log.recovery_point <= 30
    assert offsets_in(log.read_bytes(28, 1 << 20)) == [28, 29]
    assert log.epochs.entries == [(0, 0), (1, 20)]
    log.truncate_to(12)
    assert log.log_end_offset == 12
    info = log.append(make_batch(1), 5)
    assert info.base_offset == 12
    log.close()


def test_truncate_fully_and_start_at(open_log):
    log = open_log()
    log.append(make_batch(5), 0)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.append(make_batch(1), 1).base_offset == 100
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5, 100)


def test_flush_from_a_thread_while_appending(open_log):
    import threading

    log = open_log({"segment.bytes": "4000", "index.interval.bytes": "500"})
    stop, errors, points = threading.Event(), [], []

    def flush_loop():
        while not stop.is_set():
            try:
                points.append(log.flush())
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    t = threading.Thread(target=flush_loop)
    t.start()
    try:
        for _ in range(400):
            log.append(make_batch(2), 0)
    finally:
        stop.set()
        t.join()
    assert not errors and points == sorted(points)
    assert log.flush() == log.recovery_point == 800
    log._crash()
    log = open_log({"segment.bytes": "4000", "index.interval.bytes": "500"})
    assert log.log_end_offset == 800
    seen, off = [], 0
    while data := log.read_bytes(off, 1 << 20):  # one segment per read
        seen += offsets_in(data)
        off = seen[-1] + 1
    assert seen == list(range(800))
