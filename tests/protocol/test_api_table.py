"""The one API table (wire/api_table.py) is complete and is what the node actually serves:
every ``ApiKey`` has a row with a request schema, a response type, a route and an ACL; the
controller-routed keys are exactly a real controller's ``ControllerService.handlers``, the
broker-routed keys exactly a real ``NodeApi``'s broker handlers, the coordinator-routed keys
the coordinators' handlers; and real answers of a broker conform to their response types."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, get_origin, is_typeddict

import trio
from rafka.broker.events import EventLog
from rafka.broker.handlers import (
    BROKER_APIS,
    FORWARDED_APIS,
    GROUP_BROKER_APIS,
    QUORUM_APIS,
    TXN_BROKER_APIS,
    NodeApi,
)
from rafka.broker.metadata_listener import MetadataPublisher
from rafka.broker.replica_manager import ReplicaManager
from rafka.kraft.memory import MemoryQuorumCluster
from rafka.kraft.service import ControllerService
from rafka.security import authz
from rafka.wire.api_table import API_TABLE, AclScope, Route, controller_keys, keys_routed, spec_of
from rafka.wire.apis import SCHEMAS, ApiKey
from rafka.wire.connection import connect

from tests.broker.harness import (
    batch,
    fetch_body,
    list_offsets_body,
    node_config,
    produce_body,
    running_broker,
)
from tests.protocol.conformance import conforms


def test_every_key_has_a_row_with_schemas_route_and_acl() -> None:
    assert set(API_TABLE) == set(ApiKey)
    for key, spec in API_TABLE.items():
        assert spec.key is key
        assert spec.request is SCHEMAS[key]
        assert is_typeddict(get_origin(spec.response) or spec.response), key
        assert isinstance(spec.route, Route), key
        assert spec.acl.scope is AclScope.NONE or spec.acl.operation, f"{key.name}: no ACL operation"
        assert spec.since, key
    assert spec_of(ApiKey.PRODUCE) is API_TABLE[ApiKey.PRODUCE]
    assert spec_of(9999) is None
    # only API_VERSIONS goes unchecked: everything else names what the authorizer checks
    assert {k for k, s in API_TABLE.items() if s.acl.scope is AclScope.NONE} == {ApiKey.API_VERSIONS}


def test_node_api_sets_are_the_tables() -> None:
    assert BROKER_APIS == keys_routed(Route.NODE, Route.BROKER)
    assert FORWARDED_APIS == keys_routed(Route.FORWARDED)
    assert QUORUM_APIS == keys_routed(Route.QUORUM)
    assert GROUP_BROKER_APIS == keys_routed(Route.GROUP_COORDINATOR)
    assert TXN_BROKER_APIS == keys_routed(Route.TXN_COORDINATOR)


def test_authorizer_covers_every_dispatched_key() -> None:
    """Each key the authorizer may see has a rule: a table entry or code for its scope."""
    ruled = (set(authz.TOPIC_OPERATIONS) | set(authz._GROUP) | set(authz._TXN)
             | set(authz._CLUSTER) | authz._UNCHECKED | authz._RULED)
    assert ruled == set(ApiKey)


async def test_controller_keys_are_a_real_controllers_handlers(tmp_path: Path) -> None:
    cluster = MemoryQuorumCluster([1])
    svc = ControllerService(1, [(1, "127.0.0.1:19001", "127.0.0.1:9001")], None, tmp_path / "ctl",
                            None, {}, quorum=cluster.voters[1], rng=random.Random(7))
    assert set(svc.handlers) == controller_keys()


def _node_api(tmp_path: Path) -> tuple[NodeApi, ReplicaManager, EventLog]:
    cfg = node_config(tmp_path)
    events = EventLog(cfg.data_dir / "events.jsonl", 1)
    rm = ReplicaManager(1, cfg.data_dir, dict(cfg.broker), cfg.topic_defaults(), events)
    api = NodeApi(cluster_id="t", replica_manager=rm, publisher=MetadataPublisher(1), channel=None,
                  topic_defaults=cfg.topic_defaults())
    return api, rm, events


def test_broker_and_coordinator_keys_are_a_real_nodes_handlers(tmp_path: Path) -> None:
    api, rm, events = _node_api(tmp_path)
    try:
        assert set(api.broker_handlers) == keys_routed(Route.BROKER)
        assert api.groups is not None and api.txn is not None
        assert set(api.groups.handlers) == keys_routed(Route.GROUP_COORDINATOR, also=True)
        assert set(api.txn.handlers) == keys_routed(Route.TXN_COORDINATOR, also=True)
        # what API_VERSIONS advertises on a broker without a controller
        assert set(api.api_keys()) == keys_routed(Route.NODE, Route.BROKER, Route.FORWARDED,
                                                  Route.GROUP_COORDINATOR, Route.TXN_COORDINATOR)
    finally:
        rm.close()
        events.close()


# --------------------------------------------------------------------------- response types


def test_conforms_rejects_a_wrong_shape() -> None:
    good = {"topics": [{"name": "t", "partitions": [{"partition": 0, "error": 0, "base_offset": 3}]}]}
    conforms(API_TABLE[ApiKey.OFFSET_COMMIT].response, good, "offset commit")  # a TopicsResponse[...]
    conforms(API_TABLE[ApiKey.PRODUCE].response, good, "produce")
    for bad in ({"topics": [{"name": "t"}]},
                {"topics": [{"name": "t", "partitions": [{"partition": "0", "error": 0}]}]}):
        try:
            conforms(API_TABLE[ApiKey.PRODUCE].response, bad, "produce")
        except AssertionError:
            continue
        raise AssertionError(f"accepted {bad}")
    bad_commit = {"topics": [{"name": "t", "partitions": [{"partition": 0}]}]}  # no error
    try:
        conforms(API_TABLE[ApiKey.OFFSET_COMMIT].response, bad_commit, "offset commit")
    except AssertionError:
        pass
    else:
        raise AssertionError(f"accepted {bad_commit}")
    conforms(API_TABLE[ApiKey.PRODUCE].response, {"error": 87, "message": "no"}, "error answer")


async def test_real_answers_conform_to_their_response_types(tmp_path: Path) -> None:
    async with running_broker(tmp_path, topics={"t": 2}) as b, connect("127.0.0.1", b.port) as conn:
        requests: list[tuple[ApiKey, dict[str, Any]]] = [
            (ApiKey.API_VERSIONS, {}),
            (ApiKey.METADATA, {"topics": None}),
            (ApiKey.METADATA, {"topics": ["t", "missing"]}),
            (ApiKey.PRODUCE, produce_body("t", batch(b"a", b"b"))),
            (ApiKey.PRODUCE, produce_body("t", batch(b"x"), partition=7)),
            (ApiKey.FETCH, fetch_body("t", 0)),
            (ApiKey.FETCH, {**fetch_body("t", 0), "isolation_level": 1}),
            (ApiKey.LIST_OFFSETS, list_offsets_body("t", -1)),
            (ApiKey.DESCRIBE_CONFIGS, {"topics": ["t"]}),
            (ApiKey.DESCRIBE_PRODUCERS, {"topics": [{"name": "t", "partitions": [0]}]}),
            (ApiKey.DESCRIBE_ACLS, {"filter": {}}),
            (ApiKey.DESCRIBE_CLIENT_QUOTAS, {}),
            (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {}),
            (ApiKey.LIST_PARTITION_REASSIGNMENTS, {}),
            (ApiKey.LIST_GROUPS, {}),
            (ApiKey.LIST_TRANSACTIONS, {}),
            (ApiKey.OFFSET_FETCH, {"group_id": "g"}),
            (ApiKey.CREATE_TOPICS, {"topics": [], "timeout_ms": 1}),  # NOT_CONTROLLER here
            (ApiKey.BROKER_HEARTBEAT, {"broker_id": 1, "broker_epoch": 1, "metadata_offset": 0,
                                       "want_fence": False, "want_shutdown": False}),
        ]
        for key, body in requests:
            with trio.fail_after(10):
                resp = await conn.request(key, body)
            conforms(API_TABLE[key].response, resp.body, key.name)


async def test_controller_group_and_txn_answers_conform(tmp_path: Path) -> None:
    """Through a broker whose controller runs in process (tests/groups/test_e2e_inprocess.py):
    forwarded admin APIs, the group and transaction coordinators, the controller's own RPCs."""
    from tests.groups.test_e2e_inprocess import cluster

    async with cluster(tmp_path) as (bootstrap, svc, pub):
        host, port = bootstrap.rsplit(":", 1)
        async with connect(host, int(port)) as conn:
            async def ask(key: ApiKey, body: dict[str, Any], *, until_ok: bool = False) -> dict[str, Any]:
                with trio.fail_after(20):
                    while True:
                        resp = await conn.request(key, body)
                        conforms(API_TABLE[key].response, resp.body, key.name)
                        if not until_ok or not resp.body.get("error"):
                            return resp.body
                        await trio.sleep(0.1)

            tps = [{"name": "t", "partitions": [0]}]
            await ask(ApiKey.CREATE_TOPICS, {"topics": [
                {"name": "u", "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 5000})
            await ask(ApiKey.ALTER_CONFIGS, {"topics": [{"name": "u", "configs": {"retention.ms": "1000"}}]})
            await ask(ApiKey.CREATE_PARTITIONS, {"topics": [{"name": "u", "count": 2}], "timeout_ms": 5000})
            await ask(ApiKey.ELECT_LEADERS, {"election_type": 0, "topics": None})
            await ask(ApiKey.INIT_PRODUCER_ID, {})
            await ask(ApiKey.DESCRIBE_QUORUM, {})
            await ask(ApiKey.FIND_COORDINATOR, {"key_type": 0, "keys": ["g"]}, until_ok=True)
            join = await ask(ApiKey.CONSUMER_GROUP_HEARTBEAT, {
                "group_id": "g", "member_id": "", "member_epoch": 0, "subscribed_topics": ["t"]})
            commit = {"group_id": "g", "member_id": None, "member_epoch": -1,
                      "topics": [{"name": "t", "partitions": [{"partition": 0, "offset": 0}]}]}
            await ask(ApiKey.OFFSET_COMMIT, {**commit, "member_id": join.get("member_id"),
                                             "member_epoch": join.get("member_epoch")})
            await ask(ApiKey.OFFSET_FETCH, {"group_id": "g", "topics": tps})
            await ask(ApiKey.DESCRIBE_GROUPS, {"groups": ["g", "nope"]})
            await ask(ApiKey.LIST_GROUPS, {})
            await ask(ApiKey.DELETE_GROUPS, {"groups": ["g"]})
            await ask(ApiKey.ALTER_GROUP_OFFSETS, {"group_id": "h", "topics": commit["topics"]})
            await ask(ApiKey.FIND_COORDINATOR, {"key_type": 1, "keys": ["tx"]}, until_ok=True)
            init = await ask(ApiKey.INIT_PRODUCER_ID, {"transactional_id": "tx",
                                                       "transaction_timeout_ms": 60_000}, until_ok=True)
            ids = {"transactional_id": "tx", "producer_id": init["producer_id"],
                   "producer_epoch": init["producer_epoch"]}
            await ask(ApiKey.ADD_PARTITIONS_TO_TXN, {**ids, "topics": tps})
            await ask(ApiKey.ADD_OFFSETS_TO_TXN, {**ids, "group_id": "g"})
            await ask(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": ["tx", "other"]})
            await ask(ApiKey.LIST_TRANSACTIONS, {})
            await ask(ApiKey.END_TXN, {**ids, "commit": False})
            await ask(ApiKey.CREATE_ACLS, {"acls": [{
                "principal": "User:a", "resource_type": "topic", "pattern_type": "literal",
                "resource_name": "t", "operation": "read", "permission": "allow", "host": "*"}]})
            await ask(ApiKey.DESCRIBE_ACLS, {"filter": {}})
            await ask(ApiKey.DELETE_ACLS, {"filters": [{"principal": "User:a"}]})
            await ask(ApiKey.ALTER_CLIENT_QUOTAS, {"entries": [
                {"user": "User:a", "ops": [{"key": "producer_byte_rate", "value": 1e6}]}]})
            await ask(ApiKey.DESCRIBE_CLIENT_QUOTAS, {})
            await ask(ApiKey.ALTER_PARTITION_REASSIGNMENTS, {"partitions": [
                {"topic": "t", "partition": 0, "replicas": None}]})
            await ask(ApiKey.DELETE_TOPICS, {"topics": ["u"], "timeout_ms": 5000})
        # the controller's own RPCs, asked of it directly (brokers do)
        fetched = await svc.handlers[ApiKey.METADATA_FETCH](
            {"from_offset": 0, "max_records": 10, "max_wait_ms": 0})
        conforms(API_TABLE[ApiKey.METADATA_FETCH].response, fetched, "METADATA_FETCH")
        reg = await svc.handlers[ApiKey.BROKER_REGISTRATION](
            {"broker_id": 2, "incarnation_id": "x", "host": "127.0.0.1", "port": 1})
        conforms(API_TABLE[ApiKey.BROKER_REGISTRATION].response, reg, "BROKER_REGISTRATION")


def test_acl_entry_type_is_the_request_schemas() -> None:
    from rafka.wire.apis import _ACL
    from rafka.wire.responses import AclEntry

    assert AclEntry == dict[str, str] and set(_ACL.values()) == {str}
