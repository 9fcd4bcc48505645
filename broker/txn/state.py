"""The transaction coordinator's state machine and its ``__transaction_state`` record, pure.

Theory of operation
-------------------
One :class:`TxnMetadata` per transactional id (docs/transactions.md, "Coordinator state
machine")::

    Empty ──add partitions──► Ongoing ──END_TXN commit──► PrepareCommit ──markers──► CompleteCommit
      ▲                        │   └─END_TXN abort / timeout / init fence──► PrepareAbort ──► CompleteAbort
      └──────── begin (next ADD_PARTITIONS) ◄───────────────────────────────────────────┘

Every function here is ``(metadata, request fields, now_ms) -> new metadata`` or raises a named
:class:`~wire.errors.RafkaError`; none does I/O or reads a clock. The coordinator
(``broker/txn/coordinator.py``) appends the returned value with ``acks=all`` and only then installs
it, so a transition that was not made durable never happened.

Epoch rules (fencing):

* the request's epoch equals the id's epoch → it is the current incarnation;
* it equals ``last_producer_epoch`` while the id is (being) aborted → the coordinator aborted the
  transaction on its timeout: ``TRANSACTION_TIMED_OUT`` (the producer may re-initialise with its
  old epoch, KIP-360, and go on);
* anything else → ``PRODUCER_FENCED`` (a newer incarnation took the id); a different producer id
  → ``INVALID_PRODUCER_ID_MAPPING``.

``last_producer_epoch`` is the epoch the previous owner of the id used when the coordinator bumped
it on that owner's behalf (timeout abort, INIT_PRODUCER_ID with the expected epoch); an
INIT_PRODUCER_ID from a new incarnation (no expected epoch) resets it to -1, so a zombie is fenced.
Epochs are int16: a bump past 32767 needs a new producer id (``needs_new_producer_id``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Final, NamedTuple

import msgpack
from rafka.wire.errors import ErrorCode, error_for

__all__ = [
    "COMPLETE_STATES",
    "DEFAULT_TXN_TIMEOUT_MS",
    "MAX_PRODUCER_EPOCH",
    "MAX_TXN_TIMEOUT_MS",
    "PREPARE_STATES",
    "RECORD_VERSION",
    "EndStep",
    "TxnMetadata",
    "TxnState",
    "Verdict",
    "add_partitions",
    "begin_init",
    "check_producer",
    "complete",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "end_txn",
    "fence_abort",
    "init_producer",
    "needs_new_producer_id",
    "timed_out",
    "timeout_abort",
    "validate_timeout",
    "verify_partitions",
]

MAX_PRODUCER_EPOCH: Final = 32767
DEFAULT_TXN_TIMEOUT_MS: Final = 60_000
MAX_TXN_TIMEOUT_MS: Final = 900_000
RECORD_VERSION: Final = 1

TP = tuple[str, int]


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5

    @property
    def wire_name(self) -> str:
        """Kafka's spelling (``PrepareCommit``), used by DESCRIBE/LIST_TRANSACTIONS."""
        return "".join(w.capitalize() for w in self.name.split("_"))

    @classmethod
    def from_wire_name(cls, name: str) -> TxnState:
        for s in cls:
            if s.wire_name == name:
                return s
        raise error_for(ErrorCode.INVALID_REQUEST, f"unknown transaction state {name!r}")


COMPLETE_STATES: Final = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
PREPARE_STATES: Final = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[TP] = frozenset()
    txn_start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = -1
    # the number of this id's transactions begun so far: the current (or last) one's number,
    # carried by its markers and by the answers to a partition leader's verification, so a
    # leader can tell a late marker of an ended transaction from the next transaction's
    # (same producer id and epoch; broker/handlers/txn_data.py). Never goes down: a new
    # incarnation (epoch bump) keeps counting.
    txn_seq: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.producer_epoch <= MAX_PRODUCER_EPOCH:
            raise ValueError(f"producer epoch {self.producer_epoch} out of range")
        if self.producer_id < 0:
            raise ValueError(f"producer id {self.producer_id} must be >= 0")

    @property
    def is_prepared(self) -> bool:
        return self.state in PREPARE_STATES

    @property
    def commit(self) -> bool:
        """The decided outcome of a Prepare*/Complete* transaction."""
        return self.state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)


