"""Every rafka error code reaches a Kafka client as a code Kafka defines (``kafka_error``,
docs/kafka-compat.md "Error codes"): rafka's own numbers below 1000 are Kafka's numbers for
the same error, and each rafka-only code (1000+) has a Kafka code chosen for its situation."""

from __future__ import annotations

import re
from pathlib import Path

from rafka.broker.kafka.context import RAFKA_ONLY_AS_KAFKA, kafka_error
from rafka.wire.errors import ErrorCode

DOC = Path(__file__).resolve().parents[2] / "docs" / "kafka-compat.md"

# Kafka's error codes by number (the protocol guide's "Error Codes" table, Kafka 4.0), written
# out here so the test does not take them from the code under test or from a client library.
KAFKA_CODES: dict[int, str] = {
    -1: "UNKNOWN_SERVER_ERROR", 0: "NONE", 1: "OFFSET_OUT_OF_RANGE", 2: "CORRUPT_MESSAGE",
    3: "UNKNOWN_TOPIC_OR_PARTITION", 4: "INVALID_FETCH_SIZE", 5: "LEADER_NOT_AVAILABLE",
    6: "NOT_LEADER_OR_FOLLOWER", 7: "REQUEST_TIMED_OUT", 8: "BROKER_NOT_AVAILABLE",
    9: "REPLICA_NOT_AVAILABLE", 10: "MESSAGE_TOO_LARGE", 11: "STALE_CONTROLLER_EPOCH",
    12: "OFFSET_METADATA_TOO_LARGE", 13: "NETWORK_EXCEPTION", 14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR", 17: "INVALID_TOPIC_EXCEPTION",
    18: "RECORD_LIST_TOO_LARGE", 19: "NOT_ENOUGH_REPLICAS", 20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    21: "INVALID_REQUIRED_ACKS", 22: "ILLEGAL_GENERATION", 23: "INCONSISTENT_GROUP_PROTOCOL",
    24: "INVALID_GROUP_ID", 25: "UNKNOWN_MEMBER_ID", 26: "INVALID_SESSION_TIMEOUT",
    27: "REBALANCE_IN_PROGRESS", 28: "INVALID_COMMIT_OFFSET_SIZE", 29: "TOPIC_AUTHORIZATION_FAILED",
    30: "GROUP_AUTHORIZATION_FAILED", 31: "CLUSTER_AUTHORIZATION_FAILED", 32: "INVALID_TIMESTAMP",
    33: "UNSUPPORTED_SASL_MECHANISM", 34: "ILLEGAL_SASL_STATE", 35: "UNSUPPORTED_VERSION",
    36: "TOPIC_ALREADY_EXISTS", 37: "INVALID_PARTITIONS", 38: "INVALID_REPLICATION_FACTOR",
    39: "INVALID_REPLICA_ASSIGNMENT", 40: "INVALID_CONFIG", 41: "NOT_CONTROLLER",
    42: "INVALID_REQUEST", 43: "UNSUPPORTED_FOR_MESSAGE_FORMAT", 44: "POLICY_VIOLATION",
    45: "OUT_OF_ORDER_SEQUENCE_NUMBER", 46: "DUPLICATE_SEQUENCE_NUMBER", 47: "INVALID_PRODUCER_EPOCH",
    48: "INVALID_TXN_STATE", 49: "INVALID_PRODUCER_ID_MAPPING", 50: "INVALID_TRANSACTION_TIMEOUT",
    51: "CONCURRENT_TRANSACTIONS", 52: "TRANSACTION_COORDINATOR_FENCED",
    53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", 54: "SECURITY_DISABLED",
    55: "OPERATION_NOT_ATTEMPTED", 56: "KAFKA_STORAGE_ERROR", 57: "LOG_DIR_NOT_FOUND",
    58: "SASL_AUTHENTICATION_FAILED", 59: "UNKNOWN_PRODUCER_ID", 60: "REASSIGNMENT_IN_PROGRESS",
    61: "DELEGATION_TOKEN_AUTH_DISABLED", 62: "DELEGATION_TOKEN_NOT_FOUND",
    63: "DELEGATION_TOKEN_OWNER_MISMATCH", 64: "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
    65: "DELEGATION_TOKEN_AUTHORIZATION_FAILED", 66: "DELEGATION_TOKEN_EXPIRED",
    67: "INVALID_PRINCIPAL_TYPE", 68: "NON_EMPTY_GROUP", 69: "GROUP_ID_NOT_FOUND",
    70: "FETCH_SESSION_ID_NOT_FOUND", 71: "INVALID_FETCH_SESSION_EPOCH", 72: "LISTENER_NOT_FOUND",
    73: "TOPIC_DELETION_DISABLED", 74: "FENCED_LEADER_EPOCH", 75: "UNKNOWN_LEADER_EPOCH",
    76: "UNSUPPORTED_COMPRESSION_TYPE", 77: "STALE_BROKER_EPOCH", 78: "OFFSET_NOT_AVAILABLE",
    79: "MEMBER_ID_REQUIRED", 80: "PREFERRED_LEADER_NOT_AVAILABLE", 81: "GROUP_MAX_SIZE_REACHED",
    82: "FENCED_INSTANCE_ID", 83: "ELIGIBLE_LEADERS_NOT_AVAILABLE", 84: "ELECTION_NOT_NEEDED",
    85: "NO_REASSIGNMENT_IN_PROGRESS", 86: "GROUP_SUBSCRIBED_TO_TOPIC", 87: "INVALID_RECORD",
    88: "UNSTABLE_OFFSET_COMMIT", 89: "THROTTLING_QUOTA_EXCEEDED", 90: "PRODUCER_FENCED",
    91: "RESOURCE_NOT_FOUND", 92: "DUPLICATE_RESOURCE", 93: "UNACCEPTABLE_CREDENTIAL",
    94: "INCONSISTENT_VOTER_SET", 95: "INVALID_UPDATE_VERSION", 96: "FEATURE_UPDATE_FAILED",
    97: "PRINCIPAL_DESERIALIZATION_FAILURE", 98: "SNAPSHOT_NOT_FOUND", 99: "POSITION_OUT_OF_RANGE",
    100: "UNKNOWN_TOPIC_ID", 101: "DUPLICATE_BROKER_REGISTRATION", 102: "BROKER_ID_NOT_REGISTERED",
    103: "INCONSISTENT_TOPIC_ID", 104: "INCONSISTENT_CLUSTER_ID", 105: "TRANSACTIONAL_ID_NOT_FOUND",
    106: "FETCH_SESSION_TOPIC_ID_ERROR", 107: "INELIGIBLE_REPLICA", 108: "NEW_LEADER_ELECTED",
    109: "OFFSET_MOVED_TO_TIERED_STORAGE", 110: "FENCED_MEMBER_EPOCH",
    111: "UNRELEASED_INSTANCE_ID", 112: "UNSUPPORTED_ASSIGNOR", 113: "STALE_MEMBER_EPOCH",
    114: "MISMATCHED_ENDPOINT_TYPE", 115: "UNSUPPORTED_ENDPOINT_TYPE", 116: "UNKNOWN_CONTROLLER_ID",
    117: "UNKNOWN_SUBSCRIPTION_ID", 118: "TELEMETRY_TOO_LARGE", 119: "INVALID_REGISTRATION",
    120: "TRANSACTION_ABORTABLE", 121: "INVALID_RECORD_STATE", 122: "SHARE_SESSION_NOT_FOUND",
    123: "INVALID_SHARE_SESSION_EPOCH", 124: "FENCED_STATE_EPOCH", 125: "INVALID_VOTER_KEY",
    126: "DUPLICATE_VOTER", 127: "VOTER_NOT_FOUND",
}

