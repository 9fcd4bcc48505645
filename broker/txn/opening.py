"""Whether a producer may open a transaction on a partition this broker leads (KIP-890 part 1).

Theory of operation
-------------------
Before anything of a producer's *new* transaction is appended to a partition — a transactional
data batch from PRODUCE (``broker/handlers/data.py``), or a transaction's offsets from
TXN_OFFSET_COMMIT into the group's ``__consumer_offsets`` partition (``broker/groups/offsets.py``)
— the leader asks the id's coordinator, through a ``TxnVerifier``, whether that producer id and
epoch has an Ongoing transaction holding the partition. :func:`opens_transaction` says whether
an append would open one (nothing of this producer and epoch is open there, and no verified
guard covers it); :func:`verify_opening` asks and keeps the answer in the partition's
``VerificationGuard`` for the producer (``broker/partition.py``):

* the guard is put in place *before* the question, and the answer counts only if that very guard
  is still there when it comes back: a marker for the producer removes it, so a verification
  that raced the end of the transaction never opens a new one;
* a ``NONE`` answer names the transaction (``txn_seq``), and the guard keeps it: a late
  WRITE_TXN_MARKERS of an earlier transaction of the same producer id and epoch is then refused
  (``Partition.append_marker``) instead of closing this one with the old outcome.

PRODUCE answers a refusal per partition; TXN_OFFSET_COMMIT (one group partition) as the
request's error. Either way nothing is appended unless the code is ``NONE``.
"""

from __future__ import annotations

from typing import Protocol

from rafka.broker.error_map import wire_error
from rafka.broker.partition import Partition, VerificationGuard
from rafka.broker.txn.state import Verdict
from rafka.wire.errors import ErrorCode

__all__ = ["TxnVerifier", "opens_transaction", "verify_opening"]


class TxnVerifier(Protocol):
    """May ``producer_id`` with ``producer_epoch`` open a transaction on (topic, partition)?"""

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     topic: str, partition: int) -> Verdict:
        """``NONE`` if the id's coordinator holds an ongoing transaction of this producer id and
        epoch that includes the partition (with that transaction's number); otherwise the code
        this partition's answer gets: ``INVALID_TXN_STATE`` when the coordinator says no, a
        retriable code (``NOT_COORDINATOR``, ``COORDINATOR_NOT_AVAILABLE``, …) when it could
        not be asked. May raise ``RafkaError`` instead of answering."""
        ...


def opens_transaction(p: Partition, producer_id: int, producer_epoch: int) -> bool:
    """Would a transactional append of this producer id and epoch open a transaction on ``p``
    that no verified guard covers?"""
    entry = p.log.producer_state.producers.get(producer_id)
    if entry is not None and entry.txn_first_offset >= 0 and entry.epoch == producer_epoch:
        return False  # its transaction is open here: nothing to open
    guard = p.txn_verified.get(producer_id)
    return not (guard is not None and guard.verified and guard.epoch == producer_epoch)


async def verify_opening(verifier: TxnVerifier | None, transactional_id: str, p: Partition,
                         producer_id: int, producer_epoch: int) -> tuple[ErrorCode, str]:
    """Ask the coordinator (module docstring); ``(NONE, "")`` when the producer may open its
    transaction on ``p`` now, else the code and a message for the caller's answer."""
    pid = producer_id
    guard = p.txn_verified.get(pid)
    if guard is None or guard.epoch != producer_epoch:
        guard = p.txn_verified[pid] = VerificationGuard(producer_epoch)
    message = ""
    txn_seq = guard.txn_seq
    if verifier is None:
        code, message = ErrorCode.INVALID_TXN_STATE, f"{p.name}: no transaction verifier"
    elif guard.verified:
        code = ErrorCode.NONE
    else:
        try:
            verdict = await verifier.verify(transactional_id, pid, producer_epoch,
                                            p.topic, p.partition)
            code, txn_seq = ErrorCode(verdict.code), verdict.txn_seq
        except Exception as exc:  # noqa: BLE001 - a coordinator failure answers this partition
            code, message = wire_error(exc)
    if p.txn_verified.get(pid) is not guard:
        return ErrorCode.INVALID_TXN_STATE, (
            f"{p.name}: a marker for producer {pid} arrived during its verification")
    if code:
        del p.txn_verified[pid]
        return code, message or (
            f"{p.name}: producer {pid} may not open a transaction here: {code.name}")
    guard.verified, guard.txn_seq = True, txn_seq  # a late older marker is refused now
    return ErrorCode.NONE, ""
