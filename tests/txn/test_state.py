"""The coordinator's pure state machine (broker/txn/state.py): every transition, fencing, the
timeout abort, END_TXN retries, epoch overflow and the record codec, with injected time."""

from __future__ import annotations

import pytest
from rafka.broker.txn import state as S
from rafka.broker.txn.state import EndStep, TxnMetadata, TxnState
from rafka.wire.errors import ErrorCode, RafkaError

T0 = 1_000_000
TPS = [("a", 0), ("b", 1)]


def code(fn, *args, **kw) -> ErrorCode:
    with pytest.raises(RafkaError) as ei:
        fn(*args, **kw)
    return ei.value.code


def fresh(timeout_ms: int = 10_000) -> TxnMetadata:
    return S.init_producer(None, "tx", timeout_ms, T0, new_producer_id=7)


def ongoing() -> TxnMetadata:
    return S.add_partitions(fresh(), 7, 0, TPS, T0 + 1)


def test_first_init_needs_a_producer_id_then_bumps_the_epoch() -> None:
    assert S.needs_new_producer_id(None)
    with pytest.raises(ValueError):
        S.init_producer(None, "tx", 1000, T0)
    md = fresh()
    assert (md.producer_id, md.producer_epoch, md.state) == (7, 0, TxnState.EMPTY)
    again = S.init_producer(md, "tx", 1000, T0 + 5)
    assert (again.producer_id, again.producer_epoch, again.last_producer_epoch) == (7, 1, -1)
    assert again.timeout_ms == 1000 and again.last_update_ms == T0 + 5


def test_epoch_overflow_takes_a_new_producer_id() -> None:
    md = TxnMetadata("tx", 7, S.MAX_PRODUCER_EPOCH, 1000, TxnState.COMPLETE_COMMIT)
    assert S.needs_new_producer_id(md)
    new = S.init_producer(md, "tx", 1000, T0, new_producer_id=8)
    assert (new.producer_id, new.producer_epoch) == (8, 0)
    # a fence at the maximum epoch cannot bump; the id still gets aborted
    md = TxnMetadata("tx", 7, S.MAX_PRODUCER_EPOCH, 1000, TxnState.ONGOING, frozenset(TPS), T0)
    assert S.fence_abort(md, T0).producer_epoch == S.MAX_PRODUCER_EPOCH


def test_init_states() -> None:
    md = ongoing()
    assert S.begin_init(md, None) is TxnState.ONGOING
    assert code(S.init_producer, md, "tx", 1000, T0) == ErrorCode.CONCURRENT_TRANSACTIONS
    fenced = S.fence_abort(md, T0 + 2)
    assert (fenced.state, fenced.producer_epoch, fenced.last_producer_epoch) == (TxnState.PREPARE_ABORT, 1, -1)
    assert fenced.partitions == frozenset(TPS)
    assert S.begin_init(fenced, None) is TxnState.PREPARE_ABORT
    done = S.complete(fenced, T0 + 3)
    assert S.begin_init(done, None) is None
    # the zombie (epoch 0) is fenced everywhere
    assert code(S.add_partitions, done, 7, 0, TPS, T0) == ErrorCode.PRODUCER_FENCED
    assert code(S.end_txn, done, 7, 0, True, T0) == ErrorCode.PRODUCER_FENCED


def test_kip360_reinit_with_expected_epoch_and_its_retry() -> None:
    md = S.init_producer(fresh(), "tx", 1000, T0)  # epoch 1
    bumped = S.init_producer(md, "tx", 1000, T0 + 1, expected=(7, 1))
    assert (bumped.producer_epoch, bumped.last_producer_epoch) == (2, 1)
    # the answer was lost: the same request again returns the same epoch
    retry = S.init_producer(bumped, "tx", 1000, T0 + 2, expected=(7, 1))
    assert retry.producer_epoch == 2
    assert code(S.begin_init, bumped, (7, 0)) == ErrorCode.PRODUCER_FENCED
    assert code(S.begin_init, bumped, (8, 2)) == ErrorCode.PRODUCER_FENCED


