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

from .conftest import T0, make_batch


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


# --------------------------------------------------------------- expiry on the broker's clock
#
# CI found a retry appended twice: batches stamped with timestamp 0 (any client time far in the
# past: a mirror replaying old records, a producer clock a day behind) made the sequence window
# look idle for decades, and the next retention pass dropped it.  Expiry counts broker time.

DAY = 24 * 3600 * 1000
WEEK_AGO = T0 - 7 * DAY


def old_pbatch(seq, n=2, pid=7):
    return make_batch(n, producer_id=pid, producer_epoch=0, base_sequence=seq, ts=WEEK_AGO)


def test_a_retry_of_old_timestamped_records_survives_a_retention_pass(open_log, clock):
    log = open_log()
    first = log.append(old_pbatch(0, n=3), 0)
    clock.advance(1000)
    log.enforce_retention()
    retry = log.append(old_pbatch(0, n=3), 0)
    assert retry.duplicate and retry.base_offset == first.base_offset
    assert log.log_end_offset == 3
    assert log.describe_producers()[0].last_timestamp == WEEK_AGO + 2  # still the client's time


def test_a_producer_idle_for_the_expiration_on_the_broker_clock_is_forgotten(open_log, clock):
    log = open_log()
    log.append(pbatch(0), 0)
    clock.advance(DAY - 1)
    log.enforce_retention()
    assert len(log.producer_state) == 1
    clock.advance(2)
    log.enforce_retention()
    assert len(log.producer_state) == 0


def test_a_follower_counts_its_own_append_time(open_log, clock):
    leader, follower = open_log(name="leader"), open_log(name="follower")
    leader.append(old_pbatch(0), 0)
    follower.append_as_follower(leader.read_bytes(0, 1 << 20))
    clock.advance(1000)
    follower.enforce_retention()
    assert follower.append(old_pbatch(0), 1).duplicate  # the follower, now leader


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_broker_time_survives_a_restart(open_log, clock, shutdown):
    """A clean close snapshots ``last_seen_ms``; a crash rescans the log and counts the scanned
    batches as seen at the scan — later than they were, never earlier."""
    cfg = {"segment.bytes": "600"}
    log = open_log(cfg)
    log.append(old_pbatch(0), 0)
    clock.advance(DAY // 2)
    log.close() if shutdown == "clean" else log._crash()
    log = open_log(cfg)
    log.enforce_retention()
    assert log.append(old_pbatch(0), 0).duplicate
    clock.advance(DAY // 2 + 1)
    log.enforce_retention()
    assert len(log.producer_state) == (0 if shutdown == "clean" else 1)


def test_trim_evicts_the_least_recently_appended_not_the_oldest_timestamp(tmp_path):
    now = [T0]
    ps = ProducerStateManager(tmp_path, max_producers=2, clock=lambda: now[0])
    for pid, ts in ((1, T0), (2, WEEK_AGO), (3, T0 - DAY)):  # appended in this order
        ps.update(parse_header(make_batch(1, producer_id=pid, producer_epoch=0,
                                          base_sequence=0, ts=ts)), pid)
        now[0] += 1
    ps.trim()
    assert set(ps.producers) == {2, 3}
