"""The one API table: for every ``ApiKey``, its request schema, response type, route, ACL and
origin, in one ``ApiSpec`` row.

Theory of operation
-------------------
``API_TABLE[key]`` is an ``ApiSpec(request, response, route, acl, since)``:

* ``request`` — the schema ``wire.apis.validate_request`` checks (``SCHEMAS[key]``);
* ``response`` — the ``TypedDict`` of its answer (``wire/responses.py``);
* ``route`` — which part of a node answers it (``Route``); a broker's ``NodeApi.dispatch``
  (``broker/handlers/__init__.py``) derives its API sets from it, the controller's
  ``ControllerService.handlers`` must hold exactly the keys ``controller_keys()`` names;
* ``acl`` — what the authorizer (``security/authz.py``) checks before dispatch (``Acl``); its
  per-kind tables are read off this column;
* ``since`` — the change that added the API (a commit or issue), for readers and changelogs.

Everything else that needs "which APIs are X" asks this table (``keys_routed``,
``keys_with_acl``) rather than keeping its own list, so adding an API is one row here plus
one handler where its route says — and ``tests/protocol/test_api_table.py`` fails if a key
has no row, no handler on its route or no ACL. A second protocol (Kafka's wire protocol,
issue 23) translates its own api keys onto these rows instead of growing a table of its own.

Some rows need a word more than their columns say; the code that implements it names the row:
an ``INIT_PRODUCER_ID`` with a ``transactional_id`` goes to that id's transaction coordinator,
without one it is forwarded; ``DESCRIBE_CONFIGS`` is also answered by a controller-only node
(``ApiSpec.also`` names such second routes); a follower FETCH (``replica_id >= 0``) needs
cluster_action instead of read on its topics; a transactional PRODUCE also needs write on its
transactional id, a TXN_OFFSET_COMMIT also read on its group.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from rafka.wire import responses as r
from rafka.wire.apis import SCHEMAS, ApiKey

__all__ = ["Route", "AclScope", "Acl", "ApiSpec", "API_TABLE", "keys_routed", "keys_with_acl",
           "controller_keys", "spec_of"]


class Route(enum.Enum):
    """Which part of a node answers a request."""

    NODE = "node"  # any node itself, whatever its roles (API_VERSIONS)
    BROKER = "broker"  # this broker's handlers (data plane, its image, its partitions)
    FORWARDED = "forwarded"  # a broker forwards it to the active controller, whose handler answers
    CONTROLLER = "controller"  # the controller only (brokers' own RPCs); others: NOT_CONTROLLER
    QUORUM = "quorum"  # the active controller of the quorum; any node finds it for the client
    GROUP_COORDINATOR = "group_coordinator"  # the broker leading the group's __consumer_offsets
    TXN_COORDINATOR = "txn_coordinator"  # the broker leading the id's __transaction_state
    SASL = "sasl"  # the listener's SASL gate (security/sasl.py), never dispatched


class AclScope(enum.Enum):
    """Which resource(s) of a request the authorizer checks ``Acl.operation`` on."""

    NONE = "none"  # nothing: API_VERSIONS (a client asks it before it knows what to send)
    CLUSTER = "cluster"  # the cluster, for the whole request
    TOPICS = "topics"  # each topic of body["topics"]; denied ones answered, the rest served
    GROUP = "group"  # body["group_id"] (or each of body["groups"])
    TRANSACTIONAL_ID = "transactional_id"  # body["transactional_id"] (or each of ..._ids)
    COORDINATOR_KEYS = "coordinator_keys"  # FIND_COORDINATOR: each key, per its key_type
    PRODUCER_ID = "producer_id"  # INIT_PRODUCER_ID: write on its transactional id, or
    # idempotent_write on the cluster (or write on some topic) for an idempotent producer


@dataclass(frozen=True, slots=True)
class Acl:
    """The ACL an API needs (``security/acl.py`` operations: read, write, describe, …)."""

    scope: AclScope
    operation: str = ""


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One API: what it asks (``request``, the schema ``validate_request`` checks), what it
    answers (``response``), who answers (``route``), what it needs (``acl``), since when."""

    key: ApiKey
    request: Mapping[str, Any]
    response: Any  # a TypedDict, or a TopicsResponse[entry] of one (wire/responses.py)
    route: Route
    acl: Acl
    since: str
    # other parts that answer it in some cases (the code that routes it says when): a
    # controller-only node answers DESCRIBE_CONFIGS, a transaction coordinator an
    # INIT_PRODUCER_ID that names a transactional id
    also: frozenset[Route] = frozenset()


_NO_ACL: Final = Acl(AclScope.NONE)


def _cluster(op: str) -> Acl:
    return Acl(AclScope.CLUSTER, op)


def _topics(op: str) -> Acl:
    return Acl(AclScope.TOPICS, op)


def _group(op: str) -> Acl:
    return Acl(AclScope.GROUP, op)


def _txn(op: str) -> Acl:
    return Acl(AclScope.TRANSACTIONAL_ID, op)


