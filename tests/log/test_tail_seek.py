"""The read path's seek in a segment's tail (``Segment.tail_offsets``) and inline small reads.

A caught-up follower or consumer fetches at the log end on every request; the tail list finds
that batch with one header read instead of a scan from the last sparse index entry. These tests
check that every offset is still found exactly (appends, truncation, reopen with and without a
clean shutdown) and count the header reads of a tail seek on a real segment."""

from __future__ import annotations

import os

import pytest
from rafka.log.batch import decode_records, iter_batches
from rafka.log.partition_log import PartitionLog

from .conftest import make_batch

# batches of 2 records, ~100 bytes each: many batches between two sparse index entries
SPARSE = {"segment.bytes": "100000", "index.interval.bytes": "4096"}


def _first_offsets(data: bytes | memoryview) -> list[int]:
    data = bytes(data)
    return [r.offset for pos, _h in iter_batches(data) for r in decode_records(data, pos)]


def _check_every_offset(log: PartitionLog) -> None:
    for off in range(log.log_start_offset, log.log_end_offset):
        got = _first_offsets(log.read_bytes(off, 1))  # the first whole batch holding off
        assert got[0] <= off <= got[-1], (off, got)


def test_tail_seek_finds_every_offset_after_appends_truncation_and_reopen(open_log, tmp_path):
    log = open_log(SPARSE)
    for i in range(120):
        log.append(make_batch(2), i // 40)
    seg = log._segments[-1]
    assert seg.tail_offsets and len(seg.tail_offsets) == len(seg.tail_positions)
    assert seg.offset_index.offsets  # the sparse index has entries; the tail starts after them
    assert seg.tail_offsets[0] >= seg.offset_index.offsets[-1]
    _check_every_offset(log)
    log.truncate_to(181)  # inside a tail batch
    assert log.log_end_offset == 180
    assert all(o < 180 for o in seg.tail_offsets)
    _check_every_offset(log)
    info = log.append(make_batch(3), 9)
    assert info.base_offset == 180 and seg.tail_offsets[-1] == 180
    _check_every_offset(log)
    log.close()  # clean: the indexes load from disk and only the tail is scanned
    again = open_log(SPARSE)
    assert again._segments[-1].tail_offsets  # rebuilt by the tail scan
    _check_every_offset(again)
    assert again.log_end_offset == 183


def test_tail_seek_reads_one_header(open_log, monkeypatch):
    log = open_log(SPARSE)
    for _ in range(30):  # ~3 KB: all behind one sparse entry (position 0)
        log.append(make_batch(2), 0)
    seg = log._segments[-1]
    reads: list[int] = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, pos: reads.append(n) or real(fd, n, pos))
    pos, h, _prev = seg.find_batch(58)
    assert (h.base_offset, h.last_offset) == (58, 59) and len(reads) == 1
    reads.clear()
    assert seg.find_batch(60) is None and len(reads) == 1  # past the end: the last header only


def test_small_read_carries_its_bytes_large_read_an_fd(open_log):
    log = open_log()
    log.append(make_batch(2), 0)
    small = log.read(0, 1 << 20, inline_max_bytes=16 * 1024)
    assert small.fd == -1 and small.data is not None and len(small.data) == small.length
    assert small.read_bytes() == log.read_bytes(0, 1 << 20)
    small.close()  # nothing to close
    big = log.read(0, 1 << 20, inline_max_bytes=small.length - 1)
    assert big.fd >= 0 and big.data is None and big.read_bytes() == small.read_bytes()
    big.close()


@pytest.mark.parametrize("records", [1, 7])
def test_tail_seek_with_batches_of_any_size(open_log, records):
    log = open_log({"segment.bytes": "3000", "index.interval.bytes": "300"})
    for _ in range(60):  # several segments, several sparse entries per segment
        log.append(make_batch(records), 0)
    assert len(log._segments) > 1
    _check_every_offset(log)