def test_add_partitions_begins_and_extends() -> None:
    md = fresh()
    on = S.add_partitions(md, 7, 0, [("a", 0)], T0 + 10)
    assert (on.state, on.txn_start_ms, on.partitions) == (TxnState.ONGOING, T0 + 10, frozenset({("a", 0)}))
    more = S.add_partitions(on, 7, 0, [("b", 1)], T0 + 20)
    assert more.partitions == frozenset(TPS) and more.txn_start_ms == T0 + 10
    assert S.add_partitions(more, 7, 0, [("a", 0)], T0 + 30) is more  # nothing to write
    assert code(S.add_partitions, None, 7, 0, TPS, T0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert code(S.add_partitions, more, 9, 0, TPS, T0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert code(S.add_partitions, more, 7, 3, TPS, T0) == ErrorCode.PRODUCER_FENCED
    prep = S.end_txn(more, 7, 0, True, T0)[1]
    assert code(S.add_partitions, prep, 7, 0, TPS, T0) == ErrorCode.CONCURRENT_TRANSACTIONS
    # a committed transaction: the next ADD_PARTITIONS begins a new one
    nxt = S.add_partitions(S.complete(prep, T0 + 40), 7, 0, [("c", 0)], T0 + 50)
    assert (nxt.state, nxt.partitions, nxt.txn_start_ms) == (TxnState.ONGOING, frozenset({("c", 0)}), T0 + 50)


def test_verify_only() -> None:
    md = ongoing()
    assert S.verify_partitions(md, 7, 0, [("a", 0), ("z", 0)]) == {
        ("a", 0): ErrorCode.NONE, ("z", 0): ErrorCode.INVALID_TXN_STATE}
    assert S.verify_partitions(md, 7, 1, [("a", 0)]) == {("a", 0): ErrorCode.INVALID_TXN_STATE}
    assert S.verify_partitions(None, 7, 0, [("a", 0)]) == {("a", 0): ErrorCode.INVALID_TXN_STATE}
    done = S.complete(S.end_txn(md, 7, 0, True, T0)[1], T0)
    assert S.verify_partitions(done, 7, 0, [("a", 0)]) == {("a", 0): ErrorCode.INVALID_TXN_STATE}


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_and_its_retries(commit: bool) -> None:
    md = ongoing()
    step, prep = S.end_txn(md, 7, 0, commit, T0 + 5)
    assert step is EndStep.PREPARE
    assert prep.state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
    assert S.end_txn(prep, 7, 0, commit, T0 + 6) == (EndStep.WAIT, prep)
    assert code(S.end_txn, prep, 7, 0, not commit, T0) == ErrorCode.INVALID_TXN_STATE
    done = S.complete(prep, T0 + 7)
    assert done.state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    assert done.partitions == frozenset()
    assert S.end_txn(done, 7, 0, commit, T0 + 8) == (EndStep.DONE, done)
    assert code(S.end_txn, done, 7, 0, not commit, T0) == ErrorCode.INVALID_TXN_STATE
    assert code(S.complete, done, T0) == ErrorCode.INVALID_TXN_STATE


def test_end_txn_without_a_transaction() -> None:
    assert code(S.end_txn, fresh(), 7, 0, True, T0) == ErrorCode.INVALID_TXN_STATE
    assert code(S.end_txn, fresh(), 7, 0, False, T0) == ErrorCode.INVALID_TXN_STATE
    assert code(S.end_txn, None, 7, 0, True, T0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_timeout_abort_and_the_old_producer() -> None:
    md = ongoing()  # started at T0 + 1, timeout 10 s
    assert not S.timed_out(md, T0 + 1 + 10_000)
    assert code(S.timeout_abort, md, T0 + 5000) == ErrorCode.INVALID_TXN_STATE
    assert S.timed_out(md, T0 + 1 + 10_001)
    ab = S.timeout_abort(md, T0 + 20_000)
    assert (ab.state, ab.producer_epoch, ab.last_producer_epoch) == (TxnState.PREPARE_ABORT, 1, 0)
    assert not S.timed_out(ab, T0 + 99_999)
    for m in (ab, S.complete(ab, T0 + 20_001)):
        assert code(S.add_partitions, m, 7, 0, TPS, T0) == ErrorCode.TRANSACTION_TIMED_OUT
        assert code(S.end_txn, m, 7, 0, True, T0) == ErrorCode.TRANSACTION_TIMED_OUT
    # its abort_transaction() is the outcome already decided: success
    assert S.end_txn(ab, 7, 0, False, T0)[0] is EndStep.WAIT
    done = S.complete(ab, T0 + 20_001)
    assert S.end_txn(done, 7, 0, False, T0)[0] is EndStep.DONE
    # KIP-360: it re-initialises with its old epoch and gets the bumped one, unchanged
    again = S.init_producer(done, "tx", 10_000, T0 + 20_002, expected=(7, 0))
    assert again.producer_epoch == 1
    # a new incarnation took the id meanwhile: the old producer is fenced, not timed out
    other = S.init_producer(done, "tx", 10_000, T0 + 20_003)
    assert other.producer_epoch == 2 and other.last_producer_epoch == -1
    assert code(S.add_partitions, other, 7, 0, TPS, T0) == ErrorCode.PRODUCER_FENCED
    assert code(S.begin_init, other, (7, 0)) == ErrorCode.PRODUCER_FENCED


def test_timeout_validation() -> None:
    assert S.validate_timeout(1000) == 1000
    assert code(S.validate_timeout, 0) == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert code(S.validate_timeout, S.MAX_TXN_TIMEOUT_MS + 1) == ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_record_codec_round_trip() -> None:
    for md in (fresh(), ongoing(), S.timeout_abort(ongoing(), T0 + 99_999),
               TxnMetadata("tx", 2**40, S.MAX_PRODUCER_EPOCH, 900_000, TxnState.COMPLETE_ABORT)):
        assert S.decode_value("tx", S.encode_value(md)) == md
    assert S.decode_key(S.encode_key("tx-ü")) == "tx-ü"
    assert S.encode_value(None) is None and S.decode_value("tx", None) is None
    import msgpack
    assert msgpack.unpackb(S.encode_value(ongoing())) == [
        1, 7, 0, -1, 10_000, 1, [["a", 0], ["b", 1]], T0 + 1, T0 + 1, 1]
    # a record written before txn_seq existed (nine fields) loads with txn_seq 0
    old = msgpack.packb([1, 7, 0, -1, 10_000, 4, [["a", 0]], T0, T0 + 1])
    assert S.decode_value("tx", old).txn_seq == 0
    with pytest.raises(ValueError):
        S.decode_value("tx", msgpack.packb([2, 1, 2]))
    with pytest.raises(ValueError):
        S.decode_key(msgpack.packb([5]))


def test_each_begun_transaction_gets_the_next_number() -> None:
    """txn_seq: +1 when a transaction begins (Empty/Complete* -> Ongoing), kept through adds,
    the decision, the completion and an epoch bump, so it never repeats for one id."""
    md = fresh()
    first = S.add_partitions(md, md.producer_id, md.producer_epoch, [("a", 0)], T0)
    assert (md.txn_seq, first.txn_seq) == (0, 1)
    more = S.add_partitions(first, md.producer_id, md.producer_epoch, [("b", 0)], T0 + 1)
    _, prepared = S.end_txn(more, md.producer_id, md.producer_epoch, False, T0 + 2)
    done = S.complete(prepared, T0 + 3)
    assert more.txn_seq == prepared.txn_seq == done.txn_seq == 1
    second = S.add_partitions(done, md.producer_id, md.producer_epoch, [("a", 0)], T0 + 4)
    assert second.txn_seq == 2
    bumped = S.timeout_abort(second, T0 + 10**9)
    reinit = S.init_producer(S.complete(bumped, T0 + 10**9), "tx", 10_000, T0 + 10**9,
                             expected=(md.producer_id, bumped.last_producer_epoch))
    third = S.add_partitions(reinit, reinit.producer_id, reinit.producer_epoch, [("a", 0)], T0)
    assert (bumped.txn_seq, reinit.txn_seq, third.txn_seq) == (2, 2, 3)


def test_state_names() -> None:
    assert TxnState.PREPARE_COMMIT.wire_name == "PrepareCommit"
    assert TxnState.from_wire_name("CompleteAbort") is TxnState.COMPLETE_ABORT
    assert code(TxnState.from_wire_name, "Bogus") == ErrorCode.INVALID_REQUEST
