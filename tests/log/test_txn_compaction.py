"""Compaction of transactional data: aborted records go, markers stay, never past the LSO."""

from __future__ import annotations

from rafka.log.batch import decode_records, iter_batches
from rafka.log.compaction import compact
from rafka.log.partition_log import PartitionLog

from .conftest import T0, keyed_batch
from .test_txn_log import Producers

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "350"}


def contents(log: PartitionLog) -> tuple[dict[bytes, list[bytes]], int]:
    """(key → values of the data records in the log, in order; number of control batches)."""
    values: dict[bytes, list[bytes]] = {}
    markers = 0
    for seg in log.segments:
        raw = seg.pread(seg.size, 0)
        for pos, h in iter_batches(raw):
            if h.is_control:
                markers += 1
                continue
            for r in decode_records(raw, pos):
                values.setdefault(r.key, []).append(r.value)
    return values, markers


def test_aborted_records_removed_committed_kept_markers_kept(open_log):
    log = open_log(COMPACT)
    p = Producers(log)
    log.append(keyed_batch([(b"a", b"a-plain"), (b"b", b"b-plain")]), 0)
    p.send(1, key=b"a", value=b"a-committed")
    p.end(1, commit=True)
    p.send(1, key=b"a", value=b"a-aborted")  # must not shadow a-committed
    p.send(1, key=b"c", value=b"c-aborted")
    p.end(1, commit=False)
    p.send(2, key=b"b", value=b"b-committed")
    p.end(2, commit=True)
    log.roll()
    log.append(keyed_batch([(b"z", b"head")]), 0)
    res = compact(log, T0)
    assert res.segments_cleaned and res.aborted_records_removed == 2
    values, markers = contents(log)
    assert values == {b"a": [b"a-committed"], b"b": [b"b-committed"], b"z": [b"head"]}
    assert markers == 3
    assert log.collect_aborted(0, log.log_end_offset) == [(1, 4)]
    # state rebuilt from the cleaned log agrees on what is open (nothing)
    log.close()
    log = PartitionLog.open(log.directory, log.config)
    assert log.first_unstable_offset() is None


def test_no_cleaning_at_or_above_the_first_unstable_offset(open_log):
    log = open_log(COMPACT)
    p = Producers(log)
    for i in range(4):
        log.append(keyed_batch([(b"k", b"old%d" % i)]), 0)
    log.roll()
    open_at = p.send(1, key=b"k", value=b"pending")  # decides nothing yet
    for i in range(6):
        log.append(keyed_batch([(b"k", b"new%d" % i)], ts=T0 + i), 0)
    log.roll()
    log.append(keyed_batch([(b"h", b"head")]), 0)
    res = compact(log, T0 + 100)
    assert all(log.segments[[s.base_offset for s in log.segments].index(b)].next_offset
               <= open_at for b in res.segments_cleaned)
    values, _ = contents(log)
    assert b"pending" in values[b"k"] and b"new5" in values[b"k"]
    # an explicit upper bound (e.g. the high watermark) is honoured too
    p.end(1, commit=False)
    assert compact(log, T0 + 100, upper_bound=0).segments_cleaned == []
    compact(log, T0 + 100)
    values, _ = contents(log)
    assert values[b"k"] == [b"new5"]
