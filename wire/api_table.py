"""The one API table: for every ``ApiKey``, its request schema, response type, route, ACL and
origin, in one ``ApiSpec`` row.

Theory of operation
-------------------
``API_TABLE[key]`` is an ``ApiSpec(request, response, route, acl, since)``:

* ``request`` — the schema ``wire.apis.validate_request`` checks (``SCHEMAS[key]``);
* ``response`` — the ``TypedDict`` of its answer (``wire.responses.RESPONSES[key]``);
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
(``ApiSpec.also`` names such second routes); a follower FETCH (``replica_id >= 0``) needs cluster_action instead of
read on its topics; a transactional PRODUCE also needs write on its transactional id, a
TXN_OFFSET_COMMIT also read on its group.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from rafka.wire.apis import SCHEMAS, ApiKey
from rafka.wire.responses import RESPONSES

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
    key: ApiKey
    request: Mapping[str, Any]
    response: type
    route: Route
    acl: Acl
    since: str
    # other parts that answer it in some cases (the code that routes it says when): a
    # controller-only node answers DESCRIBE_CONFIGS, a transaction coordinator an
    # INIT_PRODUCER_ID that names a transactional id
    also: frozenset[Route] = frozenset()


NONE: Final = Acl(AclScope.NONE)


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
# key: (route, acl, since[, also])
_ROWS: dict[ApiKey, tuple[Any, ...]] = {
    _K.API_VERSIONS: (_R.NODE, NONE, _SKELETON),
    _K.METADATA: (_R.BROKER, _topics("describe"), _SKELETON),
    _K.PRODUCE: (_R.BROKER, _topics("write"), _SKELETON),
    _K.FETCH: (_R.BROKER, _topics("read"), _SKELETON),
    _K.LIST_OFFSETS: (_R.BROKER, _topics("describe"), _SKELETON),
    _K.CREATE_TOPICS: (_R.FORWARDED, _topics("create"), _SKELETON),
    _K.DELETE_TOPICS: (_R.FORWARDED, _topics("delete"), _SKELETON),
    _K.DESCRIBE_CONFIGS: (_R.BROKER, _topics("describe_configs"), _SKELETON,
                          frozenset({_R.CONTROLLER})),
    _K.CREATE_PARTITIONS: (_R.FORWARDED, _topics("alter"), _SKELETON),
    _K.INIT_PRODUCER_ID: (_R.FORWARDED, Acl(AclScope.PRODUCER_ID, "write"), _SKELETON,
                          frozenset({_R.TXN_COORDINATOR})),
    _K.ALTER_CONFIGS: (_R.FORWARDED, _topics("alter_configs"), _SKELETON),
    _K.ELECT_LEADERS: (_R.FORWARDED, _cluster("alter"), _SKELETON),
    _K.FIND_COORDINATOR: (_R.BROKER, Acl(AclScope.COORDINATOR_KEYS, "describe"),
                          "bec231f (issue 14: coordinator lookup)"),
    _K.BROKER_REGISTRATION: (_R.CONTROLLER, _cluster("cluster_action"), _SKELETON),
    _K.BROKER_HEARTBEAT: (_R.CONTROLLER, _cluster("cluster_action"), _SKELETON),
    _K.METADATA_FETCH: (_R.CONTROLLER, _cluster("cluster_action"), _SKELETON),
    _K.ALTER_PARTITION: (_R.CONTROLLER, _cluster("cluster_action"), _SKELETON),
    _K.DESCRIBE_QUORUM: (_R.QUORUM, _cluster("describe"), _SKELETON),
    # a voter change needs ALL on the cluster (super users): no narrower operation fits
    _K.ADD_RAFT_VOTER: (_R.QUORUM, _cluster("all"), _VOTERS),
    _K.REMOVE_RAFT_VOTER: (_R.QUORUM, _cluster("all"), _VOTERS),
    _K.CONSUMER_GROUP_HEARTBEAT: (_R.FORWARDED, _group("read"), _SKELETON),
    _K.OFFSET_COMMIT: (_R.GROUP_COORDINATOR, _group("read"), _SKELETON),
    _K.OFFSET_FETCH: (_R.GROUP_COORDINATOR, _group("read"), _SKELETON),
    _K.LIST_GROUPS: (_R.GROUP_COORDINATOR, _cluster("describe"), _SKELETON),
    _K.DESCRIBE_GROUPS: (_R.GROUP_COORDINATOR, _group("describe"), _SKELETON),
    _K.DELETE_GROUPS: (_R.GROUP_COORDINATOR, _group("delete"), _SKELETON),
    _K.ALTER_GROUP_OFFSETS: (_R.GROUP_COORDINATOR, _group("read"), _SKELETON),
    _K.ADD_PARTITIONS_TO_TXN: (_R.TXN_COORDINATOR, _txn("write"), _TXNS),
    _K.ADD_OFFSETS_TO_TXN: (_R.TXN_COORDINATOR, _txn("write"), _TXNS),
    _K.END_TXN: (_R.TXN_COORDINATOR, _txn("write"), _TXNS),
    _K.WRITE_TXN_MARKERS: (_R.BROKER, _cluster("cluster_action"), _TXNS),
    _K.TXN_OFFSET_COMMIT: (_R.GROUP_COORDINATOR, _txn("write"), _TXNS),  # + read on the group
    _K.DESCRIBE_TRANSACTIONS: (_R.TXN_COORDINATOR, _txn("describe"), _TXNS),
    _K.LIST_TRANSACTIONS: (_R.TXN_COORDINATOR, _cluster("describe"), _TXNS),
    _K.DESCRIBE_PRODUCERS: (_R.BROKER, _topics("describe"), _TXNS),
    # never dispatched (the listener's SASL gate answers them); should one reach the
    # authorizer, only a super user passes, as for the voter changes
    _K.SASL_HANDSHAKE: (_R.SASL, _cluster("all"), _SECURITY),
    _K.SASL_AUTHENTICATE: (_R.SASL, _cluster("all"), _SECURITY),
    _K.ALTER_USER_SCRAM_CREDENTIALS: (_R.FORWARDED, _cluster("alter"), _SECURITY),
    _K.DESCRIBE_USER_SCRAM_CREDENTIALS: (_R.BROKER, _cluster("describe"), _SECURITY),
    _K.CREATE_ACLS: (_R.FORWARDED, _cluster("alter"), _ACLS),
    _K.DESCRIBE_ACLS: (_R.BROKER, _cluster("describe"), _ACLS),
    _K.DELETE_ACLS: (_R.FORWARDED, _cluster("alter"), _ACLS),
    # client quotas: alter_configs / describe_configs on the cluster, as Kafka
    _K.ALTER_CLIENT_QUOTAS: (_R.FORWARDED, _cluster("alter_configs"), _QUOTAS),
    _K.DESCRIBE_CLIENT_QUOTAS: (_R.BROKER, _cluster("describe_configs"), _QUOTAS),
    _K.ALTER_PARTITION_REASSIGNMENTS: (_R.FORWARDED, _cluster("alter"), _REASSIGN),
    _K.LIST_PARTITION_REASSIGNMENTS: (_R.BROKER, _cluster("describe"), _REASSIGN),
    _K.DECOMMISSION_BROKER: (_R.FORWARDED, _cluster("alter"), _REASSIGN),
    _K.UNREGISTER_BROKER: (_R.FORWARDED, _cluster("alter"), _REASSIGN),
}

API_TABLE: Final[Mapping[ApiKey, ApiSpec]] = MappingProxyType({
    key: ApiSpec(key, SCHEMAS[key], RESPONSES[key], *row) for key, row in _ROWS.items()})
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
