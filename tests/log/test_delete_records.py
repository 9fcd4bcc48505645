"""DeleteRecords on a partition log: the log start offset moves (mid-segment too), whole
segments below it go, reads below it are out of range, and it survives a restart."""

from __future__ import annotations

import pytest
from rafka.log.errors import OffsetOutOfRangeError
from rafka.log.retention import LOG_START_FILE

from .conftest import make_batch

CFG = {"segment.bytes": "1000", "file.delete.delay.ms": "0"}


def test_delete_records_moves_the_start_and_deletes_whole_segments(open_log):
    log = open_log(CFG)
    for _ in range(40):
        log.append(make_batch(2), 0)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    target = bases[2] + 1  # inside the third segment
    assert log.delete_records_before(target) == target
    assert log.log_start_offset == target
    assert [s.base_offset for s in log.segments] == bases[2:]  # the third one stays (holds it)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 100)
    assert log.read_bytes(target, 1 << 20)  # the batch holding it, from its base
    # never back, never past the end
    assert log.delete_records_before(target - 5) == target
    assert log.delete_records_before(10**9) == log.log_end_offset == 80


def test_delete_records_start_survives_a_restart(open_log):
    log = open_log(CFG)
    for _ in range(10):
        log.append(make_batch(2), 0)
    log.delete_records_before(7)
    assert (log.directory / LOG_START_FILE).read_text().strip() == "7"
    log.close()
    again = open_log(CFG)
    assert again.log_start_offset == 7 and again.log_end_offset == 20
    with pytest.raises(OffsetOutOfRangeError):
        again.read(6, 100)


def test_truncate_fully_forgets_the_deleted_records_start(open_log):
    log = open_log(CFG)
    for _ in range(10):
        log.append(make_batch(2), 0)
    log.delete_records_before(7)
    log.truncate_fully_and_start_at(3)
    assert log.log_start_offset == 3 and not (log.directory / LOG_START_FILE).exists()
