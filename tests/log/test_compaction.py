"""Log compaction: last record per key, offsets kept, tombstones, crash consistency."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rafka.log.batch import decode_records, iter_batches, parse_header
from rafka.log.compaction import compact
from rafka.log.config import LogConfig
from rafka.log.partition_log import PartitionLog

from .conftest import T0, Clock, keyed_batch

SEEDS_KEYS = [b"K1", b"K2", b"K1", b"K1", b"K3", b"K2", b"K4", b"K5", b"K5", b"K2", b"K6"]
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "400", "index.interval.bytes": "0"}


def records(log):
    out, off = [], log.log_start_offset
    while (data := log.read_bytes(off, 1 << 20)):
        for pos, _h in iter_batches(data):
            out += decode_records(data, pos)
        off = parse_header(data, [p for p, _ in iter_batches(data)][-1]).last_offset + 1
    return out


@pytest.mark.parametrize("per_batch", [1, 11])
def test_seeds_example(open_log, per_batch):
    log = open_log(COMPACT)
    pairs = [(k, b"v%d" % i) for i, k in enumerate(SEEDS_KEYS)]
    for i in range(0, len(pairs), per_batch):
        log.append(keyed_batch(pairs[i:i + per_batch]), 0)
    log.roll()  # everything is now in the cleanable tail
    res = compact(log, T0)
    got = records(log)
    assert [r.offset for r in got] == [3, 4, 6, 8, 9, 10]
    assert [(r.key, r.value) for r in got] == [(b"K1", b"v3"), (b"K3", b"v4"), (b"K4", b"v6"),
                                               (b"K5", b"v8"), (b"K2", b"v9"), (b"K6", b"v10")]
    assert res.records_before == 11 and res.records_after == 6
    assert log.log_end_offset == 11 and log.log_start_offset == 0
    # offsets inside compacted gaps resolve to the next surviving record
    assert [r.offset for r in decode_records(log.read_bytes(5, 1)) if r.offset >= 5][0] == 6
    log.close()
    log = open_log(COMPACT)
    assert [r.offset for r in records(log)] == [3, 4, 6, 8, 9, 10]


def test_active_segment_is_never_compacted(open_log):
    log = open_log({"cleanup.policy": "compact"})
    for i in range(5):
        log.append(keyed_batch([(b"k", b"%d" % i)]), 0)
    assert compact(log, T0).segments_cleaned == []
    assert len(records(log)) == 5


def test_tombstones_removed_after_delete_retention(open_log):
    log = open_log({**COMPACT, "delete.retention.ms": "1000"})
    log.append(keyed_batch([(b"a", b"1"), (b"b", b"1")], ts=T0), 0)
    log.append(keyed_batch([(b"a", None)], ts=T0 + 10), 0)
    log.roll()
    compact(log, T0 + 500)  # tombstone still young: kept, shadowing a=1
    assert [(r.key, r.value) for r in records(log)] == [(b"b", b"1"), (b"a", None)]
    res = compact(log, T0 + 10 + 1001)
    assert res.tombstones_removed == 1
    assert [(r.offset, r.key, r.value) for r in records(log)] == [(1, b"b", b"1")]


def test_compaction_keeps_batch_fields(open_log):
    log = open_log(COMPACT)
    log.append(keyed_batch([(b"a", b"1"), (b"b", b"2"), (b"a", b"3")], compression="lz4",
                           producer_id=42, producer_epoch=1, base_sequence=0), 7)
    log.roll()
    compact(log, T0)
    data = log.read_bytes(0, 1 << 20)
    h = parse_header(data)
    assert (h.base_offset, h.last_offset_delta, h.record_count) == (0, 2, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 1, 0)
    assert h.partition_leader_epoch == 7 and h.compression == "lz4"
    assert [(r.offset, r.value) for r in decode_records(data)] == [(1, b"2"), (2, b"3")]


class SimulatedCrash(Exception):
    pass


def test_crash_between_cleaned_file_and_swap(open_log, monkeypatch):
    log = open_log(COMPACT)
    for i, k in enumerate(SEEDS_KEYS):
        log.append(keyed_batch([(k, b"v%d" % i)]), 0)
    log.roll()
    before = [(r.offset, r.key, r.value) for r in records(log)]

    def crash(self, old, cleaned):
        assert cleaned.exists() and cleaned.name.endswith(".log.cleaned")
        raise SimulatedCrash

    monkeypatch.setattr(PartitionLog, "_swap_segment", crash)
    with pytest.raises(SimulatedCrash):
        compact(log, T0)
    log._crash()
    monkeypatch.undo()
    log = open_log(COMPACT)
    assert not list(log.directory.glob("*.cleaned"))
    assert [(r.offset, r.key, r.value) for r in records(log)] == before
    compact(log, T0)  # and it can be compacted after all
    assert [r.offset for r in records(log)] == [3, 4, 6, 8, 9, 10]


def test_crash_right_after_swap(open_log, monkeypatch):
    log = open_log(COMPACT)
    for i, k in enumerate(SEEDS_KEYS):
        log.append(keyed_batch([(k, b"v%d" % i)]), 0)
    log.roll()
    original = PartitionLog._swap_segment

    def swap_then_crash(self, old, cleaned):
        original(self, old, cleaned)
        raise SimulatedCrash

    monkeypatch.setattr(PartitionLog, "_swap_segment", swap_then_crash)
    with pytest.raises(SimulatedCrash):
        compact(log, T0)
    log._crash()
    monkeypatch.undo()
    log = open_log(COMPACT)
    offs = [r.offset for r in records(log)]
    assert offs == sorted(set(offs)) and {3, 4, 6, 8, 9, 10} <= set(offs)
    assert log.log_end_offset == 11


_ops = st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]),
                          st.one_of(st.none(), st.binary(min_size=1, max_size=8))),
                min_size=1, max_size=60)


@settings(max_examples=40, deadline=None)
@given(ops=_ops, batch_sizes=st.lists(st.integers(1, 6), min_size=1, max_size=10),
       compression=st.sampled_from(["none", "lz4"]), drop_tombstones=st.booleans())
def test_compaction_property(ops, batch_sizes, compression, drop_tombstones):
    cfg = LogConfig.from_dict({**COMPACT, "delete.retention.ms": "1000"})
    with tempfile.TemporaryDirectory() as d:
        log = PartitionLog.open(Path(d), cfg, now_ms=Clock())
        i = j = 0
        while i < len(ops):
            n = batch_sizes[j % len(batch_sizes)]
            log.append(keyed_batch(ops[i:i + n], ts=T0, compression=compression), 0)
            i, j = i + n, j + 1
        log.roll()
        compact(log, T0 + (10**6 if drop_tombstones else 0))
        got = [(r.offset, r.key, r.value) for r in records(log)]
        last = {k: (off, k, v) for off, (k, v) in enumerate(ops)}
        expected = sorted(v for v in last.values() if not (drop_tombstones and v[2] is None))
        assert got == expected  # last value per key, original offsets, original order
        assert log.log_end_offset == len(ops)
        log.close()