class Verdict(NamedTuple):
    """A coordinator's answer to a partition leader's verification (KIP-890 part 1): the code,
    and with ``NONE`` the number of the Ongoing transaction (``TxnMetadata.txn_seq``; -1 when
    the coordinator did not say)."""

    code: ErrorCode
    txn_seq: int = -1


class EndStep(Enum):
    """What END_TXN asks of the coordinator."""

    PREPARE = "prepare"  # append the returned Prepare* value, then write markers, then complete
    WAIT = "wait"  # the same outcome is being completed: wait for it
    DONE = "done"  # the same outcome is complete: answer success


# --------------------------------------------------------------------------- record codec


def encode_key(transactional_id: str) -> bytes:
    return msgpack.packb([transactional_id], use_bin_type=True)


def decode_key(data: bytes) -> str:
    (tid,) = msgpack.unpackb(data, raw=False)
    if not isinstance(tid, str):
        raise ValueError("transactional id must be a string")
    return tid


def encode_value(md: TxnMetadata | None) -> bytes | None:
    if md is None:
        return None
    return msgpack.packb(
        [RECORD_VERSION, md.producer_id, md.producer_epoch, md.last_producer_epoch, md.timeout_ms,
         int(md.state), [[t, p] for t, p in sorted(md.partitions)], md.txn_start_ms,
         md.last_update_ms, md.txn_seq],
        use_bin_type=True,
    )


def decode_value(transactional_id: str, data: bytes | None) -> TxnMetadata | None:
    """The metadata of a record (``None``: the id was removed). Raises ValueError when malformed."""
    if data is None:
        return None
    v = msgpack.unpackb(data, raw=False)
    if not isinstance(v, list) or len(v) < 9 or v[0] != RECORD_VERSION:
        raise ValueError(f"unknown __transaction_state value for {transactional_id!r}")
    _, pid, epoch, last, timeout, state, parts, start, update = v[:9]
    seq = int(v[9]) if len(v) > 9 else 0  # a record written before txn_seq existed: 0
    return TxnMetadata(transactional_id, int(pid), int(epoch), int(timeout), TxnState(state),
                       frozenset((str(t), int(p)) for t, p in parts), int(start), int(update),
                       int(last), seq)


# --------------------------------------------------------------------------- checks


def check_producer(md: TxnMetadata | None, producer_id: int, producer_epoch: int) -> TxnMetadata:
    """``md`` if (producer id, epoch) is its current incarnation, else the named error."""
    if md is None:
        raise error_for(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                        "no producer id is assigned to this transactional id (INIT_PRODUCER_ID first)")
    if producer_id != md.producer_id:
        raise error_for(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                        f"producer id {producer_id} is not the id's producer id {md.producer_id}")
    if producer_epoch == md.producer_epoch:
        return md
    if (producer_epoch == md.last_producer_epoch
            and md.state in (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)):
        raise error_for(ErrorCode.TRANSACTION_TIMED_OUT,
                        f"the coordinator aborted the transaction of epoch {producer_epoch} "
                        f"after its timeout of {md.timeout_ms} ms")
    raise error_for(ErrorCode.PRODUCER_FENCED,
                    f"producer epoch {producer_epoch} is fenced by epoch {md.producer_epoch}")


def _check_not_pending(md: TxnMetadata) -> None:
    if md.is_prepared:
        raise error_for(ErrorCode.CONCURRENT_TRANSACTIONS,
                        f"the previous transaction is still completing ({md.state.wire_name})")


def validate_timeout(timeout_ms: int, max_timeout_ms: int = MAX_TXN_TIMEOUT_MS) -> int:
    if not 0 < timeout_ms <= max_timeout_ms:
        raise error_for(ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                        f"transaction timeout {timeout_ms} ms is not in (0, {max_timeout_ms}]")
    return timeout_ms


