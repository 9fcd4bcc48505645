"""Recovery after unclean and clean shutdowns; serving around damaged segments."""

from __future__ import annotations

import logging
import os
import random

import pytest
from rafka.log.batch import decode_records, iter_batches
from rafka.log.errors import CorruptSegmentError
from rafka.log.partition_log import CLEAN_SHUTDOWN_FILE

from .conftest import make_batch

CFG = {"segment.bytes": "3000", "index.interval.bytes": "300"}


def fill(log, batches=30, n=2):
    for _ in range(batches):
        log.append(make_batch(n), 0)


def all_offsets(log):
    data, out, off = b"", [], log.log_start_offset
    while (data := log.read_bytes(off, 1 << 20)):
        for pos, _h in iter_batches(data):
            out += [r.offset for r in decode_records(data, pos)]
        off = out[-1] + 1
    return out


def active_path(log):
    return log.active_segment.path


@pytest.mark.parametrize("clean", [False, True])
def test_truncated_tail(open_log, caplog, clean):
    log = open_log(CFG)
    fill(log)
    path, leo = active_path(log), log.log_end_offset
    log.close() if clean else log._crash()
    size = path.stat().st_size
    os.truncate(path, size - 10)  # the last batch (offsets leo-2, leo-1) is now partial
    if clean:
        (path.parent / CLEAN_SHUTDOWN_FILE).touch()
    with caplog.at_level(logging.WARNING, logger="rafka.log"):
        log = open_log(CFG)
    assert log.log_end_offset == leo - 2
    assert all_offsets(log) == list(range(leo - 2))
    assert any("dropped" in r.message and f"offsets [{leo - 2}, {leo})" in r.message
               for r in caplog.records), caplog.text
    assert log.append(make_batch(1), 0).base_offset == leo - 2
    assert not (path.parent / CLEAN_SHUTDOWN_FILE).exists()


@pytest.mark.parametrize("clean", [False, True])
def test_garbage_appended_to_tail(open_log, caplog, clean):
    log = open_log(CFG)
    fill(log)
    path, leo = active_path(log), log.log_end_offset
    size = path.stat().st_size
    log.close() if clean else log._crash()
    with open(path, "ab") as f:
        f.write(random.Random(7).randbytes(500))
    with caplog.at_level(logging.WARNING, logger="rafka.log"):
        log = open_log(CFG)
    assert log.log_end_offset == leo and path.stat().st_size == size
    assert any("dropped 500 bytes" in r.message for r in caplog.records), caplog.text
    assert all_offsets(log) == list(range(leo))
    log.append(make_batch(2), 0)
    log.close()
    log = open_log(CFG)
    assert all_offsets(log) == list(range(leo + 2))


def test_unclean_start_drops_later_segments_after_damage(open_log, caplog):
    log = open_log(CFG)
    fill(log, batches=60)
    segs = log.segments
    assert len(segs) >= 3
    victim = segs[-2]
    pos = victim.offset_index.positions[0] if len(victim.offset_index) else 0
    log._crash()
    with open(victim.path, "r+b") as f:  # damage a batch in the second to last segment
        f.seek(pos + 70)
        f.write(b"\xff\xff\xff")
    with caplog.at_level(logging.WARNING, logger="rafka.log"):
        log = open_log(CFG)
    assert log.active_segment.base_offset == victim.base_offset
    assert "deleted 1 later segment" in caplog.text
    assert all_offsets(log) == list(range(log.log_end_offset))
    assert log.log_end_offset < segs[-1].base_offset


def test_clean_start_trusts_indexes_and_rebuilds_missing_ones(open_log):
    log = open_log(CFG)
    fill(log, batches=40)
    leo, bases = log.log_end_offset, [s.base_offset for s in log.segments]
    log.close()
    first = log.segments[0]
    assert first.offset_index.path.exists() and first.time_index.path.exists()
    first.offset_index.path.unlink()
    log = open_log(CFG)
    assert [s.base_offset for s in log.segments] == bases and log.log_end_offset == leo
    assert all_offsets(log) == list(range(leo))
    assert log.recovery_point == leo