# the commits / issues that added each API (git log -S on the ApiKey member)
_SKELETON = "8d92e7e (project skeleton)"
_TXNS = "43f62aa (transactions)"
_SECURITY = "c9525e7 (issue 14: TLS and SASL/SCRAM)"
_ACLS = "a395cd6 (issue 14: ACLs)"
_QUOTAS = "a475508 (issue 14: quotas)"
_REASSIGN = "b1ab2dc (reassignment, KIP-455)"
_VOTERS = "e1666fb (dynamic quorum, KIP-853)"

_K = ApiKey
_R = Route
# key: (response, route, acl, since[, also]) — one line per API
_ROWS: dict[ApiKey, tuple[Any, ...]] = {
    _K.API_VERSIONS: (r.ApiVersionsResponse, _R.NODE, _NO_ACL, _SKELETON),
    _K.METADATA: (r.MetadataResponse, _R.BROKER, _topics("describe"), _SKELETON),
    _K.PRODUCE: (r.ProduceResponse, _R.BROKER, _topics("write"), _SKELETON),
    _K.FETCH: (r.FetchResponse, _R.BROKER, _topics("read"), _SKELETON),
    _K.LIST_OFFSETS: (r.ListOffsetsResponse, _R.BROKER, _topics("describe"), _SKELETON),
    _K.CREATE_TOPICS: (r.CreateTopicsResponse, _R.FORWARDED, _topics("create"), _SKELETON),
    _K.DELETE_TOPICS: (r.TopicErrorsResponse, _R.FORWARDED, _topics("delete"), _SKELETON),
    _K.DESCRIBE_CONFIGS: (r.DescribeConfigsResponse, _R.BROKER, _topics("describe_configs"), _SKELETON, frozenset({_R.CONTROLLER})),
    _K.CREATE_PARTITIONS: (r.TopicErrorsResponse, _R.FORWARDED, _topics("alter"), _SKELETON),
    _K.INIT_PRODUCER_ID: (r.InitProducerIdResponse, _R.FORWARDED, Acl(AclScope.PRODUCER_ID, "write"), _SKELETON, frozenset({_R.TXN_COORDINATOR})),
    _K.ALTER_CONFIGS: (r.TopicErrorsResponse, _R.FORWARDED, _topics("alter_configs"), _SKELETON),
    _K.ELECT_LEADERS: (r.PartitionErrorsResponse, _R.FORWARDED, _cluster("alter"), _SKELETON),
    _K.DELETE_RECORDS: (r.DeleteRecordsResponse, _R.BROKER, _topics("delete"), "issue 23 (DeleteRecords)"),
    _K.FIND_COORDINATOR: (r.FindCoordinatorResponse, _R.BROKER, Acl(AclScope.COORDINATOR_KEYS, "describe"), "bec231f (issue 14: coordinator lookup)"),
    _K.BROKER_REGISTRATION: (r.BrokerRegistrationResponse, _R.CONTROLLER, _cluster("cluster_action"), _SKELETON),
    _K.BROKER_HEARTBEAT: (r.BrokerHeartbeatResponse, _R.CONTROLLER, _cluster("cluster_action"), _SKELETON),
    _K.METADATA_FETCH: (r.MetadataFetchResponse, _R.CONTROLLER, _cluster("cluster_action"), _SKELETON),
    _K.ALTER_PARTITION: (r.AlterPartitionResponse, _R.CONTROLLER, _cluster("cluster_action"), _SKELETON),
    _K.DESCRIBE_QUORUM: (r.DescribeQuorumResponse, _R.QUORUM, _cluster("describe"), _SKELETON),
    # a voter change needs ALL on the cluster (super users): no narrower operation fits
    _K.ADD_RAFT_VOTER: (r.RaftVoterResponse, _R.QUORUM, _cluster("all"), _VOTERS),
    _K.REMOVE_RAFT_VOTER: (r.RaftVoterResponse, _R.QUORUM, _cluster("all"), _VOTERS),
    _K.CONSUMER_GROUP_HEARTBEAT: (r.ConsumerGroupHeartbeatResponse, _R.FORWARDED, _group("read"), _SKELETON),
    _K.OFFSET_COMMIT: (r.PartitionErrorsResponse, _R.GROUP_COORDINATOR, _group("read"), _SKELETON),
    _K.OFFSET_FETCH: (r.OffsetFetchResponse, _R.GROUP_COORDINATOR, _group("read"), _SKELETON),
    _K.LIST_GROUPS: (r.ListGroupsResponse, _R.GROUP_COORDINATOR, _cluster("describe"), _SKELETON),
    _K.DESCRIBE_GROUPS: (r.DescribeGroupsResponse, _R.GROUP_COORDINATOR, _group("describe"), _SKELETON),
    _K.DELETE_GROUPS: (r.DeleteGroupsResponse, _R.GROUP_COORDINATOR, _group("delete"), _SKELETON),
    _K.OFFSET_DELETE: (r.PartitionErrorsResponse, _R.GROUP_COORDINATOR, _group("delete"), "issue 23 (OffsetDelete)"),
    _K.ALTER_GROUP_OFFSETS: (r.PartitionErrorsResponse, _R.GROUP_COORDINATOR, _group("read"), _SKELETON),
    _K.ADD_PARTITIONS_TO_TXN: (r.PartitionErrorsResponse, _R.TXN_COORDINATOR, _txn("write"), _TXNS),
    _K.ADD_OFFSETS_TO_TXN: (r.ErrorFields, _R.TXN_COORDINATOR, _txn("write"), _TXNS),
    _K.END_TXN: (r.ErrorFields, _R.TXN_COORDINATOR, _txn("write"), _TXNS),
    _K.WRITE_TXN_MARKERS: (r.WriteTxnMarkersResponse, _R.BROKER, _cluster("cluster_action"), _TXNS),
    # and read on its group (security/authz.py)
    _K.TXN_OFFSET_COMMIT: (r.PartitionErrorsResponse, _R.GROUP_COORDINATOR, _txn("write"), _TXNS),
    _K.DESCRIBE_TRANSACTIONS: (r.DescribeTransactionsResponse, _R.TXN_COORDINATOR, _txn("describe"), _TXNS),
    _K.LIST_TRANSACTIONS: (r.ListTransactionsResponse, _R.TXN_COORDINATOR, _cluster("describe"), _TXNS),
    _K.DESCRIBE_PRODUCERS: (r.DescribeProducersResponse, _R.BROKER, _topics("describe"), _TXNS),
    # never dispatched (the listener's SASL gate answers them); should one reach the
    # authorizer, only a super user passes, as for the voter changes
    _K.SASL_HANDSHAKE: (r.SaslHandshakeResponse, _R.SASL, _cluster("all"), _SECURITY),
    _K.SASL_AUTHENTICATE: (r.SaslAuthenticateResponse, _R.SASL, _cluster("all"), _SECURITY),
    _K.ALTER_USER_SCRAM_CREDENTIALS: (r.AlterUserScramCredentialsResponse, _R.FORWARDED, _cluster("alter"), _SECURITY),
    _K.DESCRIBE_USER_SCRAM_CREDENTIALS: (r.DescribeUserScramCredentialsResponse, _R.BROKER, _cluster("describe"), _SECURITY),
    _K.CREATE_ACLS: (r.ResultsResponse, _R.FORWARDED, _cluster("alter"), _ACLS),
    _K.DESCRIBE_ACLS: (r.DescribeAclsResponse, _R.BROKER, _cluster("describe"), _ACLS),
    _K.DELETE_ACLS: (r.DeleteAclsResponse, _R.FORWARDED, _cluster("alter"), _ACLS),
    # client quotas: alter_configs / describe_configs on the cluster, as Kafka
    _K.ALTER_CLIENT_QUOTAS: (r.ResultsResponse, _R.FORWARDED, _cluster("alter_configs"), _QUOTAS),
    _K.DESCRIBE_CLIENT_QUOTAS: (r.DescribeClientQuotasResponse, _R.BROKER, _cluster("describe_configs"), _QUOTAS),
    _K.ALTER_PARTITION_REASSIGNMENTS: (r.MetadataOffsetResponse, _R.FORWARDED, _cluster("alter"), _REASSIGN),
    _K.LIST_PARTITION_REASSIGNMENTS: (r.ListPartitionReassignmentsResponse, _R.BROKER, _cluster("describe"), _REASSIGN),
    _K.DECOMMISSION_BROKER: (r.DecommissionBrokerResponse, _R.FORWARDED, _cluster("alter"), _REASSIGN),
    _K.UNREGISTER_BROKER: (r.MetadataOffsetResponse, _R.FORWARDED, _cluster("alter"), _REASSIGN),
}

