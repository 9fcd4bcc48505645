"""Request dispatch of a node: which code answers which api key.

Theory of operation
-------------------
``NodeApi.dispatch(request)`` is the ``Dispatch`` the server calls. Which part answers an api
key is its ``Route`` in the one API table (``wire/api_table.py``); the API sets below are read
off it, and ``NodeApi.broker_handlers`` holds one handler per ``Route.BROKER`` row
(``tests/protocol/test_api_table.py`` checks both). The rule, per route:

0. API_VERSIONS (``Route.NODE``) → answered here, on any node;
1. data plane and metadata (``Route.BROKER``: PRODUCE, FETCH, LIST_OFFSETS, METADATA,
   DESCRIBE_CONFIGS, the partition leader's WRITE_TXN_MARKERS / DESCRIBE_PRODUCERS, the image's
   listings) → this broker's handlers (``data``, ``txn_data``, ``metadata_api``…), if it is a
   broker;
2. admin APIs and CONSUMER_GROUP_HEARTBEAT (``Route.FORWARDED``) → forwarded to the active
   controller (``admin.forward``), unless the body carries ``_forwarded`` and this node is a
   controller: then its controller answers; the other group APIs (``Route.GROUP_COORDINATOR``,
   31–36: offsets, group admin) are answered here by ``broker.groups.offsets.GroupOffsetsManager`` (this broker must lead the group's
   ``__consumer_offsets`` partition, else ``NOT_COORDINATOR``), TXN_OFFSET_COMMIT (44) too;
   the transaction APIs (``Route.TXN_COORDINATOR``, 40-42, 45, 46, and INIT_PRODUCER_ID with a
   ``transactional_id``) by
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
3. controller and quorum APIs (``Route.CONTROLLER`` / ``Route.QUORUM``, 20–26) → this node's
   ``ControllerService.handlers`` if it is a controller; a broker-only node answers
   ``NOT_CONTROLLER`` with the leader it last saw.

Handlers are plain async functions of (request body, broker state); all I/O waits (long-poll,
acks, forwarding) are awaited inside them and bounded by the request's own timeouts.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import trio
from rafka.broker.config import offsets_retention_ms
from rafka.broker.controller_channel import FORWARDED_KEY, ControllerChannel
from rafka.broker.groups.offsets import OFFSETS_TOPIC, GroupOffsetsManager, offsets_topic_spec
from rafka.broker.handlers import (
    admin,
    coordinator,
    data,
    delete_records,
    metadata_api,
    reassign_api,
    security_api,
    txn_data,
)
from rafka.broker.metadata_listener import MetadataPublisher
from rafka.broker.replica_manager import ReplicaManager
from rafka.broker.server import Reply
from rafka.broker.txn.coordinator import TXN_STATE_TOPIC, TxnCoordinator, txn_state_topic_spec
from rafka.broker.txn.verify import CoordinatorVerifier
from rafka.security.throttle import ClientQuotas
from rafka.wire.api_table import Route, keys_routed
from rafka.wire.connection import ConnectionPool
from rafka.wire.errors import ErrorCode, error_for
from rafka.wire.protocol import ApiKey, Request
from rafka.wire.responses import CreatedTopic, TopicsResponse

__all__ = ["NodeApi", "BROKER_APIS", "FORWARDED_APIS", "QUORUM_APIS", "CONTROLLER_APIS",
           "GROUP_BROKER_APIS", "TXN_BROKER_APIS"]

log = logging.getLogger("rafka.handlers")

# internal topics the cluster creates itself when a METADATA names them (name -> spec of live brokers)
INTERNAL_TOPIC_SPECS: dict[str, Callable[[int], dict[str, Any]]] = {
    OFFSETS_TOPIC: offsets_topic_spec, TXN_STATE_TOPIC: txn_state_topic_spec}
INTERNAL_CREATE_TIMEOUT_MS = 10_000

ControllerHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
# a broker handler: request body -> the awaitable answer (a Reply, a body, None: no answer)
BrokerHandler = Callable[[dict[str, Any]], Awaitable[Reply | dict[str, Any] | None]]


def _answer(fn: Callable[[dict[str, Any]], dict[str, Any]]) -> BrokerHandler:
    """A broker handler of a synchronous answer (it reads the image or the logs, no wait)."""
    async def handler(body: dict[str, Any]) -> dict[str, Any]:
        return fn(body)

    return handler

# the node's API sets, read off the one API table (wire/api_table.py: a new API is a row there)
BROKER_APIS = keys_routed(Route.NODE, Route.BROKER)
FORWARDED_APIS = keys_routed(Route.FORWARDED)
# the controller quorum itself: asked of the active controller, found for the client by any node
QUORUM_APIS = keys_routed(Route.QUORUM)
# a controller's own APIs and the quorum's: a node without a controller answers NOT_CONTROLLER
CONTROLLER_APIS = keys_routed(Route.CONTROLLER, Route.QUORUM)
# committed offsets and group admin: served by the group's coordinator broker (broker/groups/offsets.py)
GROUP_BROKER_APIS = keys_routed(Route.GROUP_COORDINATOR)
# transactions: served by the id's coordinator broker (broker/txn/coordinator.py)
TXN_BROKER_APIS = keys_routed(Route.TXN_COORDINATOR)


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
            if self.groups is not None:
                self.groups.txn_verifier = self.txn_verifier
        # api key -> this broker's handler (the Route.BROKER rows of the API table)
        self.broker_handlers: dict[int, BrokerHandler] = (
            self._broker_handlers(replica_manager) if replica_manager is not None else {})

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
        broker_handler = self.broker_handlers.get(key)
        if broker_handler is not None:
            return await broker_handler(body)
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
        if key in CONTROLLER_APIS or key in FORWARDED_APIS:
            hint = self.channel.leader_hint if self.channel is not None else None
            return {"error": int(ErrorCode.NOT_CONTROLLER),
                    "message": "this node is not a controller",
                    "leader_id": -1,
                    "leader_host": hint[0] if hint else None,
                    "leader_port": hint[1] if hint else None}
        raise error_for(ErrorCode.UNKNOWN_API, f"api {ApiKey(key).name} is not served by this node")

    def _broker_handlers(self, rm: ReplicaManager) -> dict[int, BrokerHandler]:
        """api key → this broker's handler: the rows of ``Route.BROKER``
        (``tests/protocol/test_api_table.py`` holds them equal; ``Route.NODE``, API_VERSIONS,
        is answered by ``dispatch`` itself, on any node). PRODUCE and FETCH return the
        handler's coroutine itself: no frame between the dispatch and the data plane."""
        image = lambda: self.publisher.image  # noqa: E731 - read at call time
        return {
            ApiKey.METADATA: self._metadata,
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.DESCRIBE_CONFIGS: _answer(
                lambda body: metadata_api.describe_configs(body, image(), self.topic_defaults)),
            ApiKey.PRODUCE: lambda body: data.produce(rm, body, self.txn_verifier),
            ApiKey.FETCH: lambda body: data.fetch(rm, body),
            ApiKey.LIST_OFFSETS: _answer(lambda body: data.list_offsets(rm, body)),
            ApiKey.DELETE_RECORDS: lambda body: delete_records.delete_records(rm, body),
            ApiKey.WRITE_TXN_MARKERS: lambda body: txn_data.write_txn_markers(rm, body),
            ApiKey.DESCRIBE_PRODUCERS: _answer(lambda body: txn_data.describe_producers(rm, body)),
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _answer(
                lambda body: security_api.describe_user_scram_credentials(body, image())),
            ApiKey.DESCRIBE_ACLS: _answer(lambda body: security_api.describe_acls(body, image())),
            ApiKey.DESCRIBE_CLIENT_QUOTAS: _answer(
                lambda body: security_api.describe_client_quotas(body, image(), self.quotas.usage())),
            ApiKey.LIST_PARTITION_REASSIGNMENTS: _answer(  # kraft/reassign.py
                lambda body: reassign_api.list_partition_reassignments(body, image(), rm)),
        }

    async def _metadata(self, body: dict[str, Any]) -> dict[str, Any]:
        """METADATA; a missing internal topic it names is created as the node first."""
        if isinstance(body.get("topics"), list) and self._missing_internal(body["topics"]):
            await self._create_internal_topics(body["topics"])
        return metadata_api.metadata(body, self.publisher.image, self.cluster_id)

    async def _find_coordinator(self, body: dict[str, Any]) -> dict[str, Any]:
        """FIND_COORDINATOR; the missing internal topic of its key type made as the node first."""
        topic = coordinator.coordinator_topic(body)
        if self._missing_internal([topic]):
            await self._create_internal_topics([topic])
        return coordinator.find_coordinator(body, self.publisher.image)

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
            answer = cast(TopicsResponse[CreatedTopic],
                          await admin.forward(self.channel, self.publisher, ApiKey.CREATE_TOPICS, body))
            errors = [t for t in answer.get("topics") or []
                      if t.get("error") not in (0, ErrorCode.TOPIC_ALREADY_EXISTS, None)]
            if answer.get("error") or errors:
                log.info("creating %s: %s", ", ".join(missing), answer)
            else:
                log.info("created %s (%d live brokers)", ", ".join(missing), live)
