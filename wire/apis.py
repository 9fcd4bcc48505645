"""The rafka API catalogue: ``ApiKey`` and the schema of every request body.

Theory of operation
-------------------
``SCHEMAS`` maps each ``ApiKey`` to the structure its request body must have, and says in
comments what the request means and which type its answer has (``-> XResponse``: the
``TypedDict`` of ``wire/responses.py``; the key's ``ApiSpec`` row names it): with those it is the reference of
the wire protocol (``wire/protocol.py`` frames and encodes; ``wire/api_table.py`` puts the
request schema, the response type, the route and the ACL of each key in one row).  A spec is
a Python type (``int``, ``str``, ``bytes``, ``bool``...), a one-element list (a list of that
spec), a dict (a map with these str keys), ``Opt(spec)`` (may be missing or None) or
``MapOf(key, value)`` (a free-form map).

``validate_request`` checks a decoded body against its schema before any handler runs.
Validation is structural (required keys, types, nesting) and names the path of the first
mismatch in its ``ProtocolError``; extra keys are ignored so that newer clients can talk to
older brokers.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from rafka.wire.errors import ErrorCode, ProtocolError

__all__ = ["ApiKey", "SCHEMAS", "Opt", "MapOf", "UnknownApiError", "validate_request"]


class UnknownApiError(ProtocolError):
    code = ErrorCode.UNKNOWN_API


class ApiKey(IntEnum):
    # data plane (brokers)
    API_VERSIONS = 0
    METADATA = 1
    PRODUCE = 2
    FETCH = 3
    LIST_OFFSETS = 4
    CREATE_TOPICS = 5
    DELETE_TOPICS = 6
    DESCRIBE_CONFIGS = 7
    CREATE_PARTITIONS = 8
    INIT_PRODUCER_ID = 9
    ALTER_CONFIGS = 10
    ELECT_LEADERS = 11
    FIND_COORDINATOR = 12  # Kafka's 10 (rafka's 10 is ALTER_CONFIGS)
    DELETE_RECORDS = 13  # Kafka's DeleteRecords (21): the partition leader moves its log start
    # controller quorum
    BROKER_REGISTRATION = 20
    BROKER_HEARTBEAT = 21
    METADATA_FETCH = 22
    ALTER_PARTITION = 23
    DESCRIBE_QUORUM = 24
    ADD_RAFT_VOTER = 25  # KIP-853 (kraft/voter_admin.py)
    REMOVE_RAFT_VOTER = 26
    # consumer groups (coordinated by the active controller)
    CONSUMER_GROUP_HEARTBEAT = 30
    OFFSET_COMMIT = 31
    OFFSET_FETCH = 32
    LIST_GROUPS = 33
    DESCRIBE_GROUPS = 34
    DELETE_GROUPS = 35
    ALTER_GROUP_OFFSETS = 36
    OFFSET_DELETE = 37  # Kafka's OffsetDelete (47): some partitions' committed offsets
    # transactions (docs/transactions.md)
    ADD_PARTITIONS_TO_TXN = 40
    ADD_OFFSETS_TO_TXN = 41
    END_TXN = 42
    WRITE_TXN_MARKERS = 43
    TXN_OFFSET_COMMIT = 44
    DESCRIBE_TRANSACTIONS = 45
    LIST_TRANSACTIONS = 46
    DESCRIBE_PRODUCERS = 47
    # security (docs/security.md)
    SASL_HANDSHAKE = 50
    SASL_AUTHENTICATE = 51
    ALTER_USER_SCRAM_CREDENTIALS = 52
    DESCRIBE_USER_SCRAM_CREDENTIALS = 53
    CREATE_ACLS = 54
    DESCRIBE_ACLS = 55
    DELETE_ACLS = 56
    ALTER_CLIENT_QUOTAS = 57
    DESCRIBE_CLIENT_QUOTAS = 58
    # reassignment and decommission (kraft/reassign.py)
    ALTER_PARTITION_REASSIGNMENTS = 70
    LIST_PARTITION_REASSIGNMENTS = 71
    DECOMMISSION_BROKER = 72
    UNREGISTER_BROKER = 73


# --------------------------------------------------------------------------- schemas


@dataclass(frozen=True, slots=True)
class Opt:
    """An optional field: may be missing or None."""

    spec: Any


@dataclass(frozen=True, slots=True)
class MapOf:
    """A free-form map with keys and values of the given specs."""

    key: Any
    value: Any


_TP_LIST = [{"name": str, "partitions": [int]}]
# an access control entry (docs/security.md) and a filter of them (None: any value)
_ACL = {"principal": str, "resource_type": str, "pattern_type": str, "resource_name": str,
        "operation": str, "permission": str, "host": str}
_ACL_FILTER = {k: Opt(str) for k in _ACL}
# the member and the offsets of OFFSET_COMMIT, also carried by TXN_OFFSET_COMMIT
_MEMBER_OFFSETS = {
    "member_id": Opt(str),
    "member_epoch": Opt(int),
    "min_metadata_offset": Opt(int),
    "topics": [{"name": str,
                # leader_epoch: of the record before ``offset`` (Kafka's committed_leader_epoch)
                "partitions": [{"partition": int, "offset": int, "metadata": Opt(str),
                                "leader_epoch": Opt(int)}]}],
}

SCHEMAS: dict[ApiKey, dict[str, Any]] = {
    # -> ApiVersionsResponse
    ApiKey.API_VERSIONS: {},
    # -> MetadataResponse
    ApiKey.METADATA: {"topics": Opt([str])},
    # -> ProduceResponse
    # transactional_id: set by transactional producers; a transactional batch that opens a
    # transaction on a partition is verified with that id's coordinator first (KIP-890).
    ApiKey.PRODUCE: {
        "acks": int,
        "timeout_ms": int,
        "transactional_id": Opt(str),
        "topics": [{"name": str, "partitions": [{"partition": int, "records": bytes}]}],
    },
    # replica_id -1 = consumer; >= 0 = follower broker id (then broker_epoch is required)
    # -> FetchResponse + raw bytes (records_len of each partition, in order)
    # isolation_level: 0 read_uncommitted (default), 1 read_committed -> data only below the
    # last stable offset, and per partition also last_stable_offset and
    # aborted_transactions: [[producer_id, first_offset]] | None (docs/transactions.md)
    ApiKey.FETCH: {
        "replica_id": int,
        "isolation_level": Opt(int),
        "broker_epoch": Opt(int),
        "max_wait_ms": int,
        "min_bytes": int,
        "max_bytes": int,
        "topics": [
            {
                "name": str,
                "partitions": [
                    {
                        "partition": int,
                        "fetch_offset": int,
                        "partition_max_bytes": int,
                        "current_leader_epoch": Opt(int),
                        "last_fetched_epoch": Opt(int),
                        # a follower's own log start offset (DeleteRecords waits for it)
                        "log_start_offset": Opt(int),
                    }
                ],
            }
        ],
    },
    # timestamp: -2 earliest, -1 latest (high watermark), >= 0 first offset with ts >= it
    # -> ListOffsetsResponse
    # isolation_level 1: latest (-1) answers the last stable offset instead of the high watermark
    ApiKey.LIST_OFFSETS: {
        "replica_id": Opt(int),
        "isolation_level": Opt(int),
        "topics": [
            {
                "name": str,
                "partitions": [
                    {"partition": int, "timestamp": int, "current_leader_epoch": Opt(int)}
                ],
            }
        ],
    },
    # request_id (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, ALTER_CONFIGS): optional,
    # 1-128 chars of [A-Za-z0-9._-], one per logical admin call and the same on every retry;
    # the controller answers a topic whose change that id already made with the original
    # outcome (kraft/service.py). Absent: every attempt is decided afresh.
    # -> CreateTopicsResponse
    ApiKey.CREATE_TOPICS: {
        "topics": [
            {
                "name": str,
                "num_partitions": int,
                "replication_factor": int,
                "configs": Opt(MapOf(str, str)),
            }
        ],
        "timeout_ms": int,
        "validate_only": Opt(bool),
        "request_id": Opt(str),
    },
    # -> TopicErrorsResponse
    ApiKey.DELETE_TOPICS: {"topics": [str], "timeout_ms": int, "request_id": Opt(str)},
    # -> DescribeConfigsResponse
    ApiKey.DESCRIBE_CONFIGS: {"topics": [str]},
    # count = the new total number of partitions -> TopicErrorsResponse
    ApiKey.CREATE_PARTITIONS: {"topics": [{"name": str, "count": int}], "timeout_ms": int,
                               "request_id": Opt(str)},
    # without transactional_id: to the controller (a fresh id for an idempotent producer);
    # with it: to that id's transaction coordinator, which bumps the epoch (fencing older
    # incarnations) and ends what they left open. producer_id/producer_epoch with it: a
    # producer re-initialising after TRANSACTION_TIMED_OUT (KIP-360).
    # -> InitProducerIdResponse
    ApiKey.INIT_PRODUCER_ID: {"producer_id": Opt(int), "producer_epoch": Opt(int),
                              "transactional_id": Opt(str),
                              "transaction_timeout_ms": Opt(int)},
    # value None deletes the override -> TopicErrorsResponse
    ApiKey.ALTER_CONFIGS: {"topics": [{"name": str, "configs": MapOf(str, Opt(str))}],
                           "request_id": Opt(str)},
    # election_type 0 preferred, 1 unclean; topics None = all
    # -> PartitionErrorsResponse
    ApiKey.ELECT_LEADERS: {"election_type": int, "topics": Opt(_TP_LIST)},
    # to each partition's leader (broker/handlers/delete_records.py): records below ``offset``
    # (-1: the high watermark) are deleted -> DeleteRecordsResponse (low_watermark per partition)
    ApiKey.DELETE_RECORDS: {
        "topics": [{"name": str, "partitions": [{"partition": int, "offset": int}]}],
        "timeout_ms": Opt(int)},
    # key_type 0 group, 1 transaction; any broker (broker/handlers/coordinator.py); each key is
    # authorized on its own (describe on the group / transactional id)
    # -> FindCoordinatorResponse
    ApiKey.FIND_COORDINATOR: {"key_type": int, "keys": [str]},
    # ---- controller
    # -> BrokerRegistrationResponse
    ApiKey.BROKER_REGISTRATION: {
        "broker_id": int,
        "incarnation_id": str,
        "host": str,
        "port": int,
        "rack": Opt(str),
        "heartbeat_interval_ms": Opt(int),  # the controller probes a broker silent for 2x this
        "secure_listener": Opt(str),  # "host:port" of its secured listener (docs/security.md)
        "kafka_listener": Opt(str),  # "host:port" of its Kafka listener (docs/kafka-compat.md)
    },
    # -> BrokerHeartbeatResponse
    ApiKey.BROKER_HEARTBEAT: {
        "broker_id": int,
        "broker_epoch": int,
        "metadata_offset": int,
        "want_fence": bool,
        "want_shutdown": bool,
        "heartbeat_interval_ms": Opt(int),  # repeated: a new active controller learns it too
    },
    # long-poll the @metadata log from from_offset
    # -> MetadataFetchResponse
    ApiKey.METADATA_FETCH: {
        "node_id": Opt(int),
        "from_offset": int,
        "max_records": int,
        "max_wait_ms": int,
    },
    # -> AlterPartitionResponse
    ApiKey.ALTER_PARTITION: {
        "broker_id": int,
        "broker_epoch": int,
        "topic": str,
        "partition": int,
        "leader_epoch": int,
        "partition_epoch": int,
        "new_isr": [int],
    },
    # -> DescribeQuorumResponse
    # local_only: a voter answers with its own metadata offset only (the leader asks each voter)
    ApiKey.DESCRIBE_QUORUM: {"local_only": Opt(bool)},
    # to the active controller (any node forwards): one single-server change, committed
    # -> RaftVoterResponse
    ApiKey.ADD_RAFT_VOTER: {"voter_id": int, "address": str},
    ApiKey.REMOVE_RAFT_VOTER: {"voter_id": int},
    # ---- consumer groups (kraft/groups; docs in broker/groups/offsets.py and coordinator.py)
    # to the active controller (brokers forward it). member_epoch 0 = join (member_id "" → the
    # controller picks one), -1 = leave, > 0 = heartbeat. subscribed_topics None = unchanged.
    # owned_partitions: what the member holds now (acks revocations).
    # -> ConsumerGroupHeartbeatResponse
    ApiKey.CONSUMER_GROUP_HEARTBEAT: {
        "group_id": str,
        "member_id": str,
        "member_epoch": int,
        "subscribed_topics": Opt([str]),
        "owned_partitions": Opt(_TP_LIST),
        "session_timeout_ms": Opt(int),
        "rebalance_timeout_ms": Opt(int),
        "client_id": Opt(str),
        "client_host": Opt(str),
        "instance_id": Opt(str),  # group_instance_id: static membership (kraft/groups/coordinator.py)
    },
    # to the leader of __consumer_offsets partition crc32(group_id) % partitions (the group's
    # coordinator). member_epoch -1 / member_id None: a commit from outside the group (only
    # while it has no members). min_metadata_offset: the metadata_offset of the member's last
    # heartbeat (the coordinator waits until its image has it before validating).
    # -> PartitionErrorsResponse
    ApiKey.OFFSET_COMMIT: {
        "group_id": str,
        **_MEMBER_OFFSETS,
    },
    # topics None = every committed partition of the group
    # -> OffsetFetchResponse
    # require_stable (KIP-447; read_committed consumers): a partition with offsets pending in
    # an open transaction answers UNSTABLE_OFFSET_COMMIT (retriable) instead of the older offset
    # member_id / member_epoch / min_metadata_offset (as OFFSET_COMMIT's; all absent from outside
    # the group): a member's fetch waits until the coordinator's image has its last heartbeat
    # and is validated like its commits, so no commit of the partitions' previous owner can be
    # accepted after the new owner read the committed offsets (broker/groups/offsets.py)
    ApiKey.OFFSET_FETCH: {"group_id": str, "topics": Opt(_TP_LIST), "require_stable": Opt(bool),
                          "member_id": Opt(str), "member_epoch": Opt(int),
                          "min_metadata_offset": Opt(int)},
    # any broker: groups in its image + groups with offsets it coordinates
    # -> ListGroupsResponse
    ApiKey.LIST_GROUPS: {},
    # to each group's coordinator
    # -> DescribeGroupsResponse
    ApiKey.DESCRIBE_GROUPS: {"groups": [str]},
    # to each group's coordinator; only groups without members (tombstones their offsets)
    # -> DeleteGroupsResponse
    ApiKey.DELETE_GROUPS: {"groups": [str]},
    # to the group's coordinator; only without members. offset >= 0 (resolve earliest/latest/
    # timestamp with LIST_OFFSETS first) -> PartitionErrorsResponse
    # to the group's coordinator: tombstones the named partitions' committed offsets; a topic a
    # member of the group subscribes to is refused (GROUP_SUBSCRIBED_TO_TOPIC) -> PartitionErrorsResponse
    ApiKey.OFFSET_DELETE: {"group_id": str, "topics": _TP_LIST},
    ApiKey.ALTER_GROUP_OFFSETS: {
        "group_id": str,
        # metadata: the application's string stored with the offset (OffsetAndMetadata)
        "topics": [{"name": str, "partitions": [{"partition": int, "offset": int,
                                                 "metadata": Opt(str)}]}],
        "force": Opt(bool),  # also with members (NON_EMPTY_GROUP otherwise)
    },
    # ---- transactions (docs/transactions.md). The coordinator of a transactional id is the
    # leader of __transaction_state partition crc32(id) % partitions.
    # verify_only: a partition leader asks whether (producer_id, producer_epoch) is in an
    # ongoing transaction that holds these partitions; nothing changes.
    # -> PartitionErrorsResponse
    ApiKey.ADD_PARTITIONS_TO_TXN: {
        "transactional_id": str,
        "producer_id": int,
        "producer_epoch": int,
        "topics": _TP_LIST,
        "verify_only": Opt(bool),
    },
    # adds the group's __consumer_offsets partition -> ErrorFields
    ApiKey.ADD_OFFSETS_TO_TXN: {
        "transactional_id": str,
        "producer_id": int,
        "producer_epoch": int,
        "group_id": str,
    },
    # -> ErrorFields; answered once the markers are written and the outcome is complete
    ApiKey.END_TXN: {
        "transactional_id": str,
        "producer_id": int,
        "producer_epoch": int,
        "commit": bool,
    },
    # coordinator -> partition leaders: append a control batch (acks=all) to each partition
    # -> WriteTxnMarkersResponse
    ApiKey.WRITE_TXN_MARKERS: {
        "markers": [{
            "producer_id": int,
            "producer_epoch": int,
            "commit": bool,
            "coordinator_epoch": int,
            # the transaction's number and, per partition, the leader epoch the coordinator
            # addressed: a late marker of an ended transaction is refused (handlers/txn_data.py)
            "txn_seq": Opt(int),
            "topics": [{"name": str, "partitions": [int], "leader_epochs": Opt([int])}],
        }],
        "timeout_ms": Opt(int),
    },
    # to the group's coordinator; the offsets stay pending until the transaction's marker
    # -> as OFFSET_COMMIT
    ApiKey.TXN_OFFSET_COMMIT: {
        "transactional_id": str,
        "group_id": str,
        "producer_id": int,
        "producer_epoch": int,
        **_MEMBER_OFFSETS,
    },
    # -> DescribeTransactionsResponse
    ApiKey.DESCRIBE_TRANSACTIONS: {"transactional_ids": [str]},
    # any broker: the ids it coordinates (the client asks every broker and merges)
    # -> ListTransactionsResponse
    ApiKey.LIST_TRANSACTIONS: {"states": Opt([str])},
    # partition leaders -> DescribeProducersResponse
    ApiKey.DESCRIBE_PRODUCERS: {"topics": _TP_LIST},
    # ---- security (docs/security.md; security/sasl.py). On a SASL listener nothing but
    # API_VERSIONS and these two is served before authentication, in frames of at most
    # sasl.max.unauthenticated.frame.bytes; any error closes the connection.
    # -> SaslHandshakeResponse  (the listener's enabled mechanisms)
    ApiKey.SASL_HANDSHAKE: {"mechanism": str},
    # one SCRAM message each way (client-first, then client-final)
    # -> SaslAuthenticateResponse  (server-first, then server-final)
    ApiKey.SASL_AUTHENTICATE: {"auth_bytes": bytes},
    # forwarded to the controller, which writes UserScramCredential records (never a password:
    # the client derives salt/iterations/stored_key/server_key, security/scram.py)
    # -> AlterUserScramCredentialsResponse
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: {
        "upsertions": Opt([{"user": str, "mechanism": str, "iterations": int, "salt": bytes,
                            "stored_key": bytes, "server_key": bytes}]),
        "deletions": Opt([{"user": str, "mechanism": str}]),
    },
    # any broker, from its image; users None = all
    # -> DescribeUserScramCredentialsResponse
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: {"users": Opt([str])},
    # ACLs (security/acl.py): forwarded to the controller, which writes AclCreated / AclRemoved
    # -> ResultsResponse (results: one per acl, in order)
    ApiKey.CREATE_ACLS: {"acls": [_ACL]},
    # any broker, from its image; a None field matches anything -> DescribeAclsResponse
    ApiKey.DESCRIBE_ACLS: {"filter": _ACL_FILTER},
    # forwarded -> DeleteAclsResponse
    ApiKey.DELETE_ACLS: {"filters": [_ACL_FILTER]},
    # byte-rate quotas (metadata/quotas.py): user "User:<name>" and/or client_id, either may be
    # "<default>"; key producer_byte_rate | consumer_byte_rate; value None removes it.
    # Forwarded to the controller (kraft/quota_admin.py), which writes ClientQuota records
    # -> ResultsResponse (results: one per entry, in order)
    ApiKey.ALTER_CLIENT_QUOTAS: {
        "entries": [{"user": Opt(str), "client_id": Opt(str),
                     "ops": [{"key": str, "value": Opt(float)}]}],
        "validate_only": Opt(bool),
    },
    # any broker, from its image; user / client_id (exact; None = any) filter the entities.
    # -> DescribeClientQuotasResponse  (what THIS broker measured)
    ApiKey.DESCRIBE_CLIENT_QUOTAS: {"user": Opt(str), "client_id": Opt(str)},
    # reassignment (KIP-455, kraft/reassign.py): forwarded to the controller; replicas None
    # cancels; the whole plan is refused if one entry is bad
    # -> MetadataOffsetResponse
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: {
        "partitions": [{"topic": str, "partition": int, "replicas": Opt([int])}],
        "throttle_bytes_per_s": Opt(int), "timeout_ms": Opt(int)},
    # any broker, from its image; topics None = all. A partition leader adds its followers'
    # log end offsets -> ListPartitionReassignmentsResponse
    ApiKey.LIST_PARTITION_REASSIGNMENTS: {"topics": Opt(_TP_LIST)},
    # forwarded; cancel=True puts it back in service (moved replicas stay moved)
    # -> DecommissionBrokerResponse
    ApiKey.DECOMMISSION_BROKER: {"broker_id": int, "throttle_bytes_per_s": Opt(int),
                                 "cancel": Opt(bool), "timeout_ms": Opt(int)},
    # forwarded; a stopped broker that holds no replica -> MetadataOffsetResponse
    ApiKey.UNREGISTER_BROKER: {"broker_id": int, "timeout_ms": Opt(int)},
    # PRODUCE and FETCH answers carry throttle_time_ms (> 0: the client went over its byte-rate
    # quota; the broker held the answer that long, security/throttle.py)
}


def _type_name(spec: Any) -> str:
    if isinstance(spec, type):
        return spec.__name__
    if isinstance(spec, list):
        return "list"
    if isinstance(spec, dict | MapOf):
        return "map"
    return str(spec)


def _check(spec: Any, value: Any, path: str) -> None:
    if isinstance(spec, Opt):
        if value is not None:
            _check(spec.spec, value, path)
        return
    if spec is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ProtocolError(f"{path}: expected int, got {type(value).__name__}")
    elif spec is bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise ProtocolError(f"{path}: expected bytes, got {type(value).__name__}")
    elif isinstance(spec, type):
        if not isinstance(value, spec):
            raise ProtocolError(f"{path}: expected {spec.__name__}, got {type(value).__name__}")
    elif isinstance(spec, list):
        if not isinstance(value, list):
            raise ProtocolError(f"{path}: expected list, got {type(value).__name__}")
        for i, item in enumerate(value):
            _check(spec[0], item, f"{path}[{i}]")
    elif isinstance(spec, MapOf):
        if not isinstance(value, dict):
            raise ProtocolError(f"{path}: expected map, got {type(value).__name__}")
        for k, v in value.items():
            _check(spec.key, k, f"{path} key")
            _check(spec.value, v, f"{path}[{k!r}]")
    elif isinstance(spec, dict):
        if not isinstance(value, dict):
            raise ProtocolError(f"{path}: expected map, got {type(value).__name__}")
        for name, sub in spec.items():
            if name not in value:
                if isinstance(sub, Opt):
                    continue
                raise ProtocolError(f"{path}.{name}: missing ({_type_name(sub)} required)")
            _check(sub, value[name], f"{path}.{name}")
    else:  # pragma: no cover - a bug in SCHEMAS
        raise TypeError(f"bad schema spec {spec!r}")


# --------------------------------------------------------------------------- compiled checks
#
# ``_check`` walks a spec and builds the path of every field it visits, so that its error can
# name the first mismatch: ~3.4 µs for a one-partition PRODUCE body, ~13 calls and ~50
# ``isinstance`` on every request (issue 26's profile of a busy leader). Each schema is
# therefore also compiled, once at import, into one Python function of plain statements (no
# call per field, no path) that only answers "valid or not": ~0.5 µs for the same body. A body
# it refuses goes through ``_check`` again, which raises the named error; ``_check`` stays the
# reference, and tests/protocol/test_schema_compiled.py checks that both accept exactly the
# same bodies.

_MISSING = object()
_BYTES_TYPES = (bytes, bytearray, memoryview)


def _emit(spec: Any, var: str, indent: int, out: list[str], names: dict[str, Any],
          fresh: list[int]) -> None:
    """Statements that ``return False`` unless ``var`` matches ``spec`` (``_check``'s rules)."""
    pad = "    " * indent

    def new_var() -> str:
        fresh[0] += 1
        return f"v{fresh[0]}"

    if isinstance(spec, Opt):
        out.append(f"{pad}if {var} is not None:")
        _emit(spec.spec, var, indent + 1, out, names, fresh)
    elif spec is int:  # an int, never a bool (msgpack's ints are exact ``int``: the first test)
        out.append(f"{pad}if type({var}) is not int and (not isinstance({var}, int) "
                   f"or isinstance({var}, bool)):")
        out.append(f"{pad}    return False")
    elif spec is bytes:
        out.append(f"{pad}if not isinstance({var}, _BYTES_TYPES):")
        out.append(f"{pad}    return False")
    elif isinstance(spec, type):
        name = f"T_{spec.__name__}"
        names[name] = spec
        out.append(f"{pad}if not isinstance({var}, {name}):")
        out.append(f"{pad}    return False")
    elif isinstance(spec, list):
        item = new_var()
        out.append(f"{pad}if not isinstance({var}, list):")
        out.append(f"{pad}    return False")
        out.append(f"{pad}for {item} in {var}:")
        _emit(spec[0], item, indent + 1, out, names, fresh)
    elif isinstance(spec, MapOf):
        k, v = new_var(), new_var()
        out.append(f"{pad}if not isinstance({var}, dict):")
        out.append(f"{pad}    return False")
        out.append(f"{pad}for {k}, {v} in {var}.items():")
        _emit(spec.key, k, indent + 1, out, names, fresh)
        _emit(spec.value, v, indent + 1, out, names, fresh)
    elif isinstance(spec, dict):
        out.append(f"{pad}if not isinstance({var}, dict):")
        out.append(f"{pad}    return False")
        for field, sub in spec.items():
            x = new_var()
            out.append(f"{pad}{x} = {var}.get({field!r}, _MISSING)")
            if isinstance(sub, Opt):  # missing or None: fine
                out.append(f"{pad}if {x} is not _MISSING and {x} is not None:")
                _emit(sub.spec, x, indent + 1, out, names, fresh)
            else:
                out.append(f"{pad}if {x} is _MISSING:")
                out.append(f"{pad}    return False")
                _emit(sub, x, indent, out, names, fresh)
    else:  # pragma: no cover - a bug in SCHEMAS
        raise TypeError(f"bad schema spec {spec!r}")


def compile_spec(spec: Any) -> Any:
    """A function ``f(value) -> bool``: True exactly when ``_check(spec, value, ...)`` passes."""
    out = ["def check(v0):"]
    names: dict[str, Any] = {"_MISSING": _MISSING, "_BYTES_TYPES": _BYTES_TYPES}
    _emit(spec, "v0", 1, out, names, [0])
    out.append("    return True")
    exec("\n".join(out), names)  # noqa: S102 - source built above from SCHEMAS only
    return names["check"]


_COMPILED: dict[int, Any] = {int(key): compile_spec(spec) for key, spec in SCHEMAS.items()}


def validate_request(api_key: int, body: Any) -> None:
    """Check ``body`` against the schema of ``api_key``; raise ``ProtocolError`` naming the path."""
    check = _COMPILED.get(api_key) if type(api_key) is int else None
    if check is not None and check(body):
        return
    try:
        key = ApiKey(api_key)
    except ValueError:
        raise UnknownApiError(f"unknown api key {api_key}") from None
    _check(SCHEMAS[key], body, key.name.lower())  # the named error (or, were the compiled
    # check ever stricter than the reference, the reference's verdict)