# --------------------------------------------------------------------------- INIT_PRODUCER_ID


def needs_new_producer_id(md: TxnMetadata | None) -> bool:
    """True when INIT_PRODUCER_ID must get a fresh producer id from the controller."""
    return md is None or md.producer_epoch >= MAX_PRODUCER_EPOCH


def begin_init(md: TxnMetadata | None, expected: tuple[int, int] | None) -> TxnState | None:
    """Validate an INIT_PRODUCER_ID against ``md``; returns the state the coordinator must act on
    first (Ongoing: fence and abort; Prepare*: let it complete) or None (ready to bump).

    ``expected``: the (producer id, epoch) a producer re-initialising after an error sends
    (KIP-360); it must be the id's current or last incarnation."""
    if md is None:
        return None
    if expected is not None and expected[0] >= 0:
        pid, epoch = expected
        if pid != md.producer_id:
            raise error_for(ErrorCode.PRODUCER_FENCED,
                            f"producer id {pid} no longer owns this transactional id")
        if epoch not in (md.producer_epoch, md.last_producer_epoch) or epoch < 0:
            raise error_for(ErrorCode.PRODUCER_FENCED,
                            f"producer epoch {epoch} is fenced by epoch {md.producer_epoch}")
    if md.state in COMPLETE_STATES:
        return None
    return md.state


def init_producer(md: TxnMetadata | None, transactional_id: str, timeout_ms: int, now_ms: int, *,
                  expected: tuple[int, int] | None = None,
                  new_producer_id: int | None = None) -> TxnMetadata:
    """Empty/Complete* (or unknown id) → Empty with the next epoch (or a new producer id).

    A retry from the producer that already got the current epoch (``expected`` epoch equals
    ``last_producer_epoch``) returns the current value unchanged."""
    if begin_init(md, expected) is not None:
        assert md is not None
        raise error_for(ErrorCode.CONCURRENT_TRANSACTIONS,
                        f"transaction in state {md.state.wire_name} must end first")
    if md is not None and expected is not None and expected[0] >= 0:
        if expected[1] == md.last_producer_epoch and expected[1] != md.producer_epoch:
            return dataclasses.replace(md, timeout_ms=timeout_ms, last_update_ms=now_ms)
    if needs_new_producer_id(md):
        if new_producer_id is None:
            raise ValueError("a new producer id is needed (needs_new_producer_id)")
        return TxnMetadata(transactional_id, new_producer_id, 0, timeout_ms, TxnState.EMPTY,
                           frozenset(), -1, now_ms, -1)
    assert md is not None
    last = md.producer_epoch if expected is not None and expected[0] >= 0 else -1
    return dataclasses.replace(md, producer_epoch=md.producer_epoch + 1, timeout_ms=timeout_ms,
                               state=TxnState.EMPTY, partitions=frozenset(), txn_start_ms=-1,
                               last_update_ms=now_ms, last_producer_epoch=last)


def fence_abort(md: TxnMetadata, now_ms: int) -> TxnMetadata:
    """INIT_PRODUCER_ID meets an Ongoing transaction: bump the epoch (fences the old incarnation
    on every partition through the abort markers) and abort."""
    if md.state is not TxnState.ONGOING:
        raise error_for(ErrorCode.INVALID_TXN_STATE, f"cannot fence in state {md.state.wire_name}")
    return _abort_bumped(md, now_ms, last=-1)


def _abort_bumped(md: TxnMetadata, now_ms: int, *, last: int) -> TxnMetadata:
    epoch = min(md.producer_epoch + 1, MAX_PRODUCER_EPOCH)
    return dataclasses.replace(md, producer_epoch=epoch, state=TxnState.PREPARE_ABORT,
                               last_update_ms=now_ms, last_producer_epoch=last)


# --------------------------------------------------------------------------- ADD_PARTITIONS / OFFSETS


