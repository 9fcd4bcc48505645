"""The response body of every rafka API, as typed data (``RESPONSES``), beside the request
schemas of ``wire/apis.py``.

Theory of operation
-------------------
A response body is a msgpack map decoded into a plain ``dict``; this module says, once, which
keys it holds. Each API's answer is a ``TypedDict`` and ``RESPONSES`` maps its ``ApiKey`` to it
(``wire/api_table.py`` puts it in the API's ``ApiSpec`` row next to the request schema).

Why ``TypedDict`` and not frozen dataclasses: a ``TypedDict`` *is* the ``dict`` msgpack hands
out, so typing a body costs nothing at run time — no object built per answer, no copy, no
conversion on the produce/fetch hot path (docs/performance.md), and the ~340 ``body["key"]``
reads across the code base keep working unchanged while ``mypy`` checks the ones that say
which schema they read (``cast(ProduceResponse, resp.body)`` or ``Response.typed``). The
schemas stay introspectable (``__required_keys__``, ``__annotations__``), so a test can check
real answers against them (``tests/protocol/test_api_table.py``).

Every top-level answer may be an error answer only (``wire.dispatch.error_body``: ``error`` and
``message``, nothing else — an unknown API, a failed schema check, a refused ACL, a handler
crash), so the top-level types are ``total=False``: a reader checks ``error`` before it reads
the rest. Nested entries (a topic, a partition) always carry their keys; a key some answers
leave out is ``NotRequired``.
"""

# no "from __future__ import annotations": TypedDict reads NotRequired from evaluated annotations

from typing import Any, NotRequired, TypedDict

from rafka.wire.apis import ApiKey

__all__ = [
    "RESPONSES",
    "ErrorFields",
    "MetadataOffsetResponse",
    "ResultsResponse",
    "ApiVersionsResponse",
    "MetadataResponse",
    "ProducePartition",
    "ProduceResponse",
    "FetchPartition",
    "FetchResponse",
    "ListOffsetsResponse",
    "CreateTopicsResponse",
    "TopicErrorsResponse",
    "DescribeConfigsResponse",
    "InitProducerIdResponse",
    "ElectLeadersResponse",
    "FindCoordinatorResponse",
    "BrokerRegistrationResponse",
    "BrokerHeartbeatResponse",
    "MetadataFetchResponse",
    "AlterPartitionResponse",
    "NotControllerResponse",
    "DescribeQuorumResponse",
    "RaftVoterResponse",
    "ConsumerGroupHeartbeatResponse",
    "OffsetCommitResponse",
    "OffsetFetchResponse",
    "ListGroupsResponse",
    "DescribeGroupsResponse",
    "DeleteGroupsResponse",
    "AddPartitionsToTxnResponse",
    "WriteTxnMarkersResponse",
    "DescribeTransactionsResponse",
    "ListTransactionsResponse",
    "DescribeProducersResponse",
    "SaslHandshakeResponse",
    "SaslAuthenticateResponse",
    "AlterUserScramCredentialsResponse",
    "DescribeUserScramCredentialsResponse",
    "AclEntry",
    "DescribeAclsResponse",
    "DeleteAclsResponse",
    "DescribeClientQuotasResponse",
    "ListPartitionReassignmentsResponse",
    "DecommissionBrokerResponse",
]


class ErrorFields(TypedDict, total=False):
    """What every answer may carry: an error code (0 or absent: none) and its message."""

    error: int
    message: str | None


class _PartitionError(TypedDict):
    partition: int
    error: int
    message: NotRequired[str | None]


class _TopicPartitionErrors(TypedDict):
    name: str
    partitions: list[_PartitionError]


class _TopicError(TypedDict):
    name: str
    error: int
    message: NotRequired[str | None]


class _TopicPartitions(TypedDict):
    """``_TP_LIST`` of the request schemas: a topic and partition indexes."""

    name: str
    partitions: list[int]


class MetadataOffsetResponse(ErrorFields, total=False):
    """The answer of a metadata-changing admin API: the offset of its records (the client
    waits until a broker's image has it)."""

    metadata_offset: int


class ResultsResponse(MetadataOffsetResponse, total=False):
    results: list[ErrorFields]


# --------------------------------------------------------------------------- data plane


class ApiVersionsResponse(ErrorFields, total=False):
    apis: list[list[int]]  # [api_key, min_version, max_version]


class _Broker(TypedDict):
    node_id: int
    host: str
    port: int
    rack: str | None


class _MetadataPartition(TypedDict):
    partition: int
    error: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]


class _MetadataTopic(TypedDict):
    name: str
    error: int
    topic_id: NotRequired[str | None]
    is_internal: NotRequired[bool]
    configs: NotRequired[dict[str, str]]
    partitions: list[_MetadataPartition]