# rafka-only codes for which Kafka has no fitting code (each says why in the doc's table)
LEFT_UNKNOWN = {ErrorCode.TLS_REQUIRED, ErrorCode.TLS_HANDSHAKE_FAILED}


def test_every_error_code_maps_to_a_code_kafka_defines() -> None:
    for code in ErrorCode:
        assert kafka_error(int(code)) in KAFKA_CODES, code


def test_codes_below_1000_are_kafkas_own_with_kafkas_name() -> None:
    for code in ErrorCode:
        if int(code) < 1000:
            assert KAFKA_CODES.get(int(code)) == code.name, code
            assert kafka_error(int(code)) == int(code)


def test_each_rafka_only_code_has_a_chosen_kafka_code() -> None:
    rafka_only = {c for c in ErrorCode if int(c) >= 1000}
    assert set(RAFKA_ONLY_AS_KAFKA) == rafka_only  # a new rafka-only code must be mapped here
    for code in rafka_only:
        if code in LEFT_UNKNOWN:
            assert kafka_error(int(code)) == -1, code
        else:
            assert kafka_error(int(code)) not in (-1, 0), code
    assert kafka_error(ErrorCode.TRANSACTION_TIMED_OUT) == 47  # INVALID_PRODUCER_EPOCH
    assert kafka_error(ErrorCode.STALE_MEMBER) == 22  # ILLEGAL_GENERATION
    assert kafka_error(5000) == -1  # a number rafka does not define
    assert kafka_error(None) == 0


def test_the_doc_table_names_every_rafka_only_code_and_its_kafka_code() -> None:
    found = re.findall(r"^\| `([A-Z_]+)` \(\d+\) \| `([A-Z_]+)` \([-−]?\d+\)", DOC.read_text(), re.M)
    rows = dict(found)
    for code, kafka in RAFKA_ONLY_AS_KAFKA.items():
        assert rows.get(code.name) == KAFKA_CODES[kafka], code
