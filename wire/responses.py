"""The response body of every rafka API, as typed data, beside the request schemas of
``wire/apis.py``.

Theory of operation
-------------------
A response body is a msgpack map decoded into a plain ``dict``; this module says, once, which
keys it holds. Each API's answer is a ``TypedDict`` (``TopicsResponse[entry]`` for the
per-topic answers), and the API's ``ApiSpec`` row in ``wire/api_table.py`` names it, next to
the request schema, its route and its ACL.

Why ``TypedDict`` and not frozen dataclasses: a ``TypedDict`` *is* the ``dict`` msgpack hands
out, so typing a body costs nothing at run time — no object built per answer, no copy, no
conversion on the produce/fetch hot path (docs/performance.md), and the ~340 ``body["key"]``
reads across the code base keep working unchanged while ``mypy`` checks the ones that say
which schema they read (``cast(ProduceResponse, resp.body)``). The
schemas stay introspectable (``__required_keys__``, ``__annotations__``), so a test can check
real answers against them (``tests/protocol/test_api_table.py``).

Every top-level answer may be an error answer only (``wire.dispatch.error_body``: ``error`` and
``message``, nothing else — an unknown API, a failed schema check, a refused ACL, a handler
crash), so the top-level types are ``total=False``: a reader checks ``error`` before it reads
the rest. Nested entries (a topic, a partition) always carry their keys; a key some answers
leave out is ``NotRequired``.
"""

# no "from __future__ import annotations": TypedDict reads NotRequired from evaluated annotations

from typing import Any, Generic, NotRequired, TypedDict, TypeVar

__all__ = [
    "ErrorFields",
    "MetadataOffsetResponse",
    "ResultsResponse",
    "TopicsResponse",
    "ApiVersionsResponse",
    "MetadataResponse",
    "ProducePartition",
    "ProduceResponse",
    "FetchPartition",
    "FetchResponse",
    "CreatedTopic",
    "InitProducerIdResponse",
    "FindCoordinatorResponse",
    "BrokerRegistrationResponse",
    "BrokerHeartbeatResponse",
    "MetadataFetchResponse",
    "AlterPartitionResponse",
    "NotControllerResponse",
    "DescribeQuorumResponse",
    "RaftVoterResponse",
    "ConsumerGroupHeartbeatResponse",
    "ListGroupsResponse",
    "DescribeGroupsResponse",
    "DeleteGroupsResponse",
    "WriteTxnMarkersResponse",
    "DescribeTransactionsResponse",
    "ListTransactionsResponse",
    "SaslHandshakeResponse",
    "SaslAuthenticateResponse",
    "AlterUserScramCredentialsResponse",
    "DescribeUserScramCredentialsResponse",
    "DescribeAclsResponse",
    "DeleteAclsResponse",
    "DescribeClientQuotasResponse",
    "ListPartitionReassignmentsResponse",
    "DecommissionBrokerResponse",
    "TopicErrorsResponse",
    "PartitionErrorsResponse",
    "DeleteRecordsResponse",
    "ListOffsetsResponse",
    "CreateTopicsResponse",
    "DescribeConfigsResponse",
    "OffsetFetchResponse",
    "DescribeProducersResponse",
    "AclEntry",
]


T = TypeVar("T")


class ErrorFields(TypedDict, total=False):
    """What every answer may carry: an error code (0 or absent: none) and its message."""

    error: int
    message: str | None


class _Outcome(TypedDict):
    """An entry's own outcome (a topic's, a partition's, a group's…): 0 or an error code."""

    error: int
    message: NotRequired[str | None]


class _PartitionError(_Outcome):
    partition: int


class _TopicPartitionErrors(TypedDict):
    name: str
    partitions: list[_PartitionError]


class _TopicError(_Outcome):
    name: str


class _TopicPartitions(TypedDict):
    """``_TP_LIST`` of the request schemas: a topic and partition indexes."""

    name: str
    partitions: list[int]


class MetadataOffsetResponse(ErrorFields, total=False):
    """The answer of a metadata-changing admin API: the offset of its records (the client
    waits until a broker's image has it)."""

    metadata_offset: int


class ResultsResponse(MetadataOffsetResponse, total=False):
    """CREATE_ACLS, ALTER_CLIENT_QUOTAS (forwarded): one result per entry, in order."""

    results: list[ErrorFields]


class TopicsResponse(MetadataOffsetResponse, Generic[T], total=False):
    """An answer with one entry per topic of the request (``T``: that entry). The per-topic
    answers share it: LIST_OFFSETS, CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS,
    ALTER_CONFIGS, DESCRIBE_CONFIGS, ELECT_LEADERS, the offset commits, OFFSET_FETCH,
    ADD_PARTITIONS_TO_TXN, DESCRIBE_PRODUCERS (an alias below names each one); those
    that change metadata also carry ``metadata_offset``."""

    topics: list[T]