API_TABLE: Final[Mapping[ApiKey, ApiSpec]] = MappingProxyType({
    key: ApiSpec(key, SCHEMAS[key], *row) for key, row in _ROWS.items()})
del _K, _R


def spec_of(api_key: int) -> ApiSpec | None:
    """The row of ``api_key``, or None for a key rafka does not know."""
    try:
        return API_TABLE.get(ApiKey(api_key))
    except ValueError:
        return None


def keys_routed(*routes: Route, also: bool = False) -> frozenset[ApiKey]:
    """The api keys answered on any of ``routes`` (with ``also``: in some cases too)."""
    return frozenset(k for k, s in API_TABLE.items()
                     if s.route in routes or (also and not s.also.isdisjoint(routes)))


def keys_with_acl(scope: AclScope) -> dict[ApiKey, str]:
    """api key → operation, for the APIs whose ACL has ``scope``."""
    return {k: s.acl.operation for k, s in API_TABLE.items() if s.acl.scope is scope}


def controller_keys() -> frozenset[ApiKey]:
    """The keys a controller's ``ControllerService.handlers`` answers: what is forwarded to it,
    its own and the quorum's APIs, and the rows it also answers on a controller-only node."""
    return keys_routed(Route.FORWARDED, Route.CONTROLLER, Route.QUORUM) | {
        k for k, s in API_TABLE.items() if Route.CONTROLLER in s.also}