def add_partitions(md: TxnMetadata | None, producer_id: int, producer_epoch: int,
                   partitions: Iterable[TP], now_ms: int) -> TxnMetadata:
    """Empty/Complete* → Ongoing with ``partitions`` (the transaction begins now); Ongoing → add."""
    md = check_producer(md, producer_id, producer_epoch)
    _check_not_pending(md)
    new = frozenset(partitions)
    if md.state is TxnState.ONGOING:
        if new <= md.partitions:
            return md  # nothing to write (a retry)
        return dataclasses.replace(md, partitions=md.partitions | new, last_update_ms=now_ms)
    return dataclasses.replace(md, state=TxnState.ONGOING, partitions=new, txn_start_ms=now_ms,
                               last_update_ms=now_ms, txn_seq=md.txn_seq + 1)


def verify_partitions(md: TxnMetadata | None, producer_id: int, producer_epoch: int,
                      partitions: Iterable[TP]) -> dict[TP, ErrorCode]:
    """ADD_PARTITIONS_TO_TXN ``verify_only`` (from a partition leader): NONE per partition of an
    Ongoing transaction of exactly this (producer id, epoch), else INVALID_TXN_STATE. (The
    answer also names ``md.txn_seq``: ``TxnCoordinator.verify``.)"""
    ok = (md is not None and md.state is TxnState.ONGOING and md.producer_id == producer_id
          and md.producer_epoch == producer_epoch)
    return {tp: ErrorCode.NONE if ok and md is not None and tp in md.partitions
            else ErrorCode.INVALID_TXN_STATE for tp in partitions}


# --------------------------------------------------------------------------- END_TXN, timeout, markers


def end_txn(md: TxnMetadata | None, producer_id: int, producer_epoch: int, commit: bool,
            now_ms: int) -> tuple[EndStep, TxnMetadata]:
    """Ongoing → Prepare* (``EndStep.PREPARE``); a retry of the same outcome → WAIT / DONE; the
    opposite outcome, or nothing to end → INVALID_TXN_STATE."""
    if (md is not None and not commit and producer_id == md.producer_id
            and producer_epoch == md.last_producer_epoch != md.producer_epoch
            and md.state in (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)):
        # the producer whose transaction timed out aborts it: already done (same outcome)
        return (EndStep.WAIT if md.is_prepared else EndStep.DONE), md
    md = check_producer(md, producer_id, producer_epoch)
    if md.state is TxnState.ONGOING:
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        return EndStep.PREPARE, dataclasses.replace(md, state=state, last_update_ms=now_ms)
    if md.state is not TxnState.EMPTY and md.commit == commit:
        return (EndStep.WAIT if md.is_prepared else EndStep.DONE), md
    what = "commit" if commit else "abort"
    raise error_for(ErrorCode.INVALID_TXN_STATE,
                    f"cannot {what}: the transaction is {md.state.wire_name}")


def timed_out(md: TxnMetadata, now_ms: int) -> bool:
    return md.state is TxnState.ONGOING and now_ms - md.txn_start_ms > md.timeout_ms


def timeout_abort(md: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Ongoing past its timeout → PrepareAbort with a bumped epoch; the old epoch is remembered
    (``last_producer_epoch``) so its owner learns TRANSACTION_TIMED_OUT rather than fenced."""
    if not timed_out(md, now_ms):
        raise error_for(ErrorCode.INVALID_TXN_STATE, "the transaction has not timed out")
    return _abort_bumped(md, now_ms, last=md.producer_epoch)


def complete(md: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Prepare* → Complete* once every partition has its marker."""
    if not md.is_prepared:
        raise error_for(ErrorCode.INVALID_TXN_STATE, f"nothing to complete in {md.state.wire_name}")
    state = TxnState.COMPLETE_COMMIT if md.commit else TxnState.COMPLETE_ABORT
    return dataclasses.replace(md, state=state, partitions=frozenset(), last_update_ms=now_ms)
