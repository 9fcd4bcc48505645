"""Early writeback of appended bytes (``log/writeback.py``, ``PartitionLog.start_writeback``).

Real logs on disk: a large unflushed tail is submitted once, a small one is left to the fsync,
nothing new means no second call, a flush resets the mark and the data stays durable through
the ordinary ``flush``; a failing ``sync_file_range`` is reported as not started, never raised.
The broker side (only the leader under flush policy ``batch``) is in
tests/broker/test_writeback_broker.py.
"""

from __future__ import annotations

import os
import sys

import pytest
from rafka.log import writeback
from rafka.log.batch import build_batch
from rafka.log.partition_log import WRITEBACK_MIN_BYTES, PartitionLog

pytestmark = pytest.mark.skipif(not writeback.AVAILABLE, reason="no sync_file_range here")


def _big(n_bytes: int) -> bytes:
    n = n_bytes // 1000 + 1
    return build_batch([(b"k", b"v" * 990, [], 1000 + i) for i in range(n)])


def test_large_tails_start_once_small_ones_are_left_to_the_fsync(open_log) -> None:  # type: ignore[no-untyped-def]
    log: PartitionLog = open_log()
    log.append(_big(1000), 0)
    assert not log.start_writeback()  # below WRITEBACK_MIN_BYTES
    log.append(_big(WRITEBACK_MIN_BYTES), 0)
    assert log.start_writeback()
    assert not log.start_writeback()  # nothing appended since
    log.append(_big(1000), 0)
    assert not log.start_writeback()  # what is new is small
    log.append(_big(WRITEBACK_MIN_BYTES), 0)
    assert log.start_writeback()
    assert log.statistics()["writebacks"] == 2
    end = log.log_end_offset
    assert log.flush() == end and log.recovery_point == end  # durability is still the fsync's
    assert not log.start_writeback()  # flushed: nothing left
    log.append(_big(WRITEBACK_MIN_BYTES), 0)
    assert log.start_writeback()


def test_a_new_segment_gets_its_own_writeback(open_log) -> None:  # type: ignore[no-untyped-def]
    log: PartitionLog = open_log({"segment.bytes": str(3 * WRITEBACK_MIN_BYTES)})
    log.append(_big(2 * WRITEBACK_MIN_BYTES), 0)
    assert log.start_writeback()
    log.append(_big(2 * WRITEBACK_MIN_BYTES), 0)  # rolls: the active segment is a fresh one
    assert log.statistics()["segments"] == 2
    assert log.start_writeback()
    assert log.flush() == log.log_end_offset


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_a_failing_call_is_reported_not_raised() -> None:
    r, w = os.pipe()  # sync_file_range on a pipe fails (ESPIPE)
    try:
        assert writeback.start_writeback(r) is False
    finally:
        os.close(r)
        os.close(w)
