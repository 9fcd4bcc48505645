"""Batches larger than segment.bytes: accepted as in Kafka, alone in a fresh segment.

The only per-batch limit is max.message.bytes (leader appends); such a batch rolls the active
segment first unless it is empty, lands alone in a segment that then exceeds segment.bytes, and
the next append rolls again.  Reads, recovery (clean, unclean, torn), follower appends,
retention and compaction must all take such a segment.
"""

from __future__ import annotations

import logging
import os

import pytest
from rafka.log import compaction
from rafka.log.batch import decode_records, iter_batches
from rafka.log.errors import RecordTooLargeError

from .conftest import T0, keyed_batch, make_batch

CFG = {"segment.bytes": "4096", "index.interval.bytes": "512", "file.delete.delay.ms": "0"}
BIG_VALUE = 20 * 1024


def big_batch(n: int = 1, ts: int = T0, **kw) -> bytes:
    b = make_batch(n, value=b"B" * (BIG_VALUE // n), ts=ts, **kw)
    assert len(b) > 20 * 1024 - 100
    return b


def records(log, start: int | None = None):
    off = log.log_start_offset if start is None else start
    out = []
    while data := log.read_bytes(off, 1 << 20):
        for pos, _h in iter_batches(data):
            out += [(r.offset, r.value) for r in decode_records(data, pos)]
        off = out[-1][0] + 1
    return out


def fill_small(log, k: int, ts: int = T0) -> None:
    for _ in range(k):
        log.append(make_batch(2, ts=ts), 0)


def test_big_batch_rolls_and_goes_alone_into_a_fresh_segment(open_log):
    log = open_log(CFG)
    fill_small(log, 5)
    assert len(log.segments) == 1 and log.log_end_offset == 10
    info = log.append(big_batch(4), 3)
    assert (info.base_offset, info.last_offset) == (10, 13)
    assert [s.base_offset for s in log.segments] == [0, 10]
    big_seg = log.active_segment
    assert big_seg.size > 4096 and big_seg.next_offset == 14
    # the next append rolls again: the big segment stays alone with its batch
    assert log.append(make_batch(1), 3).base_offset == 14
    assert [s.base_offset for s in log.segments] == [0, 10, 14]
    assert log.segments[1].size == big_seg.size
    # reads: the whole big batch even with a tiny max_bytes, from any offset in it
    for off in (10, 12, 13):
        data = log.read_bytes(off, 100)
        hs = [h for _p, h in iter_batches(data)]
        assert [(h.base_offset, h.last_offset) for h in hs] == [(10, 13)]
        assert hs[0].partition_leader_epoch == 3
    assert [o for o, _v in records(log)] == list(range(15))
    assert log.offset_for_timestamp(T0 + 3) == (13, T0 + 3)  # inside the big batch
    assert log.epochs.entries == [(0, 0), (3, 10)]


def test_big_batch_into_an_empty_active_segment_does_not_roll(open_log):
    log = open_log(CFG)
    log.append(big_batch(), 0)
    assert len(log.segments) == 1 and log.active_segment.size > 4096
    log.append(big_batch(), 0)  # rolls: the active segment is not empty
    assert [s.base_offset for s in log.segments] == [0, 1]
    assert [o for o, _v in records(log)] == [0, 1]


def test_payload_with_a_big_batch_in_the_middle(open_log):
    log = open_log(CFG)
    fill_small(log, 3)
    payload = make_batch(2) + big_batch(3) + make_batch(2)
    info = log.append(payload, 0)
    assert (info.base_offset, info.last_offset) == (6, 12)
    assert [s.base_offset for s in log.segments] == [0, 8, 11]
    assert [s.next_offset for s in log.segments] == [8, 11, 13]
    assert [o for o, _v in records(log)] == list(range(13))


def test_max_message_bytes_still_refuses_before_appending(open_log):
    log = open_log({**CFG, "max.message.bytes": "10000"})
    fill_small(log, 2)
    segs = [(s.base_offset, s.size) for s in log.segments]
    with pytest.raises(RecordTooLargeError, match="max.message.bytes=10000"):
        log.append(make_batch(1) + big_batch(), 0)
    assert [(s.base_offset, s.size) for s in log.segments] == segs and log.log_end_offset == 4


@pytest.mark.parametrize("clean", [False, True])
def test_big_segment_recovers(open_log, clean):
    log = open_log(CFG)
    fill_small(log, 5)
    log.append(big_batch(4), 0)
    expected = records(log)
    sizes = [s.size for s in log.segments]
    if clean:
        log.close()
    else:
        log._crash()  # recovery point still at 0: everything is validated again
    log = open_log(CFG)
    assert [s.size for s in log.segments] == sizes and sizes[-1] > 4096
    assert records(log) == expected and log.log_end_offset == 14
    assert log.append(make_batch(1), 0).base_offset == 14
    assert len(log.segments) == 3  # the next append still rolls the big segment away


def test_big_segment_below_the_recovery_point_recovers(open_log):
    log = open_log(CFG)
    fill_small(log, 5)
    log.append(big_batch(4), 0)
    fill_small(log, 3)
    log.flush()
    expected = records(log)
    log._crash()
    log = open_log(CFG)
    assert records(log) == expected


def test_torn_big_batch_is_cut(open_log, caplog):
    log = open_log(CFG)
    fill_small(log, 5)
    log.append(big_batch(4), 0)
    path = log.active_segment.path
    log._crash()
    full = path.stat().st_size
    os.truncate(path, full - 7000)  # the big batch lost its end
    with caplog.at_level(logging.WARNING, logger="rafka.log"):
        log = open_log(CFG)
    assert log.log_end_offset == 10 and [o for o, _v in records(log)] == list(range(10))
    assert any("dropped" in r.message and "offsets [10, 14)" in r.message
               for r in caplog.records), caplog.text
    assert path.exists() and path.stat().st_size == 0
    log.append(big_batch(2), 0)  # the emptied segment takes a big batch again
    assert [o for o, _v in records(log)][-2:] == [10, 11]


def test_follower_takes_the_leaders_big_batch(open_log):
    leader = open_log(CFG)
    fill_small(leader, 5)
    leader.append(big_batch(4), 2)
    leader.append(make_batch(2) + make_batch(2), 2)
    follower = open_log(CFG, name="f")
    while follower.log_end_offset < leader.log_end_offset:
        raw = leader.read_bytes(follower.log_end_offset, 1000)  # the big batch comes whole
        follower.append_as_follower(raw)
    assert records(follower) == records(leader)
    assert [s.base_offset for s in follower.segments] == [0, 10, 14]
    assert follower.segments[1].size == leader.segments[1].size > 4096
    assert follower.epochs.entries == leader.epochs.entries
    follower._crash()
    follower = open_log(CFG, name="f")
    assert records(follower) == records(leader)


def test_retention_deletes_the_big_segment_when_due(open_log, clock):
    log = open_log({**CFG, "retention.ms": "10000"})
    fill_small(log, 5, ts=T0)
    log.append(big_batch(4, ts=T0 + 1000), 0)
    log.append(make_batch(1, ts=T0 + 60_000), 0)  # rolls the big segment away
    assert [s.base_offset for s in log.segments] == [0, 10, 14]
    assert log.enforce_retention(T0 + 10_500) == [0]  # not due yet: its data is 9.5 s old
    assert log.enforce_retention(T0 + 11_002) == []  # its last record is at T0 + 1003
    assert log.enforce_retention(T0 + 11_004) == [10]
    assert log.log_start_offset == 14 and [o for o, _v in records(log)] == [14]
    assert not [p for p in log.directory.glob(f"{10:020d}.*") if p.suffix != ".snapshot"]


def test_retention_by_size_counts_the_big_segment(open_log):
    log = open_log({**CFG, "retention.bytes": "8000", "retention.ms": "-1"})
    fill_small(log, 5)
    log.append(big_batch(4), 0)
    fill_small(log, 2)
    # as Kafka: a segment goes only if what remains is still >= retention.bytes
    assert log.enforce_retention(T0) == [0]
    assert log.log_start_offset == 10
    log.config = log.config.__class__.from_dict(
        {**CFG, "retention.bytes": str(log.active_segment.size), "retention.ms": "-1"})
    assert log.enforce_retention(T0) == [10]
    assert log.log_start_offset == 14 and [o for o, _v in records(log)] == [14, 15, 16, 17]


def test_compaction_with_a_big_segment(open_log):
    cfg = {**CFG, "cleanup.policy": "compact"}
    log = open_log(cfg)
    log.append(keyed_batch([(b"a", b"1"), (b"b", b"1")]), 0)
    log.append(keyed_batch([(b"a", b"x" * BIG_VALUE), (b"c", b"1")]), 0)  # big, offsets 2-3
    log.append(keyed_batch([(b"c", b"2"), (b"d", b"1")]), 0)
    log.append(keyed_batch([(b"a", b"3")]), 0)
    log.roll()
    assert len(log.segments[1].path.read_bytes()) > 4096
    res = compaction.compact(log, T0 + 10**9)
    assert res.segments_cleaned
    assert [(o, v) for o, v in records(log)] == [(1, b"1"), (4, b"2"), (5, b"1"), (6, b"3")]
    log._crash()
    log = open_log(cfg)
    assert [o for o, _v in records(log)] == [1, 4, 5, 6]