def test_segment_corrupted_in_the_middle_serves_good_parts(open_log):
    log = open_log({"segment.bytes": "100000", "index.interval.bytes": "300"})
    fill(log, batches=40)  # one segment, index entry every ~3 batches
    seg = log.active_segment
    batches = [(p, h) for p, h in iter_batches(seg.pread(seg.size, 0))]
    bad_pos, bad = batches[10]
    with open(seg.path, "r+b") as f:  # bit rot inside batch 10 (offsets 20, 21)
        f.seek(bad_pos + 80)
        f.write(b"\x00\x01\x02")
    # before the damage: served, cut short at the bad batch
    d = log.read_bytes(0, 1 << 20)
    assert [r.offset for p, _ in iter_batches(d) for r in decode_records(d, p)] == list(range(20))
    with pytest.raises(CorruptSegmentError) as ei:
        log.read(21, 1 << 20)
    err = ei.value
    assert err.start_offset == 20 and err.end_offset > 21 and err.segment_file == seg.path
    assert f"[20, {err.end_offset})" in str(err)
    # the next good offset is served again, to the end
    data = log.read_bytes(err.end_offset, 1 << 20)
    offs = [r.offset for p, _ in iter_batches(data) for r in decode_records(data, p)]
    assert offs == list(range(err.end_offset, log.log_end_offset))


def _rot_batch(path, index):
    """Flip the last 3 bytes (records, CRC-covered) of the index-th batch of a segment file."""
    data = path.read_bytes()
    pos, h = list(iter_batches(data))[index]
    end = pos + h.size
    with open(path, "r+b") as f:
        f.seek(end - 3)
        f.write(bytes(b ^ 0xFF for b in data[end - 3:end]))
    return h.base_offset, h.next_offset


def test_bit_rot_after_a_clean_stop_is_kept_in_place_not_truncated(open_log, caplog):
    """After a clean stop the data was fsynced: a whole batch failing its CRC in the middle
    of the unindexed tail is bit rot, not a torn write. Recovery keeps the good batches after
    it (it used to truncate there, dropping them), names the range, and reads around it."""
    cfg = {"segment.bytes": "100000"}  # default index interval: no index entry in 40 batches
    log = open_log(cfg)
    fill(log, batches=40, n=1)
    path = active_path(log)
    log.close()
    first, nxt = _rot_batch(path, 20)
    with caplog.at_level(logging.WARNING, logger="rafka.log"):
        log = open_log(cfg)
    assert log.log_end_offset == 40
    assert not any("dropped" in r.message for r in caplog.records), caplog.text
    assert any(f"[{first}, {nxt})" in r.message and "CRC" in r.message for r in caplog.records)
    d = log.read_bytes(0, 1 << 20)  # served up to the damage
    assert [r.offset for p, _ in iter_batches(d) for r in decode_records(d, p)] == list(range(20))
    with pytest.raises(CorruptSegmentError) as ei:
        log.read(20, 1 << 20)
    assert (ei.value.start_offset, ei.value.end_offset) == (20, 21)  # named precisely
    d = log.read_bytes(21, 1 << 20)
    assert [r.offset for p, _ in iter_batches(d) for r in decode_records(d, p)] == list(range(21, 40))
    assert log.append(make_batch(1), 0).base_offset == 40
    log.close()
    log = open_log(cfg)  # and again, now with the rebuilt index
    assert log.log_end_offset == 41
    with pytest.raises(CorruptSegmentError):
        log.read(20, 1 << 20)


def test_bit_rot_in_the_unflushed_tail_after_a_crash_still_truncates(open_log, caplog):
    """Unclean start: what is after the recovery point may be a torn write; the issue's rule
    (truncate at the first bad batch, log what was dropped) still applies there."""
    cfg = {"segment.bytes": "100000"}
    log = open_log(cfg)
    fill(log, batches=40, n=1)
    path = active_path(log)
    log._crash()
    _rot_batch(path, 20)
    with caplog.at_level(logging.WARNING, logger="rafka.log"):
        log = open_log(cfg)
    assert log.log_end_offset == 20
    assert any("dropped" in r.message and "offsets [20, 40)" in r.message for r in caplog.records), \
        caplog.text
