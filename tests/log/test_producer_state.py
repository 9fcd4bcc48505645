"""Idempotent producer state: duplicates, ordering, epochs, persistence, truncation."""

from __future__ import annotations

import pytest
from rafka.log.batch import parse_header
from rafka.log.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    UnknownProducerIdError,
)
from rafka.log.producer_state import ProducerStateManager, last_sequence

from .conftest import make_batch


def pbatch(seq, n=2, pid=7, epoch=0):
    return make_batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_duplicate_returns_original_offsets(open_log):
    log = open_log()
    first = log.append(pbatch(0, n=3), 0)
    log.append(make_batch(1), 0)  # a non-idempotent batch in between
    dup = log.append(pbatch(0, n=3), 0)
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (first.base_offset, 2)
    assert log.log_end_offset == 4


def test_sequence_and_epoch_rules(open_log):
    log = open_log()
    log.append(pbatch(0), 0)
    with pytest.raises(OutOfOrderSequenceError) as ei:
        log.append(pbatch(5), 0)
    assert (ei.value.expected, ei.value.got) == (2, 5)
    log.append(pbatch(2), 0)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(4, epoch=1), 0)  # a new epoch must start at 0
    log.append(pbatch(0, epoch=1), 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append(pbatch(2, epoch=0), 0)  # fenced
    with pytest.raises(UnknownProducerIdError):
        log.append(pbatch(3, pid=99), 0)
    assert log.log_end_offset == 6


def test_only_last_five_batches_are_remembered(open_log):
    log = open_log()
    for i in range(7):
        log.append(pbatch(2 * i), 0)
    assert log.append(pbatch(4), 0).duplicate  # batch 3 of 7: in the window
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(0), 0)  # batch 1 of 7: forgotten


def test_multi_batch_payload_checked_in_order(open_log):
    log = open_log()
    info = log.append(pbatch(0) + pbatch(2), 0)
    assert (info.base_offset, info.last_offset) == (0, 3)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(4) + pbatch(9), 0)
    assert log.log_end_offset == 4  # nothing of the failed payload was appended
    log.append(pbatch(4), 0)


def test_sequence_wraps(tmp_path):
    ps = ProducerStateManager(tmp_path)
    top = 2**31 - 1
    assert last_sequence(top - 1, 3) == 1
    h = parse_header(pbatch(0, n=1))
    ps.update(h, 0)
    ps.producers[7].batches[-1] = ps.producers[7].batches[-1]._replace(first_seq=top - 1,
                                                                      last_seq=top)
    assert ps.check(parse_header(pbatch(0, n=2))) is None  # top -> 0


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_state_survives_reopen(open_log, shutdown):
    cfg = {"segment.bytes": "600"}
    log = open_log(cfg)
    for i in range(12):  # several rolls -> snapshots
        log.append(pbatch(2 * i), 0)
    assert len(log.segments) > 2 and list(log.directory.glob("*.snapshot"))
    log.close() if shutdown == "clean" else log._crash()
    log = open_log(cfg)
    assert log.append(pbatch(22), 0).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(30), 0)
    assert log.append(pbatch(24), 0).base_offset == 24


def test_truncation_rewinds_producer_state(open_log):
    log = open_log({"segment.bytes": "600"})
    for i in range(10):
        log.append(pbatch(2 * i), 0)
    log.truncate_to(14)  # batches with seq 14, 16, 18 are gone
    assert not log.append(pbatch(14), 0).duplicate
    assert log.log_end_offset == 16
