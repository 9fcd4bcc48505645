"""PartitionLog transactions: markers, first unstable offset, aborted-transaction index,
followers, recovery, truncation and retention."""

from __future__ import annotations

import pytest
from rafka.log.batch import build_control_batch
from rafka.log.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    TransactionCoordinatorFencedError,
)
from rafka.log.partition_log import CLEAN_SHUTDOWN_FILE, PartitionLog
from rafka.log.txn_index import ENTRY_SIZE, AbortedTxn

from .conftest import T0, make_batch

SMALL = {"segment.bytes": "400", "file.delete.delay.ms": "0"}


class Producers:
    """Writes transactional batches and markers to a log, keeping each producer's sequence."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.seq: dict[int, int] = {}
        self.epoch: dict[int, int] = {}

    def send(self, pid: int, n: int = 1, *, key: bytes = b"k", value: bytes = b"v") -> int:
        seq = self.seq.get(pid, 0)
        info = self.log.append(
            make_batch(n, key=key, value=value, producer_id=pid,
                       producer_epoch=self.epoch.get(pid, 0), base_sequence=seq,
                       transactional=True), 0)
        self.seq[pid] = seq + n
        return info.base_offset

    def end(self, pid: int, commit: bool, *, epoch: int | None = None) -> int:
        if epoch is not None and epoch != self.epoch.get(pid, 0):
            self.epoch[pid] = epoch
            self.seq[pid] = 0
        marker = build_control_batch(pid, self.epoch.get(pid, 0), commit, 1, T0)
        return self.log.append(marker, 0, from_coordinator=True).base_offset


def answers(log: PartitionLog) -> tuple:
    """What a read_committed fetcher learns, over every window of the log."""
    leo = log.log_end_offset
    return (log.first_unstable_offset(), log.producer_state.open_transactions(),
            [log.collect_aborted(a, b) for a in range(log.log_start_offset, leo + 1, 3)
             for b in range(a, leo + 2, 4)])


def test_lso_and_aborted_list_through_commit_and_abort(open_log):
    log = open_log()
    p = Producers(log)
    a0 = p.send(1, 2)
    b0 = p.send(2)
    assert log.first_unstable_offset() == a0 == 0
    p.send(1)
    m1 = p.end(1, commit=False)
    assert log.first_unstable_offset() == b0
    assert log.aborted_transactions(0, 100) == [AbortedTxn(1, a0, m1, b0)]
    m2 = p.end(2, commit=True)
    assert log.first_unstable_offset() is None
    assert log.collect_aborted(0, 100) == [(1, 0)]
    assert log.collect_aborted(m1 + 1, 100) == []  # ends before the fetch
    assert log.collect_aborted(0, a0) == []  # starts at the upper bound
    assert log.collect_aborted(m1, m1 + 1) == [(1, 0)]
    c0 = p.send(2)
    assert c0 == m2 + 1 and log.first_unstable_offset() == c0


def test_client_payload_with_a_marker_is_refused_and_writes_nothing(open_log):
    log = open_log()
    Producers(log).send(1)
    payload = make_batch(1) + build_control_batch(1, 0, True, 0, T0)
    with pytest.raises(InvalidRecordError, match="coordinators only"):
        log.append(payload, 0)
    assert log.log_end_offset == 1 and log.first_unstable_offset() == 0
    log.append(build_control_batch(1, 5, False, 0, T0), 0, from_coordinator=True)  # fences 0
    assert log.collect_aborted(0, 10) == [(1, 0)]
    with pytest.raises(InvalidProducerEpochError):  # the coordinator path checks the epoch
        log.append(build_control_batch(1, 4, True, 0, T0), 0, from_coordinator=True)
    with pytest.raises(InvalidProducerEpochError):
        log.append(make_batch(1, producer_id=1, producer_epoch=0, base_sequence=1,
                              transactional=True), 0)


def test_coordinator_offset_commit_batches_skip_sequences(open_log):
    log = open_log()
    batch = make_batch(1, producer_id=3, producer_epoch=0, base_sequence=-1, transactional=True)
    log.append(batch, 0, from_coordinator=True)
    log.append(batch, 0, from_coordinator=True)
    assert log.first_unstable_offset() == 0
    log.append(build_control_batch(3, 0, True, 0, T0), 0, from_coordinator=True)
    assert log.first_unstable_offset() is None and log.collect_aborted(0, 10) == []


def test_collect_aborted_across_segment_rolls(open_log):
    log = open_log(SMALL)
    p = Producers(log)
    expect = []
    for round_ in range(6):
        first = p.send(1, 2, value=b"x" * 60)
        p.send(2, value=b"y" * 60)
        p.send(1, value=b"z" * 60)
        p.end(2, commit=True)
        last = p.end(1, commit=round_ % 2 == 1)
        if round_ % 2 == 0:
            expect.append((first, last))
    assert len(log.segments) >= 4
    leo = log.log_end_offset
    assert log.collect_aborted(0, leo) == [(1, f) for f, _ in expect]
    for f, last in expect:
        # a window inside one aborted transaction finds it, wherever its marker is
        assert log.collect_aborted(f + 1, f + 2) == [(1, f)]
        assert (1, f) not in log.collect_aborted(last + 1, leo)
    # the entries sit in the segment of their marker
    for seg in log.segments:
        assert all(seg.base_offset <= e.last_offset < seg.next_offset
                   for e in seg.txn_index.entries)


def test_follower_applies_the_same_bookkeeping(open_log):
    leader = open_log(SMALL, name="leader")
    p = Producers(leader)
    p.send(1, value=b"a" * 80)
    p.send(2, value=b"b" * 80)
    p.end(1, commit=False)
    p.send(1, value=b"c" * 80)
    follower = open_log(SMALL, name="follower")
    pos = 0
    while pos < leader.log_end_offset:
        data = leader.read_bytes(pos, 150)
        pos = follower.append_as_follower(data).last_offset + 1
    assert answers(follower) == answers(leader)
    assert follower.first_unstable_offset() == 1


def test_index_rebuilt_after_unclean_open(open_log, tmp_path):
    log = open_log(SMALL)
    p = Producers(log)
    for i in range(5):
        p.send(1, value=b"a" * 50)
        p.send(2, value=b"b" * 50)
        p.end(1, commit=i % 2 == 0)
        p.end(2, commit=False)
    p.send(3)
    before = answers(log)
    assert any(before[2]) and before[0] is not None
    log.close()
    d = tmp_path / "p"
    for f in d.glob("*.txnindex"):
        f.unlink()
    (d / CLEAN_SHUTDOWN_FILE).unlink()
    again = open_log(SMALL)
    assert answers(again) == before
    assert all(s.txn_index.path.exists() for s in again.segments)


def test_clean_reopen_and_crash_keep_the_answers(open_log):
    log = open_log(SMALL)
    p = Producers(log)
    p.send(1, value=b"a" * 100)
    p.send(2, value=b"b" * 100)
    p.end(1, commit=False)
    p.send(2, value=b"c" * 100)
    before = answers(log)
    log.close()
    log = open_log(SMALL)
    assert answers(log) == before
    log.flush()
    log._crash()
    assert answers(open_log(SMALL)) == before


def test_torn_index_tail_is_cut(open_log, tmp_path):
    log = open_log()
    p = Producers(log)
    p.send(1)
    p.end(1, commit=False)
    log.close()
    path = tmp_path / "p" / f"{0:020d}.txnindex"
    path.write_bytes(path.read_bytes() + b"\x00" * 11)
    log = open_log()
    assert log.collect_aborted(0, 10) == [(1, 0)]
    assert path.stat().st_size == ENTRY_SIZE


def test_truncate_below_a_marker_reopens_the_transaction(open_log):
    log = open_log(SMALL)
    p = Producers(log)
    first = p.send(1, value=b"a" * 100)
    p.send(1, value=b"a" * 100)
    p.send(2, value=b"b" * 100)
    m = p.end(1, commit=False)
    p.end(2, commit=True)
    assert len(log.segments) > 1 and log.first_unstable_offset() is None
    log.truncate_to(m)
    assert log.log_end_offset == m
    assert log.producer_state.open_transactions() == {1: first, 2: first + 2}
    assert log.collect_aborted(0, 100) == []
    assert all(not s.txn_index.entries for s in log.segments)
    # the coordinator re-sends the marker to the new leader: same result as before
    m2 = p.end(1, commit=False)
    assert m2 == m and log.collect_aborted(0, 100) == [(1, first)]
    log.close()
    assert open_log(SMALL).collect_aborted(0, 100) == [(1, first)]


def test_retention_stops_at_an_open_transaction(open_log, clock):
    log = open_log({**SMALL, "retention.bytes": "0", "retention.ms": "-1"})
    p = Producers(log)
    for _ in range(3):
        log.append(make_batch(2, value=b"x" * 150), 0)
    open_at = p.send(7, value=b"t" * 150)
    for _ in range(6):
        log.append(make_batch(2, value=b"x" * 150), 0)
    assert len(log.segments) > 4
    log.enforce_retention(clock.t)
    assert log.log_start_offset <= open_at
    assert log.read_bytes(open_at, 1 << 20)  # the open transaction's batch is still there
    p.end(7, commit=True)
    log.enforce_retention(clock.t)
    assert log.log_start_offset > open_at and len(log.segments) == 1


def test_describe_producers(open_log):
    log = open_log()
    p = Producers(log)
    p.send(4, 3)
    log.append(make_batch(1, producer_id=5, producer_epoch=2, base_sequence=0), 0)
    infos = {i.producer_id: i for i in log.describe_producers()}
    assert (infos[4].last_sequence, infos[4].txn_first_offset) == (2, 0)
    assert (infos[5].producer_epoch, infos[5].txn_first_offset) == (2, -1)


def test_a_deposed_coordinators_marker_cannot_close_the_current_transaction(open_log, tmp_path):
    """Txn chaos seed 5: the coordinator of producer 1 (coordinator epoch 0) was cut off with
    transaction N decided; its successor (epoch 1) wrote N's markers, and the producer's next
    transaction N+1 opened here. After the heal the deposed coordinator delivered its own
    marker for N: it must not close N+1 (a COMMIT there would commit N+1 here even if N+1 then
    aborts). As Kafka, a marker of an older coordinator epoch than the producer's last one is
    TRANSACTION_COORDINATOR_FENCED — on the leader, and after a restart (recovery, snapshot);
    an operator's abort (-1) is not fenced."""
    log = open_log(SMALL)
    p = Producers(log)

    def marker(commit: bool, cepoch: int) -> int:
        return log.append(build_control_batch(1, 0, commit, cepoch, T0), 0,
                          from_coordinator=True).base_offset

    p.send(1)                      # N, decided by epoch 0 then finished by epoch 1
    marker(True, 1)
    n1 = p.send(1)                 # N+1, open
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(True, 0)            # the deposed coordinator's late marker for N
    assert log.producer_state.open_transactions() == {1: n1}
    follower = open_log(SMALL, name="follower")
    follower.append_as_follower(log.read_bytes(0, 1 << 20))
    assert follower.producer_state.producers[1].coordinator_epoch == 1
    log.close()
    log = open_log(SMALL)          # from the snapshot of a clean shutdown
    assert log.producer_state.producers[1].coordinator_epoch == 1
    log._crash()
    for f in (tmp_path / "p").glob("*.snapshot"):
        f.unlink()
    log = open_log(SMALL)          # rebuilt from the batches
    assert log.producer_state.producers[1].coordinator_epoch == 1
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append(build_control_batch(1, 0, True, 0, T0), 0, from_coordinator=True)
    end = log.append(build_control_batch(1, 0, False, -1, T0), 0, from_coordinator=True)
    assert log.producer_state.open_transactions() == {}
    assert log.collect_aborted(0, end.last_offset + 1) == [(1, n1)]