class MetadataResponse(ErrorFields, total=False):
    cluster_id: str
    controller_id: int
    brokers: list[_Broker]
    topics: list[_MetadataTopic]


class ProducePartition(TypedDict):
    partition: int
    error: int
    message: NotRequired[str | None]
    base_offset: NotRequired[int]
    log_append_time: NotRequired[int]
    log_start_offset: NotRequired[int]


class _ProduceTopic(TypedDict):
    name: str
    partitions: list[ProducePartition]


class ProduceResponse(ErrorFields, total=False):
    topics: list[_ProduceTopic]
    throttle_time_ms: int  # > 0: over a byte-rate quota (security/throttle.py)


class _DivergingEpoch(TypedDict):
    epoch: int
    end_offset: int


class FetchPartition(TypedDict):
    """One partition of a FETCH answer; its ``records_len`` bytes follow the head on the wire,
    in body order (``wire/protocol.py``)."""

    partition: int
    error: int
    message: NotRequired[str | None]
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    diverging_epoch: _DivergingEpoch | None
    records_len: int
    last_stable_offset: NotRequired[int]  # consumers
    aborted_transactions: NotRequired[list[list[int]] | None]  # read_committed: [pid, first]


class _FetchTopic(TypedDict):
    name: str
    partitions: list[FetchPartition]


class FetchResponse(ErrorFields, total=False):
    topics: list[_FetchTopic]
    throttle_time_ms: int


class _ListOffsetsPartition(TypedDict):
    partition: int
    error: int
    message: NotRequired[str | None]
    offset: NotRequired[int]
    timestamp: NotRequired[int]
    leader_epoch: NotRequired[int]


class _ListOffsetsTopic(TypedDict):
    name: str
    partitions: list[_ListOffsetsPartition]


class ListOffsetsResponse(ErrorFields, total=False):
    topics: list[_ListOffsetsTopic]


class _CreatedTopic(_TopicError):
    topic_id: NotRequired[str | None]
    num_partitions: NotRequired[int]
    replication_factor: NotRequired[int]


class CreateTopicsResponse(MetadataOffsetResponse, total=False):
    topics: list[_CreatedTopic]


class TopicErrorsResponse(MetadataOffsetResponse, total=False):
    """DELETE_TOPICS, CREATE_PARTITIONS, ALTER_CONFIGS."""

    topics: list[_TopicError]


class _ConfigsTopic(_TopicError):
    configs: NotRequired[dict[str, str]]


class DescribeConfigsResponse(ErrorFields, total=False):
    topics: list[_ConfigsTopic]


class InitProducerIdResponse(ErrorFields, total=False):
    producer_id: int
    producer_epoch: int


class ElectLeadersResponse(MetadataOffsetResponse, total=False):
    topics: list[_TopicPartitionErrors]


class _Coordinator(TypedDict):
    key: str
    node_id: int
    host: str | None
    port: int | None
    error: NotRequired[int]
    message: NotRequired[str | None]


class FindCoordinatorResponse(ErrorFields, total=False):
    coordinators: list[_Coordinator]


# --------------------------------------------------------------------------- controller


class BrokerRegistrationResponse(ErrorFields, total=False):
    broker_epoch: int


class BrokerHeartbeatResponse(ErrorFields, total=False):
    is_caught_up: bool
    is_fenced: bool
    should_shutdown: bool


class _Snapshot(TypedDict):
    offset: int
    epoch: int
    records: list[Any]


class MetadataFetchResponse(ErrorFields, total=False):
    leader_id: int
    entries: list[list[Any]]  # [offset, epoch, record]
    committed_offset: int
    log_start_offset: int
    snapshot: _Snapshot | None


class AlterPartitionResponse(ErrorFields, total=False):
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: list[int]


class NotControllerResponse(ErrorFields, total=False):
    """What a node that is not (or not the active) controller answers a controller API."""

    leader_id: int
    leader_host: str | None
    leader_port: int | None


class _QuorumVoter(TypedDict):
    id: int
    raft: NotRequired[str]
    rpc: NotRequired[str]
    directory_id: NotRequired[str | None]
    metadata_offset: NotRequired[int]  # DESCRIBE_QUORUM
    lag: NotRequired[int]


class DescribeQuorumResponse(ErrorFields, total=False):
    leader_id: int
    epoch: int
    high_watermark: int
    voters: list[_QuorumVoter]
    observers: list[_QuorumVoter]


class RaftVoterResponse(ErrorFields, total=False):
    """ADD_RAFT_VOTER, REMOVE_RAFT_VOTER: the voter set after the change."""

    voters: list[_QuorumVoter]


# --------------------------------------------------------------------------- groups


class ConsumerGroupHeartbeatResponse(ErrorFields, total=False):
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: list[_TopicPartitions] | None
    metadata_offset: int


