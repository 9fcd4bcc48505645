"""Producer state of transactions: open/close by markers, fencing, snapshots v1/v2, LSO."""

from __future__ import annotations

import msgpack
import pytest
from crc32c import crc32c
from rafka.log.batch import CONTROL_ABORT, CONTROL_COMMIT, build_control_batch, parse_header
from rafka.log.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from rafka.log.producer_state import CompletedTxn, ProducerStateManager

from .conftest import T0, make_batch


def txn(pid, seq, *, epoch=0, n=1, transactional=True):
    return parse_header(make_batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                   transactional=transactional))


def marker(pid, commit, *, epoch=0):
    return parse_header(build_control_batch(pid, epoch, commit, 0, T0))


def mtype(commit):
    return CONTROL_COMMIT if commit else CONTROL_ABORT


@pytest.fixture
def ps(tmp_path):
    return ProducerStateManager(tmp_path)


def put(ps, h, offset, commit=None):
    ps.check(h, from_coordinator=h.is_control)
    return ps.update(h, offset, marker_type=None if commit is None else mtype(commit))


def test_open_and_close(ps):
    assert ps.first_unstable_offset() is None
    assert put(ps, txn(1, 0, n=3), 10) is None
    assert put(ps, txn(1, 3), 13) is None  # still the same transaction
    assert ps.open_transactions() == {1: 10} and ps.first_unstable_offset() == 10
    done = put(ps, marker(1, False), 20, commit=False)
    assert done == CompletedTxn(1, 10, 20, True, 21)
    assert ps.first_unstable_offset() is None
    assert put(ps, marker(1, True), 21, commit=True) is None  # duplicate marker: a no-op
    assert put(ps, txn(1, 4), 22) is None  # the next transaction opens at its first batch
    assert ps.open_transactions() == {1: 22}
    assert ps.describe()[0][:5] == (1, 0, 4, T0 + 2, 22)


def test_interleaved_producers_give_the_smallest_open_offset(ps):
    put(ps, txn(1, 0), 0)
    put(ps, txn(2, 0), 1)
    put(ps, txn(3, 0), 2)
    assert ps.first_unstable_offset() == 0
    done = put(ps, marker(2, True), 3, commit=True)
    assert done == CompletedTxn(2, 1, 3, False, 0)  # 1 is still open from 0
    done = put(ps, marker(1, False), 4, commit=False)
    assert done.last_stable_offset == 2 and ps.first_unstable_offset() == 2
    put(ps, marker(3, True), 5, commit=True)
    assert ps.first_unstable_offset() is None


def test_markers_only_from_coordinators(ps):
    with pytest.raises(InvalidRecordError, match="coordinators only"):
        ps.check(marker(1, True))
    with pytest.raises(InvalidRecordError):  # a transactional batch without producer
        ps.check(parse_header(make_batch(1, transactional=True)))


def test_marker_epoch_fences_and_resets_sequences(ps):
    put(ps, txn(1, 0, n=2), 0)
    put(ps, txn(1, 2), 2)
    # the coordinator aborts with a bumped epoch: closes and fences epoch 0
    done = put(ps, marker(1, False, epoch=1), 3, commit=False)
    assert done == CompletedTxn(1, 0, 3, True, 4)
    assert ps.producers[1].epoch == 1 and not ps.producers[1].batches
    with pytest.raises(InvalidProducerEpochError):  # the zombie's next batch
        ps.check(txn(1, 3, epoch=0))
    with pytest.raises(OutOfOrderSequenceError):  # the new incarnation restarts at 0
        ps.check(txn(1, 3, epoch=1))
    put(ps, txn(1, 0, epoch=1), 4)
    assert ps.open_transactions() == {1: 4}


def test_stale_marker_is_fenced(ps):
    put(ps, txn(1, 0, epoch=2), 0)
    with pytest.raises(InvalidProducerEpochError):
        ps.check(marker(1, False, epoch=1), from_coordinator=True)
    assert put(ps, marker(1, True, epoch=2), 1, commit=True) == CompletedTxn(1, 0, 1, False, 2)


def test_same_epoch_marker_keeps_the_sequence_window(ps):
    put(ps, txn(1, 0, n=2), 0)
    put(ps, marker(1, True), 2, commit=True)
    assert ps.check(txn(1, 0, n=2)) is not None  # a retry of the first batch: a duplicate
    assert ps.check(txn(1, 2)) is None  # the next sequence goes on


def test_non_transactional_batch_inside_a_transaction_is_refused(ps):
    put(ps, txn(1, 0), 0)
    with pytest.raises(InvalidTxnStateError):
        ps.check(txn(1, 1, transactional=False))