TopicErrorsResponse = TopicsResponse[_TopicError]  # DELETE_TOPICS, CREATE_PARTITIONS, ALTER_CONFIGS
# ELECT_LEADERS, OFFSET_COMMIT, ALTER_GROUP_OFFSETS, TXN_OFFSET_COMMIT, ADD_PARTITIONS_TO_TXN
PartitionErrorsResponse = TopicsResponse[_TopicPartitionErrors]


class _LowWatermark(_PartitionError):
    low_watermark: int  # the partition's log start offset after the deletion (-1: error)


class _TopicLowWatermarks(TypedDict):
    name: str
    partitions: list[_LowWatermark]


DeleteRecordsResponse = TopicsResponse[_TopicLowWatermarks]


# --------------------------------------------------------------------------- data plane


class ApiVersionsResponse(ErrorFields, total=False):
    """API_VERSIONS: the api keys this node serves (its roles decide)."""

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
    """METADATA: the brokers and the topics of the answering broker's image."""

    cluster_id: str
    controller_id: int
    brokers: list[_Broker]
    topics: list[_MetadataTopic]


class ProducePartition(_Outcome):
    partition: int
    base_offset: NotRequired[int]
    log_append_time: NotRequired[int]
    log_start_offset: NotRequired[int]


class _ProduceTopic(TypedDict):
    name: str
    partitions: list[ProducePartition]


class ProduceResponse(ErrorFields, total=False):
    """PRODUCE: per partition, the base offset of the appended batches or why not."""

    topics: list[_ProduceTopic]
    throttle_time_ms: int  # > 0: over a byte-rate quota (security/throttle.py)


class _DivergingEpoch(TypedDict):
    epoch: int
    end_offset: int


class FetchPartition(_Outcome):
    """One partition of a FETCH answer; its ``records_len`` bytes follow the head on the wire,
    in body order (``wire/protocol.py``)."""

    partition: int
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
    """FETCH: per partition, its offsets and how many record bytes follow the head."""

    topics: list[_FetchTopic]
    throttle_time_ms: int


class _ListOffsetsPartition(_Outcome):
    partition: int
    offset: NotRequired[int]
    timestamp: NotRequired[int]
    leader_epoch: NotRequired[int]


class _ListOffsetsTopic(TypedDict):
    name: str
    partitions: list[_ListOffsetsPartition]


ListOffsetsResponse = TopicsResponse[_ListOffsetsTopic]


class CreatedTopic(_TopicError):
    topic_id: NotRequired[str | None]
    num_partitions: NotRequired[int]
    replication_factor: NotRequired[int]


CreateTopicsResponse = TopicsResponse[CreatedTopic]


class _ConfigsTopic(_TopicError):
    configs: NotRequired[dict[str, str]]


DescribeConfigsResponse = TopicsResponse[_ConfigsTopic]


class InitProducerIdResponse(ErrorFields, total=False):
    """INIT_PRODUCER_ID: the producer id and epoch to write with."""

    producer_id: int
    producer_epoch: int


class _Coordinator(TypedDict):
    key: str
    node_id: int
    host: str | None
    port: int | None
    error: NotRequired[int]
    message: NotRequired[str | None]


class FindCoordinatorResponse(ErrorFields, total=False):
    """FIND_COORDINATOR: per key, the broker that coordinates it."""

    coordinators: list[_Coordinator]


# --------------------------------------------------------------------------- controller


class BrokerRegistrationResponse(ErrorFields, total=False):
    """BROKER_REGISTRATION: the epoch of this broker incarnation."""

    broker_epoch: int


class BrokerHeartbeatResponse(ErrorFields, total=False):
    """BROKER_HEARTBEAT: what the controller wants of the broker."""

    is_caught_up: bool
    is_fenced: bool
    should_shutdown: bool


class _Snapshot(TypedDict):
    offset: int
    epoch: int
    records: list[Any]


class MetadataFetchResponse(ErrorFields, total=False):
    """METADATA_FETCH: committed @metadata records from an offset, or a snapshot."""

    leader_id: int
    entries: list[list[Any]]  # [offset, epoch, record]
    committed_offset: int
    log_start_offset: int
    snapshot: _Snapshot | None