class OffsetCommitResponse(ErrorFields, total=False):
    """OFFSET_COMMIT, ALTER_GROUP_OFFSETS, TXN_OFFSET_COMMIT."""

    topics: list[_TopicPartitionErrors]


class _FetchedOffset(TypedDict):
    partition: int
    offset: int  # -1: none committed
    metadata: NotRequired[str | None]
    commit_timestamp: NotRequired[int]
    error: NotRequired[int]


class _FetchedOffsetsTopic(TypedDict):
    name: str
    partitions: list[_FetchedOffset]


class OffsetFetchResponse(ErrorFields, total=False):
    topics: list[_FetchedOffsetsTopic]


class _ListedGroup(TypedDict):
    group_id: str
    state: str
    members: NotRequired[int]
    group_epoch: NotRequired[int]


class ListGroupsResponse(ErrorFields, total=False):
    groups: list[_ListedGroup]


class _GroupMember(TypedDict):
    member_id: str
    member_epoch: int
    client_id: NotRequired[str]
    client_host: NotRequired[str]
    subscribed_topics: NotRequired[list[str]]
    assignment: NotRequired[list[_TopicPartitions]]
    target: NotRequired[list[_TopicPartitions]]
    pending_revocation: NotRequired[list[_TopicPartitions]]


class _DescribedGroup(TypedDict):
    group_id: str
    error: int
    message: NotRequired[str | None]
    state: NotRequired[str]
    group_epoch: NotRequired[int]
    assignment_epoch: NotRequired[int]
    members: NotRequired[list[_GroupMember]]
    offsets: NotRequired[list[_FetchedOffsetsTopic]]


class DescribeGroupsResponse(ErrorFields, total=False):
    groups: list[_DescribedGroup]


class _GroupError(TypedDict):
    group_id: str
    error: int
    message: NotRequired[str | None]


class DeleteGroupsResponse(ErrorFields, total=False):
    groups: list[_GroupError]


# --------------------------------------------------------------------------- transactions


class AddPartitionsToTxnResponse(ErrorFields, total=False):
    topics: list[_TopicPartitionErrors]


class _MarkerResult(TypedDict):
    producer_id: int
    topics: list[_TopicPartitionErrors]


class WriteTxnMarkersResponse(ErrorFields, total=False):
    markers: list[_MarkerResult]


class _DescribedTransaction(TypedDict):
    transactional_id: str
    error: int
    message: NotRequired[str | None]
    state: NotRequired[str]
    producer_id: NotRequired[int]
    producer_epoch: NotRequired[int]
    timeout_ms: NotRequired[int]
    txn_start_ms: NotRequired[int]
    last_update_ms: NotRequired[int]
    partitions: NotRequired[list[_TopicPartitions]]


class DescribeTransactionsResponse(ErrorFields, total=False):
    transactions: list[_DescribedTransaction]


class _ListedTransaction(TypedDict):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str


class ListTransactionsResponse(ErrorFields, total=False):
    transactions: list[_ListedTransaction]


class _ProducerState(TypedDict):
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    txn_first_offset: int | None


class _ProducersPartition(_PartitionError):
    producers: NotRequired[list[_ProducerState]]


class _ProducersTopic(TypedDict):
    name: str
    partitions: list[_ProducersPartition]


class DescribeProducersResponse(ErrorFields, total=False):
    topics: list[_ProducersTopic]


# --------------------------------------------------------------------------- security


class SaslHandshakeResponse(ErrorFields, total=False):
    mechanisms: list[str]


class SaslAuthenticateResponse(ErrorFields, total=False):
    auth_bytes: bytes


class _ScramResult(TypedDict):
    user: str
    mechanism: str
    error: int
    message: NotRequired[str | None]


class AlterUserScramCredentialsResponse(MetadataOffsetResponse, total=False):
    results: list[_ScramResult]


class _ScramCredential(TypedDict):
    mechanism: str
    iterations: int


class _ScramUser(TypedDict):
    user: str
    error: int
    message: NotRequired[str | None]
    credentials: list[_ScramCredential]


class DescribeUserScramCredentialsResponse(ErrorFields, total=False):
    users: list[_ScramUser]


class AclEntry(TypedDict):
    """An access control entry (``security/acl.py``), as CREATE_ACLS sends it."""

    principal: str
    resource_type: str
    pattern_type: str
    resource_name: str
    operation: str
    permission: str
    host: str


class DescribeAclsResponse(ErrorFields, total=False):
    acls: list[AclEntry]


class _DeleteAclsResult(ErrorFields, total=False):
    deleted: list[AclEntry]


class DeleteAclsResponse(MetadataOffsetResponse, total=False):
    results: list[_DeleteAclsResult]


