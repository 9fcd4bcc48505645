"""Request dispatch of a node: which code answers which api key.

Theory of operation
-------------------
``NodeApi.dispatch(request)`` is the ``Dispatch`` the server calls. The rule, per api key:

1. data plane and metadata (PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS,
   DESCRIBE_CONFIGS, and the partition leader's WRITE_TXN_MARKERS / DESCRIBE_PRODUCERS) → this
   broker's handlers (``data``, ``txn_data``, ``metadata_api``), if it is a broker;
2. admin APIs and CONSUMER_GROUP_HEARTBEAT → forwarded to the active controller
   (``admin.forward``), unless the body carries ``_forwarded`` and this node is a controller: then
   its controller answers; the other group APIs (31–36: offsets, group admin) are answered here
   by ``broker.groups.offsets.GroupOffsetsManager`` (this broker must lead the group's
   ``__consumer_offsets`` partition, else ``NOT_COORDINATOR``), TXN_OFFSET_COMMIT (44) too;
   the transaction APIs (40-42, 45, 46, and INIT_PRODUCER_ID with a ``transactional_id``) by
   ``broker.txn.coordinator.TxnCoordinator`` (this broker must lead the id's
   ``__transaction_state`` partition, else ``NOT_COORDINATOR``); its background tasks run in the
   node's nursery (``NodeApi.txn.run``);
   METADATA naming a missing ``__consumer_offsets`` / ``__transaction_state`` first has the
   broker create it, as the node (``_create_internal_topics``: CREATE_TOPICS forwarded to the
   controller, authorized there as the node, bounded), so a client needs no create right on
   the internal topics (Kafka creates them itself too); a client's own CREATE_TOPICS of them
   (unsecured clusters, older brokers) then just finds them existing; FIND_COORDINATOR
   (``coordinator``: the broker leading a group's / transactional id's internal partition)
   first does the same for the internal topic of its key type;
3. controller APIs (20–29) → this node's ``ControllerService.handlers`` if it is a controller;
   a broker-only node answers ``NOT_CONTROLLER`` with the leader it last saw.

Handlers are plain async functions of (request body, broker state); all I/O waits (long-poll,
acks, forwarding) are awaited inside them and bounded by the request's own timeouts.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio
from rafka.broker.config import offsets_retention_ms
from rafka.broker.controller_channel import FORWARDED_KEY, ControllerChannel
from rafka.broker.groups.offsets import OFFSETS_TOPIC, GroupOffsetsManager, offsets_topic_spec
from rafka.broker.handlers import admin, coordinator, data, metadata_api, security_api, txn_data
from rafka.broker.metadata_listener import MetadataPublisher
from rafka.broker.replica_manager import ReplicaManager
from rafka.broker.server import Reply
from rafka.broker.txn.coordinator import TXN_STATE_TOPIC, TxnCoordinator, txn_state_topic_spec
from rafka.broker.txn.verify import CoordinatorVerifier
from rafka.security.throttle import ClientQuotas
from rafka.wire.connection import ConnectionPool
from rafka.wire.errors import ErrorCode, error_for
from rafka.wire.protocol import ApiKey, Request

__all__ = ["NodeApi", "BROKER_APIS", "FORWARDED_APIS", "GROUP_BROKER_APIS", "TXN_BROKER_APIS"]

log = logging.getLogger("rafka.handlers")

# internal topics the cluster creates itself when a METADATA names them (name -> spec of live brokers)
INTERNAL_TOPIC_SPECS: dict[str, Callable[[int], dict[str, Any]]] = {
    OFFSETS_TOPIC: offsets_topic_spec, TXN_STATE_TOPIC: txn_state_topic_spec}
INTERNAL_CREATE_TIMEOUT_MS = 10_000

ControllerHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

BROKER_APIS = frozenset({
    ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS,
    ApiKey.DESCRIBE_CONFIGS, ApiKey.WRITE_TXN_MARKERS, ApiKey.DESCRIBE_PRODUCERS,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.DESCRIBE_ACLS, ApiKey.DESCRIBE_CLIENT_QUOTAS,
    ApiKey.LIST_PARTITION_REASSIGNMENTS,
    ApiKey.FIND_COORDINATOR,
})
FORWARDED_APIS = frozenset({
    ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS,
    ApiKey.INIT_PRODUCER_ID, ApiKey.ALTER_CONFIGS, ApiKey.ELECT_LEADERS,
    ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ALTER_CLIENT_QUOTAS,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.DECOMMISSION_BROKER, ApiKey.UNREGISTER_BROKER,
})
# the controller quorum itself: asked of the active controller, found for the client by any node
QUORUM_APIS = frozenset({ApiKey.DESCRIBE_QUORUM, ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER})
# committed offsets and group admin: served by the group's coordinator broker (broker/groups/offsets.py)
GROUP_BROKER_APIS = frozenset({
    ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_GROUPS,
    ApiKey.DELETE_GROUPS, ApiKey.ALTER_GROUP_OFFSETS, ApiKey.TXN_OFFSET_COMMIT,
})
# transactions: served by the id's coordinator broker (broker/txn/coordinator.py)
TXN_BROKER_APIS = frozenset({
    ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN,
    ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS,
})


class NodeApi:
    def __init__(self, *, cluster_id: str, replica_manager: ReplicaManager | None,
                 publisher: MetadataPublisher, channel: ControllerChannel | None,
                 controller_handlers: Mapping[int, ControllerHandler] | None = None,
                 topic_defaults: Mapping[str, Any] | None = None,
                 pool: ConnectionPool | None = None) -> None:
        self.cluster_id = cluster_id
        self.rm = replica_manager
        self.publisher = publisher
        self.channel = channel
        self.controller = dict(controller_handlers or {})
        self.topic_defaults = dict(topic_defaults or {})
        self.groups: GroupOffsetsManager | None = None
        if replica_manager is not None:
            settings = replica_manager.settings
            self.groups = GroupOffsetsManager(
                replica_manager, publisher,
                retention_ms=offsets_retention_ms(settings),
                retention_check_interval_ms=settings.get("offsets.retention.check.interval.ms", 600_000))
        self.txn: TxnCoordinator | None = None
        self.txn_verifier: CoordinatorVerifier | None = None
        # byte-rate quotas: node.py wraps the listeners' dispatch with quotas.wrap (security/throttle.py)
        self.quotas = ClientQuotas(lambda: publisher.image)
        self._internal_create = trio.Lock()  # one node-made CREATE_TOPICS of internal topics at a time
        if replica_manager is not None:
            # pool: the node's ConnectionPool (markers to other leaders, remote verification)
            self.txn = TxnCoordinator(replica_manager, publisher, channel, pool=pool,
                                      local_markers=self._local_markers,
                                      settings=replica_manager.settings)
            self.txn_verifier = CoordinatorVerifier(self.txn, pool)

    async def _local_markers(self, body: dict[str, Any]) -> dict[str, Any]:
        """WRITE_TXN_MARKERS to this broker's own partitions, without a connection."""
        out = await self.dispatch(Request(ApiKey.WRITE_TXN_MARKERS, 0, body))
        return out if isinstance(out, dict) else {}

    def api_keys(self) -> list[int]:
        keys = set(self.controller)
        if self.rm is not None:
            keys |= BROKER_APIS | FORWARDED_APIS | GROUP_BROKER_APIS | TXN_BROKER_APIS
        return sorted(int(k) for k in keys)

    async def dispatch(self, req: Request) -> Reply | dict[str, Any] | None:
        key, body = req.api_key, req.body
        if key == ApiKey.API_VERSIONS:
            return metadata_api.api_versions(self.api_keys())
        if self.rm is not None and key in BROKER_APIS:
            return await self._broker(key, body)
        if self.groups is not None and key in GROUP_BROKER_APIS:
            return await self.groups.handlers[key](body)
        if self.txn is not None and (key in TXN_BROKER_APIS or (
                key == ApiKey.INIT_PRODUCER_ID and body.get("transactional_id"))):
            return await self.txn.handlers[key](body)
        if key in QUORUM_APIS and not body.get("local_only") and not body.get(FORWARDED_KEY):
            # only the active controller can describe or change the quorum: any node finds it
            # for the client (a broker-only node, or a voter that does not lead)
            if key in self.controller:
                out = await self.controller[key](body)
                if out.get("error") != ErrorCode.NOT_CONTROLLER or self.channel is None:
                    return out
            if self.channel is not None:
                return await self.channel.request(key, {**body, FORWARDED_KEY: True})
        if key in self.controller and (key not in FORWARDED_APIS or body.get(FORWARDED_KEY)
                                       or self.rm is None):
            return await self.controller[key](body)
        if key in FORWARDED_APIS and self.channel is not None and self.rm is not None:
            return await admin.forward(self.channel, self.publisher, key, body)
        if ApiKey.BROKER_REGISTRATION <= key < ApiKey.CONSUMER_GROUP_HEARTBEAT or key in FORWARDED_APIS:
            hint = self.channel.leader_hint if self.channel is not None else None
            return {"error": int(ErrorCode.NOT_CONTROLLER),
                    "message": "this node is not a controller",
                    "leader_id": -1,
                    "leader_host": hint[0] if hint else None,
                    "leader_port": hint[1] if hint else None}
        raise error_for(ErrorCode.UNKNOWN_API, f"api {ApiKey(key).name} is not served by this node")

    async def _broker(self, key: int, body: dict[str, Any]) -> Reply | dict[str, Any] | None:
        assert self.rm is not None
        image = self.publisher.image
        if key == ApiKey.METADATA:
            if isinstance(body.get("topics"), list) and self._missing_internal(body["topics"]):
                await self._create_internal_topics(body["topics"])
                image = self.publisher.image
            return metadata_api.metadata(body, image, self.cluster_id)
        if key == ApiKey.FIND_COORDINATOR:  # the missing internal topic made as the node first
            topic = coordinator.coordinator_topic(body)
            if self._missing_internal([topic]):
                await self._create_internal_topics([topic])
            return coordinator.find_coordinator(body, self.publisher.image)
        if key == ApiKey.DESCRIBE_CONFIGS:
            return metadata_api.describe_configs(body, image, self.topic_defaults)
        if key == ApiKey.PRODUCE:
            return await data.produce(self.rm, body, self.txn_verifier)
        if key == ApiKey.FETCH:
            return await data.fetch(self.rm, body)
        if key == ApiKey.LIST_OFFSETS:
            return data.list_offsets(self.rm, body)
        if key == ApiKey.WRITE_TXN_MARKERS:
            return await txn_data.write_txn_markers(self.rm, body)
        if key == ApiKey.DESCRIBE_PRODUCERS:
            return txn_data.describe_producers(self.rm, body)
        if key == ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS:
            return security_api.describe_user_scram_credentials(body, image)
        if key == ApiKey.DESCRIBE_ACLS:
            return security_api.describe_acls(body, image)
        if key == ApiKey.DESCRIBE_CLIENT_QUOTAS:
            return security_api.describe_client_quotas(body, image, self.quotas.usage())
        if key == ApiKey.LIST_PARTITION_REASSIGNMENTS:  # kraft/reassign.py
            from rafka.broker.handlers.reassign_api import list_partition_reassignments

            return list_partition_reassignments(body, image, self.rm)
        raise error_for(ErrorCode.UNKNOWN_API, f"api {key} has no broker handler")

    def _missing_internal(self, names: list[Any]) -> list[str]:
        by_name = self.publisher.image.topics.by_name
        return sorted({n for n in names if isinstance(n, str) and n in INTERNAL_TOPIC_SPECS
                       and n not in by_name})

    async def _create_internal_topics(self, names: list[Any]) -> None:
        """Create the missing internal topics of ``names`` as this node (not as the client):
        CREATE_TOPICS forwarded to the controller, which authorizes the node; waits for this
        broker's metadata; bounded — on failure the METADATA answers them unknown (retriable)."""
        if self.channel is None:
            return
        async with self._internal_create:
            missing = self._missing_internal(names)  # another request may have made them
            if not missing:
                return
            image = self.publisher.image
            live = max(1, sum(1 for b in image.cluster.brokers.values() if not b.fenced))
            body = {"topics": [INTERNAL_TOPIC_SPECS[n](live) for n in missing],
                    "timeout_ms": INTERNAL_CREATE_TIMEOUT_MS}
            answer = await admin.forward(self.channel, self.publisher, ApiKey.CREATE_TOPICS, body)
            errors = [t for t in answer.get("topics") or []
                      if t.get("error") not in (0, ErrorCode.TOPIC_ALREADY_EXISTS, None)]
            if answer.get("error") or errors:
                log.info("creating %s: %s", ", ".join(missing), answer)
            else:
                log.info("created %s (%d live brokers)", ", ".join(missing), live)