class AlterPartitionResponse(ErrorFields, total=False):
    """ALTER_PARTITION: the partition's registration after the ISR change."""

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
    """DESCRIBE_QUORUM: the leader, and each voter's and observer's progress."""

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
    """CONSUMER_GROUP_HEARTBEAT (forwarded): the member's epoch and target assignment."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: list[_TopicPartitions] | None
    metadata_offset: int


class _FetchedOffset(TypedDict):
    partition: int
    offset: int  # -1: none committed
    metadata: NotRequired[str | None]
    commit_timestamp: NotRequired[int]
    leader_epoch: NotRequired[int]  # -1: not known
    error: NotRequired[int]


class _FetchedOffsetsTopic(TypedDict):
    name: str
    partitions: list[_FetchedOffset]


OffsetFetchResponse = TopicsResponse[_FetchedOffsetsTopic]


class _ListedGroup(TypedDict):
    group_id: str
    state: str
    members: NotRequired[int]
    group_epoch: NotRequired[int]


class ListGroupsResponse(ErrorFields, total=False):
    """LIST_GROUPS: the groups the answering broker knows or coordinates."""

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


class _DescribedGroup(_Outcome):
    group_id: str
    state: NotRequired[str]
    group_epoch: NotRequired[int]
    assignment_epoch: NotRequired[int]
    members: NotRequired[list[_GroupMember]]
    offsets: NotRequired[list[_FetchedOffsetsTopic]]


class DescribeGroupsResponse(ErrorFields, total=False):
    """DESCRIBE_GROUPS: per group, its state, members and offsets."""

    groups: list[_DescribedGroup]


class _GroupError(_Outcome):
    group_id: str


class DeleteGroupsResponse(ErrorFields, total=False):
    """DELETE_GROUPS: per group, deleted or why not (NON_EMPTY_GROUP...)."""

    groups: list[_GroupError]


# --------------------------------------------------------------------------- transactions


class _MarkerResult(TypedDict):
    producer_id: int
    topics: list[_TopicPartitionErrors]


class WriteTxnMarkersResponse(ErrorFields, total=False):
    """WRITE_TXN_MARKERS: per producer and partition, the marker's outcome."""

    markers: list[_MarkerResult]


class _DescribedTransaction(_Outcome):
    transactional_id: str
    state: NotRequired[str]
    producer_id: NotRequired[int]
    producer_epoch: NotRequired[int]
    timeout_ms: NotRequired[int]
    txn_start_ms: NotRequired[int]
    last_update_ms: NotRequired[int]
    partitions: NotRequired[list[_TopicPartitions]]


class DescribeTransactionsResponse(ErrorFields, total=False):
    """DESCRIBE_TRANSACTIONS: per transactional id, its state and partitions."""

    transactions: list[_DescribedTransaction]


class _ListedTransaction(TypedDict):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str


class ListTransactionsResponse(ErrorFields, total=False):
    """LIST_TRANSACTIONS: the ids the answering broker coordinates."""

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


DescribeProducersResponse = TopicsResponse[_ProducersTopic]


# --------------------------------------------------------------------------- security


class SaslHandshakeResponse(ErrorFields, total=False):
    """SASL_HANDSHAKE: the mechanisms the listener enables."""

    mechanisms: list[str]


class SaslAuthenticateResponse(ErrorFields, total=False):
    """SASL_AUTHENTICATE: the server's SCRAM message (server-first, then -final)."""

    auth_bytes: bytes


class _ScramResult(_Outcome):
    user: str
    mechanism: str


class AlterUserScramCredentialsResponse(MetadataOffsetResponse, total=False):
    """ALTER_USER_SCRAM_CREDENTIALS (forwarded): per user and mechanism, the outcome."""

    results: list[_ScramResult]


class _ScramCredential(TypedDict):
    mechanism: str
    iterations: int


class _ScramUser(_Outcome):
    user: str
    credentials: list[_ScramCredential]


class DescribeUserScramCredentialsResponse(ErrorFields, total=False):
    """DESCRIBE_USER_SCRAM_CREDENTIALS: per user, its mechanisms (never a secret)."""

    users: list[_ScramUser]


# an access control entry (security/acl.py): the keys of the request schema's _ACL
# (wire/apis.py), every value a str — a map, not a second TypedDict spelling the same seven
# fields as _ACL and metadata.security.Acl already do
AclEntry = dict[str, str]


class DescribeAclsResponse(ErrorFields, total=False):
    """DESCRIBE_ACLS: the entries of the image that match the filter."""

    acls: list[AclEntry]


class _DeleteAclsResult(ErrorFields, total=False):
    deleted: list[AclEntry]


class DeleteAclsResponse(MetadataOffsetResponse, total=False):
    """DELETE_ACLS (forwarded): per filter, the entries it removed."""

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
    """DESCRIBE_CLIENT_QUOTAS: the quota entries, and what this broker measured."""

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
    """LIST_PARTITION_REASSIGNMENTS: the moves under way (log end offsets from leaders)."""

    reassignments: list[_Reassignment]


class _MovedPartition(TypedDict):
    topic: str
    partition: int
    replicas: list[int]


class DecommissionBrokerResponse(MetadataOffsetResponse, total=False):
    """DECOMMISSION_BROKER (forwarded): the partitions moved off the broker."""

    moved: list[_MovedPartition]
