"""Retention by time and by size: whole segments, never the active one."""

from __future__ import annotations

import pytest
from rafka.log.errors import OffsetOutOfRangeError

from .conftest import T0, make_batch

CFG = {"segment.bytes": "1000", "file.delete.delay.ms": "0"}


def test_retention_by_time(open_log, clock):
    log = open_log({**CFG, "retention.ms": "10000"})
    for i in range(40):
        log.append(make_batch(2, ts=T0 + 1000 * i), 0)  # one second per batch
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    clock.t = T0 + 1000 * 39 + 5000  # data older than T0 + 34.5 s expires
    deleted = log.enforce_retention(clock.t)
    assert deleted == bases[:len(deleted)] and deleted
    assert log.log_start_offset == log.segments[0].base_offset == bases[len(deleted)]
    assert all(s.max_timestamp >= clock.t - 10000 for s in log.segments[:-1])
    assert not [p for b in deleted for p in log.directory.glob(f"{b:020d}.*")
                if not p.name.endswith(".snapshot")]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    # far in the future: everything but the active segment goes
    log.enforce_retention(T0 + 10**9)
    assert len(log.segments) == 1 and log.log_end_offset == 80
    assert log.read_bytes(log.log_start_offset, 1 << 20)


def test_retention_by_size(open_log):
    log = open_log({**CFG, "retention.bytes": "2500", "retention.ms": "-1"})
    for _ in range(60):
        log.append(make_batch(2), 0)
    before = log.size_bytes
    deleted = log.enforce_retention(T0)
    assert deleted and log.size_bytes >= 2500 > log.size_bytes - log.segments[0].size
    assert before - log.size_bytes > 0
    assert log.enforce_retention(T0) == []


def test_retention_respects_policy_and_delay(open_log, clock):
    log = open_log({**CFG, "retention.ms": "1", "cleanup.policy": "compact"})
    for _ in range(30):
        log.append(make_batch(2), 0)
    assert log.enforce_retention(T0 + 10**9) == []
    log2 = open_log({"segment.bytes": "1000", "retention.ms": "1",
                     "file.delete.delay.ms": "60000"}, name="q")
    for _ in range(30):
        log2.append(make_batch(2), 0)
    deleted = log2.enforce_retention(T0 + 10**9)
    assert deleted and list(log2.directory.glob("*.deleted"))  # renamed, deleted later
    log2.enforce_retention(T0 + 10**9 + 60000)
    assert not list(log2.directory.glob("*.deleted"))
