"""Workload pieces that need no cluster: error classification, value codec, topic verification."""

from __future__ import annotations

from rafka.chaos_tests.history import from_dicts
from rafka.chaos_tests.workloads.common import (
    classify_error,
    decode_value,
    encode_value,
    error_name,
)
from rafka.chaos_tests.workloads.metadata import expected_topics
from rafka.client.errors import BufferExhaustedError, KafkaTimeoutError, error_for
from rafka.wire.errors import ErrorCode


def test_definite_errors_fail_indefinite_are_info():
    assert classify_error(error_for(ErrorCode.NOT_ENOUGH_REPLICAS)) == "fail"
    # also answered after an append whose leader epoch ended during the acks wait
    assert classify_error(error_for(ErrorCode.NOT_LEADER_OR_FOLLOWER)) == "info"
    assert classify_error(BufferExhaustedError("full")) == "fail"
    # appended (maybe), then the wait for replication failed: outcome unknown
    assert classify_error(error_for(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)) == "info"
    assert classify_error(error_for(ErrorCode.REQUEST_TIMED_OUT)) == "info"
    assert classify_error(KafkaTimeoutError("delivery timeout")) == "info"
    assert classify_error(error_for(ErrorCode.KAFKA_STORAGE_ERROR)) == "info"
    assert classify_error(RuntimeError("?")) == "info"
    assert error_name(error_for(ErrorCode.NOT_ENOUGH_REPLICAS)) == "NOT_ENOUGH_REPLICAS"


def test_values_round_trip():
    assert decode_value(encode_value(12345)) == 12345
    assert decode_value(b"x") == "x"
    assert decode_value(None) is None


def test_expected_topics_from_history():
    h = from_dicts([
        {"process": 1, "type": "invoke", "f": "create-topic",
         "value": {"topic": "m-0", "partitions": 2, "replication_factor": 3}},
        {"process": 1, "type": "ok", "f": "create-topic",
         "value": {"topic": "m-0", "partitions": 2, "replication_factor": 3}},
        {"process": 1, "type": "invoke", "f": "create-topic", "value": {"topic": "m-1"}},
        {"process": 1, "type": "fail", "f": "create-topic", "value": {"topic": "m-1"}},
        {"process": 1, "type": "invoke", "f": "delete-topic", "value": {"topic": "m-0"}},
        {"process": 1, "type": "info", "f": "delete-topic", "value": {"topic": "m-0"}},
        {"process": 2, "type": "invoke", "f": "create-topic", "value": {"topic": "m-2"}},
    ])
    exp = expected_topics(h, "m-")
    assert exp["m-0"]["create"] == "ok" and exp["m-0"]["delete"] == "info"
    assert exp["m-0"]["partitions"] == 2
    assert exp["m-1"]["create"] == "fail"
    assert exp["m-2"]["create"] == "info"  # never completed


# ----------------------------------------------------------------------- txn workload

class _Meta:
    """A settled send future: ``await`` gives itself, with the offset."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def __await__(self):
        return self
        yield  # a generator: awaitable without a coroutine left unawaited


class _TxnProducer:
    """The transactional producer surface _run_txn uses; ``fail_at`` names the failing call."""

    def __init__(self, fail_at: str | None = None) -> None:
        self.fail_at, self.calls, self.next_offset = fail_at, [], 0

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name == self.fail_at:
            raise error_for(ErrorCode.REQUEST_TIMED_OUT)

    def begin_transaction(self) -> None:
        self._call("begin")

    async def send(self, topic, value, partition=None):
        self._call("send")
        self.next_offset += 1
        return _Meta(self.next_offset - 1)

    async def send_offsets_to_transaction(self, offsets, group_metadata):
        self._call("offsets")

    async def commit_transaction(self):
        self._call("commit")

    async def abort_transaction(self):
        self._call("abort")


async def _one_txn(tmp_path, producer, **kw):
    from rafka.chaos_tests.history import HistoryWriter, read_history
    from rafka.chaos_tests.workloads.common import RunContext
    from rafka.chaos_tests.workloads.txn import _run_txn

    with HistoryWriter(tmp_path / "h.jsonl") as h:
        ctx = RunContext(h, "unused:1")
        kind = await _run_txn(ctx, producer, 1, "txn",
                              {"writes": [["a", 0, 1], ["a", 1, 2]], "abort": False}, **kw)
    return kind, read_history(tmp_path / "h.jsonl")[-1]


async def test_txn_outcomes_follow_the_stage_reached(tmp_path):
    kind, op = await _one_txn(tmp_path, _TxnProducer())
    assert kind == "ok" and op.type == "ok"
    assert op.value["writes"] == [["a", 0, 1, 0], ["a", 1, 2, 1]]
    assert isinstance(op.value["commit_ns"], int)
    # an error before the commit was requested: the transaction can only abort
    kind, op = await _one_txn(tmp_path, _TxnProducer("send"))
    assert kind == "fail" and op.value["stage"] == "send"
    kind, op = await _one_txn(tmp_path, _TxnProducer("offsets"), offsets=({}, None))
    assert kind == "fail" and op.value["stage"] == "send"
    # the commit itself failed: unknown outcome
    kind, op = await _one_txn(tmp_path, _TxnProducer("commit"))
    assert kind == "info" and op.type == "info" and op.value["stage"] == "commit"
    kind, op = await _one_txn(tmp_path, _TxnProducer(), abort=True)
    assert kind == "aborted" and op.type == "fail" and op.value["aborted"] is True


def test_txn_spec_topics():
    from rafka.chaos_tests.workloads.txn import TxnSpec, unsafe

    spec = TxnSpec(partitions=2)
    assert spec.topic == "chaos-txn-a" and len(spec.writer_tps()) == 4
    assert len(spec.tps()) == 8 and ("chaos-txn-out", 1) in spec.tps()
    assert TxnSpec(transform=False).all_topics() == ["chaos-txn-a", "chaos-txn-b"]
    assert unsafe(spec).unsafe_offsets_outside_txn and not spec.unsafe_offsets_outside_txn
