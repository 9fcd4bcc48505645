"""The transactional producer's state machine and error classification, without a broker."""

from __future__ import annotations

import pytest
import trio
from rafka.client.aio import AsyncProducer
from rafka.client.aio.enqueue import Gate
from rafka.client.aio.transactions import ErrorKind, TransactionManager, TxnState, classify
from rafka.client.errors import (
    IllegalStateError,
    IllegalTxnStateError,
    InvalidConfigError,
    InvalidTxnStateError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionTimedOutError,
)
from rafka.client.types import TopicPartition
from rafka.wire.errors import ErrorCode, error_for

A, B, C = (TopicPartition("t", i) for i in range(3))


class Hooks:
    """The producer side of the manager, recorded (the pure tests need no producer)."""

    def __init__(self) -> None:
        self.fatal: BaseException | None = None
        self.ids: list[tuple[int, int]] = []
        self.gate = Gate()

    def set_fatal(self, err: BaseException) -> None:
        self.fatal = err

    def set_producer_id(self, pid: int, epoch: int) -> None:
        self.ids.append((pid, epoch))

    def wakeup(self) -> None:
        pass


def ready_manager() -> tuple[TransactionManager, Hooks]:
    tm = TransactionManager("tid", 60000)
    hooks = Hooks()
    tm.bind(hooks)  # type: ignore[arg-type]
    tm._to(TxnState.INITIALIZING)
    tm._to(TxnState.READY)
    tm.producer_id, tm.producer_epoch = 7, 3
    return tm, hooks


# ------------------------------------------------------------------ classification


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
                                  ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                                  ErrorCode.TRANSACTION_COORDINATOR_FENCED])
def test_coordinator_fencing_errors_are_fatal(code: ErrorCode) -> None:
    assert classify(error_for(code)) is ErrorKind.FATAL


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                  ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                  ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.REQUEST_TIMED_OUT,
                                  ErrorCode.NETWORK_EXCEPTION])
def test_coordinator_moves_and_busy_answers_are_retried(code: ErrorCode) -> None:
    assert classify(error_for(code)) is ErrorKind.RETRIABLE


def test_timeout_is_abortable_with_an_epoch_bump_and_the_rest_abortable() -> None:
    assert classify(error_for(ErrorCode.TRANSACTION_TIMED_OUT)) is ErrorKind.BUMP
    assert classify(error_for(ErrorCode.FENCED_MEMBER_EPOCH)) is ErrorKind.ABORTABLE
    assert classify(TransactionAbortedError("x")) is ErrorKind.ABORTABLE


def test_a_partition_refusing_the_epoch_is_ambiguous_other_batch_errors_abortable() -> None:
    assert classify(error_for(ErrorCode.INVALID_PRODUCER_EPOCH), from_partition=True) \
        is ErrorKind.FENCED_OR_TIMED_OUT
    assert classify(error_for(ErrorCode.INVALID_TXN_STATE), from_partition=True) \
        is ErrorKind.FENCED_OR_TIMED_OUT  # the leader's verification failed: ask the coordinator
    assert classify(error_for(ErrorCode.MESSAGE_TOO_LARGE), from_partition=True) is ErrorKind.ABORTABLE


def test_the_state_error_is_both_an_illegal_state_and_an_invalid_txn_state() -> None:
    err = IllegalTxnStateError("x")
    assert isinstance(err, IllegalStateError) and isinstance(err, InvalidTxnStateError)
    assert err.code == ErrorCode.INVALID_TXN_STATE


# ------------------------------------------------------------------ state machine


def test_calls_out_of_order_raise_named_errors() -> None:
    tm = TransactionManager("tid", 60000)
    with pytest.raises(IllegalTxnStateError, match="init_transactions"):
        tm.check_send()
    with pytest.raises(IllegalTxnStateError, match="init_transactions"):
        tm.begin()
    tm, _ = ready_manager()
    with pytest.raises(IllegalTxnStateError, match="begin_transaction"):
        tm.check_send()
    tm.begin()
    tm.check_send()
    with pytest.raises(IllegalTxnStateError):
        tm.begin()  # one transaction at a time
    with pytest.raises(IllegalTxnStateError):
        tm._to(TxnState.INITIALIZING)  # not a transition of the table


def test_partitions_waiting_go_into_one_request_and_one_at_a_time() -> None:
    tm, _ = ready_manager()
    assert not tm.want(A)  # no transaction open: a batch cannot join one
    tm.begin()
    assert tm.want(B) and tm.want(A) and tm.want(A)
    assert tm.take_wanted() == [A, B]
    assert tm.want(C)
    assert tm.take_wanted() == []  # the first request is still in flight
    tm._adding = None
    assert tm.take_wanted() == [C]


def test_lingering_partitions_are_added_early_and_never_twice_in_flight() -> None:
    tm, _ = ready_manager()
    tm.want_open([A])  # no transaction open: nothing to add
    assert tm.take_wanted() == []
    tm.begin()
    tm.want_open([A, B])  # batches still lingering in the accumulator
    assert tm.take_wanted() == [A, B]
    tm.want_open([A, B])  # still lingering while their ADD_PARTITIONS is in flight
    assert tm.want(A)  # drained meanwhile: waits for the request in flight
    assert not tm.wanted
    tm._adding, tm._adding_tps = None, frozenset()  # what add_partitions' end does
    tm.partitions.update([A, B])
    tm.want_open([A, B, C])
    assert tm.take_wanted() == [C]