class _QuotaEntry(TypedDict):
    user: str | None
    client_id: str | None
    values: dict[str, float]


class _QuotaUsage(TypedDict):
    kind: str
    entity: list[str]
    quota: float
    window_bytes: list[list[int]]  # [start_ms, bytes]
    throttle_count: int
    throttle_time_ms_total: int


class DescribeClientQuotasResponse(ErrorFields, total=False):
    entries: list[_QuotaEntry]
    usage: list[_QuotaUsage]  # what the answering broker measured


# --------------------------------------------------------------------------- reassignment


class _Reassignment(TypedDict):
    topic: str
    partition: int
    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]
    isr: list[int]
    leader: int
    throttle_bytes_per_s: int | None
    log_end_offsets: dict[int, int] | None


class ListPartitionReassignmentsResponse(ErrorFields, total=False):
    reassignments: list[_Reassignment]


class _MovedPartition(TypedDict):
    topic: str
    partition: int
    replicas: list[int]


class DecommissionBrokerResponse(MetadataOffsetResponse, total=False):
    moved: list[_MovedPartition]


RESPONSES: dict[ApiKey, type] = {
    ApiKey.API_VERSIONS: ApiVersionsResponse,
    ApiKey.METADATA: MetadataResponse,
    ApiKey.PRODUCE: ProduceResponse,
    ApiKey.FETCH: FetchResponse,
    ApiKey.LIST_OFFSETS: ListOffsetsResponse,
    ApiKey.CREATE_TOPICS: CreateTopicsResponse,
    ApiKey.DELETE_TOPICS: TopicErrorsResponse,
    ApiKey.DESCRIBE_CONFIGS: DescribeConfigsResponse,
    ApiKey.CREATE_PARTITIONS: TopicErrorsResponse,
    ApiKey.INIT_PRODUCER_ID: InitProducerIdResponse,
    ApiKey.ALTER_CONFIGS: TopicErrorsResponse,
    ApiKey.ELECT_LEADERS: ElectLeadersResponse,
    ApiKey.FIND_COORDINATOR: FindCoordinatorResponse,
    ApiKey.BROKER_REGISTRATION: BrokerRegistrationResponse,
    ApiKey.BROKER_HEARTBEAT: BrokerHeartbeatResponse,
    ApiKey.METADATA_FETCH: MetadataFetchResponse,
    ApiKey.ALTER_PARTITION: AlterPartitionResponse,
    ApiKey.DESCRIBE_QUORUM: DescribeQuorumResponse,
    ApiKey.ADD_RAFT_VOTER: RaftVoterResponse,
    ApiKey.REMOVE_RAFT_VOTER: RaftVoterResponse,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: ConsumerGroupHeartbeatResponse,
    ApiKey.OFFSET_COMMIT: OffsetCommitResponse,
    ApiKey.OFFSET_FETCH: OffsetFetchResponse,
    ApiKey.LIST_GROUPS: ListGroupsResponse,
    ApiKey.DESCRIBE_GROUPS: DescribeGroupsResponse,
    ApiKey.DELETE_GROUPS: DeleteGroupsResponse,
    ApiKey.ALTER_GROUP_OFFSETS: OffsetCommitResponse,
    ApiKey.ADD_PARTITIONS_TO_TXN: AddPartitionsToTxnResponse,
    ApiKey.ADD_OFFSETS_TO_TXN: ErrorFields,
    ApiKey.END_TXN: ErrorFields,
    ApiKey.WRITE_TXN_MARKERS: WriteTxnMarkersResponse,
    ApiKey.TXN_OFFSET_COMMIT: OffsetCommitResponse,
    ApiKey.DESCRIBE_TRANSACTIONS: DescribeTransactionsResponse,
    ApiKey.LIST_TRANSACTIONS: ListTransactionsResponse,
    ApiKey.DESCRIBE_PRODUCERS: DescribeProducersResponse,
    ApiKey.SASL_HANDSHAKE: SaslHandshakeResponse,
    ApiKey.SASL_AUTHENTICATE: SaslAuthenticateResponse,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: AlterUserScramCredentialsResponse,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: DescribeUserScramCredentialsResponse,
    ApiKey.CREATE_ACLS: ResultsResponse,
    ApiKey.DESCRIBE_ACLS: DescribeAclsResponse,
    ApiKey.DELETE_ACLS: DeleteAclsResponse,
    ApiKey.ALTER_CLIENT_QUOTAS: ResultsResponse,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: DescribeClientQuotasResponse,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: MetadataOffsetResponse,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: ListPartitionReassignmentsResponse,
    ApiKey.DECOMMISSION_BROKER: DecommissionBrokerResponse,
    ApiKey.UNREGISTER_BROKER: MetadataOffsetResponse,
}
