"""Workload pieces that need no cluster: error classification, value codec, topic verification."""

from __future__ import annotations

from broker.errors import ErrorCode
from chaos_tests.history import from_dicts
from chaos_tests.workloads.common import classify_error, decode_value, encode_value, error_name
from chaos_tests.workloads.metadata import expected_topics
from client.errors import BufferExhaustedError, KafkaTimeoutError, error_for


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