def test_a_failed_batch_makes_the_transaction_abortable_and_send_raises_it() -> None:
    tm, _ = ready_manager()
    tm.begin()
    tm.batch_failed(error_for(ErrorCode.MESSAGE_TOO_LARGE, "too big"), sequenced=False)
    assert tm.state is TxnState.ABORTABLE_ERROR and not tm.epoch_bump
    with pytest.raises(type(error_for(ErrorCode.MESSAGE_TOO_LARGE)), match="too big"):
        tm.check_send()
    with pytest.raises(type(error_for(ErrorCode.MESSAGE_TOO_LARGE))):
        tm.begin()
    tm.batch_failed(error_for(ErrorCode.CORRUPT_MESSAGE), sequenced=True)
    assert tm.error is not None and tm.error.code == ErrorCode.MESSAGE_TOO_LARGE  # the first one
    assert tm.epoch_bump  # a lost sequence number: the abort must take a new epoch
    tm._to(TxnState.ABORTING)
    tm._finish()
    assert tm.state is TxnState.READY and tm.error is None and not tm.partitions


def test_a_refused_epoch_on_a_partition_is_resolved_with_the_coordinator() -> None:
    tm, hooks = ready_manager()
    tm.begin()
    tm.batch_failed(error_for(ErrorCode.INVALID_PRODUCER_EPOCH), sequenced=True)
    assert tm.epoch_suspect and tm.state is TxnState.ABORTABLE_ERROR
    assert hooks.fatal is None  # not fatal yet: it may be our own timeout (KIP-588)


def test_fencing_is_fatal_for_every_later_call() -> None:
    tm, hooks = ready_manager()
    tm.begin()
    err = tm.failed(error_for(ErrorCode.INVALID_PRODUCER_EPOCH, "epoch 3 < 4"))
    assert isinstance(err, ProducerFencedError)
    assert tm.state is TxnState.FATAL_ERROR and isinstance(hooks.fatal, ProducerFencedError)
    for call in (tm.check_send, tm.begin):
        with pytest.raises(ProducerFencedError, match="epoch 3 < 4"):
            call()


def test_timeout_is_abortable_and_asks_for_a_bump_a_call_timeout_keeps_the_state() -> None:
    tm, _ = ready_manager()
    tm.begin()
    err = tm.failed(KafkaTimeoutError("slow"))
    assert isinstance(err, KafkaTimeoutError) and tm.state is TxnState.IN_TRANSACTION
    err = tm.failed(error_for(ErrorCode.TRANSACTION_TIMED_OUT))
    assert isinstance(err, TransactionTimedOutError)
    assert tm.state is TxnState.ABORTABLE_ERROR and tm.epoch_bump


def test_any_error_of_init_is_fatal() -> None:
    tm = TransactionManager("tid", 60000)
    hooks = Hooks()
    tm.bind(hooks)  # type: ignore[arg-type]
    tm._to(TxnState.INITIALIZING)
    tm.failed(error_for(ErrorCode.INVALID_TRANSACTION_TIMEOUT), during_init=True)
    assert tm.state is TxnState.FATAL_ERROR


# ------------------------------------------------------------------ producer config and calls


def test_transactional_config_implies_idempotence_and_refuses_contradictions() -> None:
    p = AsyncProducer("127.0.0.1:1", transactional_id="tid")
    assert p.enable_idempotence and p.acks == -1 and p._txn is not None
    assert AsyncProducer("127.0.0.1:1")._txn is None
    with pytest.raises(InvalidConfigError):
        AsyncProducer("127.0.0.1:1", transactional_id="tid", acks=1)
    with pytest.raises(InvalidConfigError):
        AsyncProducer("127.0.0.1:1", transactional_id="tid", enable_idempotence=False)
    with pytest.raises(InvalidConfigError):
        AsyncProducer("127.0.0.1:1", transactional_id="")
    with pytest.raises(InvalidConfigError):
        AsyncProducer("127.0.0.1:1", transactional_id="tid", transaction_timeout_ms=0)


def test_open_producer_refuses_sends_outside_a_transaction() -> None:
    async def main() -> None:
        async with AsyncProducer("127.0.0.1:1", transactional_id="tid") as p:
            with pytest.raises(IllegalTxnStateError):
                await p.send("t", b"v")
            with pytest.raises(IllegalTxnStateError):
                p.send_threadsafe("t", b"v")
            with pytest.raises(IllegalTxnStateError):
                await p.begin_transaction()
            with pytest.raises(IllegalTxnStateError):
                await p.commit_transaction()
            with pytest.raises(IllegalTxnStateError):
                async with p.transaction():
                    pass
        async with AsyncProducer("127.0.0.1:1") as plain:
            with pytest.raises(IllegalStateError, match="transactional_id"):
                await plain.begin_transaction()

    trio.run(main)
