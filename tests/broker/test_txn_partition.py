"""The partition leader's transaction bookkeeping without a server: last stable offset, the
verification guard and the payload scan of PRODUCE (docs/transactions.md, "Partition leader")."""

from __future__ import annotations

from pathlib import Path

from rafka.broker.events import EventLog
from rafka.broker.handlers.data import txn_flags
from rafka.broker.partition import Partition, VerificationGuard
from rafka.log.batch import CONTROL_BIT, TRANSACTIONAL_BIT, build_batch, build_control_batch
from rafka.log.config import LogConfig
from rafka.log.partition_log import PartitionLog
from rafka.metadata.image import PartitionRegistration

PID, EPOCH = 7, 0
REG = PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=3,
                            partition_epoch=5)


def _leader(d: Path) -> Partition:
    p = Partition("t", 0, PartitionLog.open(d, LogConfig()), 1, EventLog(None, 1),
                  fsync_acks=False, min_insync_replicas=1)
    p.apply_registration(REG)
    return p


def txn_batch(seq: int, *values: bytes, pid: int = PID, epoch: int = EPOCH) -> bytes:
    return build_batch([(None, v, [], 1000) for v in values], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, transactional=True)


def plain(*values: bytes) -> bytes:
    return build_batch([(None, v, [], 1000) for v in values])


def test_lso_holds_at_the_open_transaction_until_the_hw_passes_its_marker(tmp_path: Path) -> None:
    p = _leader(tmp_path)
    p.append_as_leader(plain(b"a"), acks=-1)                 # offset 0
    p.append_as_leader(txn_batch(0, b"t1", b"t2"), acks=-1)  # offsets 1-2 open a transaction
    p.append_as_leader(plain(b"b"), acks=-1)                 # offset 3
    p.on_follower_fetch(2, 4)
    assert (p.high_watermark, p.last_stable_offset) == (4, 1)
    info = p.append_marker(PID, EPOCH, True, coordinator_epoch=0)  # offset 4
    assert info.base_offset == 4 and p.log.first_unstable_offset() is None
    # closed in the producer state, but its marker is not replicated: still unstable
    assert (p.high_watermark, p.last_stable_offset) == (4, 1)
    sl = p.read(0, 1 << 20, consumer=True, committed=True)
    assert sl is not None and sl.last_offset == 0
    sl.close()
    p.on_follower_fetch(2, 5)
    assert (p.high_watermark, p.last_stable_offset) == (5, 5)


def test_a_truncated_marker_reopens_the_transaction(tmp_path: Path) -> None:
    p = _leader(tmp_path)
    p.append_as_leader(txn_batch(0, b"t"), acks=-1)
    p.on_follower_fetch(2, 1)
    p.append_marker(PID, EPOCH, False, coordinator_epoch=0)
    p.apply_registration(PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=2,
                                               leader_epoch=4, partition_epoch=6))
    p.log.truncate_to(1)
    p.on_truncated(1)
    assert p.log.first_unstable_offset() == 0 and p.last_stable_offset == 0


def test_a_marker_clears_the_producers_verification_guard(tmp_path: Path) -> None:
    p = _leader(tmp_path)
    p.txn_verified[PID] = guard = VerificationGuard(EPOCH)
    guard.verified = True
    p.txn_verified[99] = VerificationGuard(EPOCH)
    p.append_marker(PID, EPOCH, True, coordinator_epoch=0)
    assert PID not in p.txn_verified and 99 in p.txn_verified


def test_a_role_change_clears_every_guard(tmp_path: Path) -> None:
    p = _leader(tmp_path)
    p.txn_verified[PID] = VerificationGuard(EPOCH)
    p.apply_registration(PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=2,
                                               leader_epoch=4, partition_epoch=6))
    assert p.txn_verified == {}


def test_txn_flags_reads_every_batch_of_a_payload() -> None:
    idem = build_batch([(None, b"x", [], 1000)], producer_id=3, producer_epoch=0, base_sequence=0)
    marker = build_control_batch(PID, EPOCH, True, 0, 1000)
    assert txn_flags(plain(b"a")) == 0 and txn_flags(idem) == 0
    assert txn_flags(txn_batch(0, b"a")) == TRANSACTIONAL_BIT
    assert txn_flags(plain(b"a") + txn_batch(0, b"b")) == TRANSACTIONAL_BIT  # not only the first
    assert txn_flags(plain(b"a") + marker) == TRANSACTIONAL_BIT | CONTROL_BIT
    # malformed payloads never raise here (the log refuses them whole)
    assert txn_flags(b"") == 0 and txn_flags(marker[:30]) == 0
    assert txn_flags(b"\xff" * 70) == TRANSACTIONAL_BIT | CONTROL_BIT  # a negative length stops