def test_sequence_less_transactional_batches_only_from_coordinators(ps):
    h = parse_header(make_batch(1, producer_id=5, producer_epoch=0, base_sequence=-1,
                                transactional=True))
    with pytest.raises(OutOfOrderSequenceError):  # a client must send sequences
        ps.check(h)
    ps.check(h, from_coordinator=True)
    ps.update(h, 0)
    ps.check(h, from_coordinator=True)  # no sequence bookkeeping: again fine
    ps.update(h, 1)
    assert ps.open_transactions() == {5: 0} and not ps.producers[5].batches
    put(ps, marker(5, True, epoch=1), 2, commit=True)
    with pytest.raises(InvalidProducerEpochError):  # the epoch is still checked
        ps.check(h, from_coordinator=True)


def test_overlay_sees_its_own_batches_and_commits_once(ps):
    ov = ps.begin()
    for off, h in ((0, txn(1, 0)), (1, txn(1, 1))):
        ps.check(h, ov)
        ps.update(h, off, ov)
    assert ps.first_unstable_offset() is None  # not committed yet
    h = marker(1, False)
    ps.check(h, ov, from_coordinator=True)
    done = ps.update(h, 2, ov, marker_type=CONTROL_ABORT)
    assert done == CompletedTxn(1, 0, 2, True, 3)
    ps.commit(ov)
    assert ps.first_unstable_offset() is None and ps.producers[1].batches[-1].last_seq == 1


def test_overlay_last_stable_offset_counts_committed_and_pending(ps):
    put(ps, txn(1, 0), 0)
    ov = ps.begin()
    ps.update(txn(2, 0), 1, ov)
    ps.update(txn(3, 0), 2, ov)
    done = ps.update(marker(2, False), 3, ov, marker_type=CONTROL_ABORT)
    assert done.last_stable_offset == 0  # producer 1, committed earlier, is still open
    ps.update(marker(1, True), 4, ov, marker_type=CONTROL_COMMIT)
    done = ps.update(marker(3, False), 5, ov, marker_type=CONTROL_ABORT)
    assert done.last_stable_offset == 6


def test_open_transactions_survive_trim_and_expire(tmp_path):
    ps = ProducerStateManager(tmp_path, max_producers=2, expiration_ms=1000, clock=lambda: T0)
    put(ps, txn(1, 0), 0)  # oldest, but open
    ps.update(txn(2, 0, transactional=False), 1, now_ms=T0 + 5)
    ps.update(txn(3, 0, transactional=False), 2, now_ms=T0 + 6)
    ps.trim()
    assert set(ps.producers) == {1, 3}
    assert ps.expire(T0 + 10_000) == 1 and set(ps.producers) == {1}
    assert ps.first_unstable_offset() == 0


def test_snapshot_round_trip(tmp_path):
    ps = ProducerStateManager(tmp_path)
    put(ps, txn(1, 0), 0)
    put(ps, txn(2, 0), 1)
    put(ps, marker(2, True), 2, commit=True)
    ps.write_snapshot(3)
    again = ProducerStateManager(tmp_path)
    assert again.load_latest_snapshot(3) == 3
    assert again.open_transactions() == {1: 0}
    assert again.producers == ps.producers
    assert msgpack.unpackb((tmp_path / f"{3:020d}.snapshot").read_bytes()[4:])[0] == 4


def test_version_3_snapshot_loads_as_seen_at_the_load(tmp_path):
    """Versions 1-3 have no broker time: the producers count as seen when the snapshot loads
    (their batch timestamps, client time, are never used for expiry)."""
    body = msgpack.packb([3, 7, [[9, 2, 0, [[0, 1, 5, 6, 0]], -1, 4]]])
    (tmp_path / f"{7:020d}.snapshot").write_bytes(crc32c(body).to_bytes(4, "big") + body)
    ps = ProducerStateManager(tmp_path, expiration_ms=1000, clock=lambda: T0)
    assert ps.load_latest_snapshot(100) == 7
    e = ps.producers[9]
    assert (e.coordinator_epoch, e.last_timestamp, e.last_seen_ms) == (4, 0, T0)
    assert ps.expire(T0 + 999) == 0 and ps.expire(T0 + 1001) == 1


def test_version_2_snapshot_still_loads(tmp_path):
    body = msgpack.packb([2, 7, [[9, 2, T0, [[0, 1, 5, 6, T0]], 5]]])
    (tmp_path / f"{7:020d}.snapshot").write_bytes(crc32c(body).to_bytes(4, "big") + body)
    ps = ProducerStateManager(tmp_path)
    assert ps.load_latest_snapshot(100) == 7
    e = ps.producers[9]
    assert (e.epoch, e.txn_first_offset, e.coordinator_epoch) == (2, 5, -1)


def test_version_1_snapshot_still_loads(tmp_path):
    body = msgpack.packb([1, 7, [[9, 2, T0, [[0, 1, 5, 6, T0]]]]])
    (tmp_path / f"{7:020d}.snapshot").write_bytes(crc32c(body).to_bytes(4, "big") + body)
    ps = ProducerStateManager(tmp_path)
    assert ps.load_latest_snapshot(100) == 7
    e = ps.producers[9]
    assert (e.epoch, e.txn_first_offset, e.batches[-1].last_seq) == (2, -1, 1)
    assert ps.first_unstable_offset() is None
