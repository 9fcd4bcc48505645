"""AsyncAdmin: topic, config, cluster and quorum administration (trio).

Theory of operation: admin requests that change metadata (CREATE_TOPICS, DELETE_TOPICS,
CREATE_PARTITIONS, ALTER_CONFIGS) go to any broker, which forwards them to the active
controller; NOT_CONTROLLER and connection errors (a controller election in progress) are retried
with backoff for up to ``request_timeout_ms``. Reads come from METADATA (topics, leaders,
replicas, ISR), LIST_OFFSETS to each leader (high watermarks and log start offsets), and
DESCRIBE_QUORUM. Per-topic errors are raised as their named ``RafkaError`` subclasses
(``TopicAlreadyExistsError``, ``UnknownTopicOrPartitionError``, …), or returned per topic by the
plural methods with ``raise_on_error=False``.

Idempotence: every call of create_topics / delete_topics / create_partitions / alter_configs
makes ONE ``request_id`` (``uuid.uuid4().hex``) and sends the same body — the same id — on
every retry, ours here and the forwarding broker's to the controller. When an attempt was
committed but its answer lost (a controller change during the proposal, a forward timing
out), the retry is answered with the original outcome (success) instead of
TOPIC_ALREADY_EXISTS / UNKNOWN_TOPIC_OR_PARTITION / INVALID_PARTITIONS for the caller's own
change (``kraft/service.py``). A random id, not client id + counter: the default client id is
shared by every admin instance and a counter restarts with the process, so a new process's
"create t" could otherwise be answered by an old process's dedup entry for "create t" without
creating anything. A broker that predates ``request_id`` ignores it (old behaviour).

Transactions (``list_transactions``, ``describe_transactions``, ``describe_producers``,
``abort_transaction``) are in ``rafka.client.aio.txn_admin``; the methods here call it.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, NamedTuple

import trio
from rafka.client.aio import reassign_admin, security_admin, txn_admin
from rafka.client.aio._core import REFRESH_CODES, ClientCore
from rafka.client.aio.conveniences import ConsumerGroupListing, GroupAdminApi
from rafka.client.aio.offsets import EARLIEST, LATEST, list_offsets
from rafka.client.aio.reassign_admin import PartitionReassignment
from rafka.client.aio.txn_admin import ProducerState, TransactionDescription, TransactionListing
from rafka.client.errors import IllegalStateError
from rafka.client.types import BrokerMetadata, TopicPartition
from rafka.security.client import ClientSecurity
from rafka.wire.connection import backoff_ms
from rafka.wire.errors import ErrorCode, RafkaError, error_for
from rafka.wire.protocol import ApiKey, Response

__all__ = ["AsyncAdmin", "ConsumerGroupListing", "NewTopic", "PartitionDescription", "TopicDescription", "ClusterDescription",
           "TransactionListing", "TransactionDescription", "ProducerState", "PartitionReassignment"]


class NewTopic(NamedTuple):
    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    config: Mapping[str, str] | None = None


class PartitionDescription(NamedTuple):
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    high_watermark: int | None  # None when the leader could not be asked
    log_start_offset: int | None


class TopicDescription(NamedTuple):
    name: str
    topic_id: Any
    internal: bool
    partitions: list[PartitionDescription]
    configs: dict[str, str]


class ClusterDescription(NamedTuple):
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerMetadata]


class AsyncAdmin(GroupAdminApi):
    """``async with AsyncAdmin(bootstrap_servers=...) as a: await a.create_topic("t", 3, 1)``.

    Consumer groups: ``list_consumer_groups``, ``describe_consumer_groups``,
    ``list_consumer_group_offsets``, ``delete_consumer_groups`` (``GroupAdminApi``)."""

    def __init__(self, bootstrap_servers: str | list[str] = "127.0.0.1:9092", *,
                 client_id: str = "rafka-admin", request_timeout_ms: int = 30000,
                 retry_backoff_ms: int = 100, connection_setup_timeout_ms: int | None = None,
                 **security: Any) -> None:
        self.request_timeout_ms = request_timeout_ms
        # security: security_protocol, sasl_*, ssl_* as kafka-python (security/client.py)
        self._core = ClientCore(bootstrap_servers, client_id=client_id,
                                request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
                                connection_setup_timeout_ms=connection_setup_timeout_ms,
                                security=ClientSecurity.from_kwargs(security))
        self._nursery: trio.Nursery | None = None
        self._closed = False

    async def __aenter__(self) -> AsyncAdmin:
        if self._nursery is not None or self._closed:
            raise IllegalStateError("an admin client can be started once; create a new one")
        self._nursery = await self._core.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        await self.close()
        return None

    async def close(self) -> None:
        """Close connections and stop. Idempotent."""
        self._closed = True
        await self._core.shutdown()

    def _check_open(self) -> None:
        if self._nursery is None or self._closed:
            raise IllegalStateError("admin client is not open (use `async with AsyncAdmin(...)`)")

    # ------------------------------------------------------------------ plumbing

    async def _request(self, api: ApiKey, body: dict[str, Any]) -> Response:
        """Any broker; retries NOT_CONTROLLER / unreachable brokers until request_timeout_ms.
        Every attempt sends ``body`` itself, so a ``request_id`` in it is the same on each."""
        self._check_open()
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        attempt = 0
        while True:
            try:
                resp = await self._core.request_any(api, body)
                code = resp.body.get("error") or 0
                if code in (ErrorCode.NOT_CONTROLLER, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    raise error_for(code, resp.body.get("message") or "")
                return resp
            except RafkaError as exc:
                if not (exc.retriable or exc.code in REFRESH_CODES) or time.monotonic() >= deadline:
                    raise
            attempt += 1
            await trio.sleep(backoff_ms(attempt, self._core.retry_backoff_ms, 1000) / 1000)

    async def _per_topic(self, api: ApiKey, body: dict[str, Any], raise_on_error: bool) -> dict[str, RafkaError | None]:
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        attempt = 0
        while True:
            resp = await self._request(api, body)
            resp.raise_for_error()
            out: dict[str, RafkaError | None] = {}
            retry = False
            for t in resp.body.get("topics") or []:
                code = t.get("error") or 0
                out[t["name"]] = error_for(code, _topic_message(t)) if code else None
                # REQUEST_TIMED_OUT: an earlier attempt may still be deciding (retries carry the
                # same request_id, so a retry answers that attempt's outcome once known)
                if code in (ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT):
                    retry = True
            if retry and time.monotonic() < deadline:
                attempt += 1
                await trio.sleep(backoff_ms(attempt, self._core.retry_backoff_ms, 1000) / 1000)
                continue
            if raise_on_error:
                for err in out.values():
                    if err is not None:
                        raise err
            self._core.invalidate()
            return out

    # ------------------------------------------------------------------ topics

    async def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                           config: Mapping[str, str] | None = None, *, validate_only: bool = False,
                           exist_ok: bool = False) -> bool:
        """Create one topic; True if created. ``exist_ok``: a topic of that name already there
        is no error (returns False; its partitions and configs are left as they are)."""
        out = await self.create_topics([NewTopic(name, partitions, replication_factor, config)],
                                       validate_only=validate_only, raise_on_error=not exist_ok)
        err = out.get(name)
        if err is not None and err.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise err
        return err is None

    async def create_topics(self, topics: Iterable[NewTopic | tuple[Any, ...]], *, validate_only: bool = False,
                            raise_on_error: bool = True) -> dict[str, RafkaError | None]:
        items = [NewTopic(*t) for t in topics]
        body = {"topics": [{"name": t.name, "num_partitions": int(t.num_partitions),
                            "replication_factor": int(t.replication_factor),
                            "configs": {str(k): str(v) for k, v in (t.config or {}).items()}}
                           for t in items],
                "timeout_ms": self.request_timeout_ms, "validate_only": validate_only,
                "request_id": _request_id()}
        out = await self._per_topic(ApiKey.CREATE_TOPICS, body, raise_on_error)
        if not validate_only:
            await self._wait_topics({t.name for t in items if out.get(t.name) is None}, present=True)
        return out

    async def delete_topic(self, name: str) -> None:
        await self.delete_topics([name])

    async def delete_topics(self, names: Iterable[str], *, raise_on_error: bool = True) -> dict[str, RafkaError | None]:
        names = list(names)
        out = await self._per_topic(ApiKey.DELETE_TOPICS, {"topics": names, "timeout_ms": self.request_timeout_ms,
                                                           "request_id": _request_id()}, raise_on_error)
        await self._wait_topics({n for n in names if out.get(n) is None}, present=False)
        return out

    async def _wait_topics(self, names: set[str], *, present: bool) -> None:
        """Best effort: until the brokers' metadata shows the change (bounded)."""
        if not names:
            return
        with trio.move_on_after(self.request_timeout_ms / 1000):
            while True:
                with contextlib.suppress(RafkaError):
                    meta = await self._core.refresh_metadata(all_topics=True)
                    if present and all(meta.num_partitions(n) and all(
                            p.leader >= 0 for p in meta.topics[n].values()) for n in names):
                        return
                    if not present and not (names & set(meta.topics)):
                        return
                await trio.sleep(0.05)

    async def create_partitions(self, topic: str, total_count: int) -> None:
        """Grow ``topic`` to ``total_count`` partitions."""
        await self._per_topic(ApiKey.CREATE_PARTITIONS,
                              {"topics": [{"name": topic, "count": int(total_count)}],
                               "timeout_ms": self.request_timeout_ms, "request_id": _request_id()}, True)

    async def list_topics(self, *, include_internal: bool = False) -> list[str]:
        self._check_open()
        meta = await self._core.refresh_metadata(all_topics=True)
        return sorted(n for n in meta.topics if include_internal or n not in meta.internal)

    async def describe_topic(self, name: str) -> TopicDescription:
        return (await self.describe_topics([name]))[0]

    async def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        """Leader, replicas, ISR and high watermark of every partition."""
        self._check_open()
        wanted = None if names is None else list(names)
        resp = await self._request(ApiKey.METADATA, {"topics": wanted})
        resp.raise_for_error()
        self._core.metadata.update(resp.body, all_topics=False)
        topics = []
        for t in resp.body.get("topics") or []:
            code = t.get("error") or 0
            if code and not t.get("partitions"):
                raise error_for(code, _topic_message(t))
            if wanted is None and t.get("is_internal"):
                continue
            topics.append(t)
        tps = [TopicPartition(t["name"], int(p["partition"])) for t in topics for p in t.get("partitions") or []]
        hw: dict[TopicPartition, tuple[int, int]] = {}
        ls: dict[TopicPartition, tuple[int, int]] = {}
        alive = [tp for tp in tps if self._core.metadata.leader(tp) >= 0]
        if alive:
            with contextlib.suppress(RafkaError):
                hw = await list_offsets(self._core, {tp: LATEST for tp in alive}, attempts=2)
            with contextlib.suppress(RafkaError):
                ls = await list_offsets(self._core, {tp: EARLIEST for tp in alive}, attempts=2)
        out = []
        for t in topics:
            parts = []
            for p in sorted(t.get("partitions") or [], key=lambda p: p["partition"]):
                tp = TopicPartition(t["name"], int(p["partition"]))
                parts.append(PartitionDescription(
                    tp.partition, int(p.get("leader", -1)), int(p.get("leader_epoch", -1)),
                    tuple(p.get("replicas") or ()), tuple(p.get("isr") or ()),
                    hw[tp][0] if tp in hw else None, ls[tp][0] if tp in ls else None))
            out.append(TopicDescription(t["name"], t.get("topic_id"), bool(t.get("is_internal")), parts,
                                        dict(t.get("configs") or {})))
        return out

    # ------------------------------------------------------------------ configs

    async def describe_configs(self, topic: str) -> dict[str, Any]:
        """Effective config of ``topic`` (defaults merged with its overrides)."""
        resp = await self._request(ApiKey.DESCRIBE_CONFIGS, {"topics": [topic]})
        resp.raise_for_error()
        for t in resp.body.get("topics") or []:
            if t["name"] == topic:
                if t.get("error"):
                    raise error_for(t["error"], f"topic {topic!r}: {t.get('message') or ''}".rstrip(": "))
                return dict(t.get("configs") or {})
        raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r}")

    async def alter_configs(self, topic: str, configs: Mapping[str, str | None]) -> None:
        """Set (or, with value ``None``, remove) per-topic overrides."""
        body = {"topics": [{"name": topic, "configs": {str(k): (None if v is None else str(v))
                                                       for k, v in configs.items()}}],
                "request_id": _request_id()}
        await self._per_topic(ApiKey.ALTER_CONFIGS, body, True)

    # ------------------------------------------------------------------ cluster

    async def describe_cluster(self) -> ClusterDescription:
        self._check_open()
        meta = await self._core.refresh_metadata(all_topics=True)
        return ClusterDescription(meta.cluster_id, meta.controller_id,
                                  sorted(meta.brokers.values(), key=lambda b: b.node_id))

    async def describe_quorum(self) -> dict[str, Any]:
        """Voters, leader, epoch, metadata offsets and lag (DESCRIBE_QUORUM body)."""
        resp = await self._request(ApiKey.DESCRIBE_QUORUM, {})
        resp.raise_for_error()
        return dict(resp.body)

    async def add_raft_voter(self, voter_id: int, address: str) -> list[dict[str, Any]]:
        """Make the controller at Raft ``address`` ("host:port") voter ``voter_id`` (KIP-853;
        docs/operations.md). Returns the new voter set."""
        resp = await self._request(ApiKey.ADD_RAFT_VOTER, {"voter_id": voter_id, "address": address})
        resp.raise_for_error()
        return list(resp.body.get("voters") or [])

    async def remove_raft_voter(self, voter_id: int) -> list[dict[str, Any]]:
        """Remove voter ``voter_id`` from the controller quorum. Returns the new voter set."""
        resp = await self._request(ApiKey.REMOVE_RAFT_VOTER, {"voter_id": voter_id})
        resp.raise_for_error()
        return list(resp.body.get("voters") or [])

    async def list_offsets(self, timestamps: Mapping[TopicPartition, int], *,
                           isolation_level: int = 0) -> dict[TopicPartition, tuple[int, int]]:
        """Raw LIST_OFFSETS: ``{tp: ts}`` (-2 earliest, -1 latest) → ``{tp: (offset, timestamp)}``;
        ``isolation_level=1``: latest is the last stable offset."""
        self._check_open()
        return await list_offsets(self._core, dict(timestamps), isolation_level=isolation_level)

    async def delete_records(self, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """DELETE_RECORDS: ``{tp: offset}`` (-1: the high watermark) → ``{tp: low watermark}``,
        the partition's log start offset after. Each partition's leader deletes the records
        below ``offset``; raises e.g. ``OffsetOutOfRangeError`` (offset above the high
        watermark) for the first partition that failed."""
        self._check_open()
        out: dict[TopicPartition, int] = {}
        for tp, offset in before.items():
            tp = TopicPartition(*tp)

            async def ask(tp: TopicPartition = tp, offset: int = offset) -> int:
                body = await txn_admin._leader_request(self._core, tp, ApiKey.DELETE_RECORDS, {
                    "topics": [{"name": tp.topic, "partitions": [
                        {"partition": tp.partition, "offset": offset}]}]})
                p = txn_admin._partition_entry(body.get("topics"), tp)
                txn_admin._check(p.get("error"), p.get("message"), f"{tp.topic}-{tp.partition}")
                return int(p["low_watermark"])

            out[tp] = await txn_admin._retrying(self._core, ask)
        return out

    # ------------------------------------------------------------------ transactions

    async def list_transactions(self, states: Iterable[str] | None = None) -> list[TransactionListing]:
        """Every transactional id known to the coordinators (all brokers asked, answers merged);
        ``states`` filters by Kafka's state names (``Ongoing``, ``PrepareCommit``, …)."""
        self._check_open()
        return await txn_admin.list_transactions(self._core, states)

    async def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        """Each id's state, producer id/epoch, timeout, start time and partitions (from its
        coordinator). Raises e.g. ``TransactionalIdNotFoundError``."""
        self._check_open()
        return await txn_admin.describe_transactions(self._core, transactional_ids)

    async def describe_producers(self, topic: str, partition: int) -> list[ProducerState]:
        """The producers the partition's leader tracks (``txn_first_offset`` ≥ 0: one open
        transaction there)."""
        self._check_open()
        return await txn_admin.describe_producers(self._core, TopicPartition(topic, partition))

    async def abort_transaction(self, topic: str, partition: int, producer_id: int,
                                producer_epoch: int | None = None) -> ProducerState:
        """Operator abort of a hanging transaction on one partition: an ABORT marker
        (coordinator epoch -1) after checking that the producer has a transaction open there.
        Returns the producer's state before the abort."""
        self._check_open()
        return await txn_admin.abort_transaction(self._core, TopicPartition(topic, partition),
                                                 producer_id, producer_epoch)

    # ------------------------------------------------------------------ security (client/aio/security_admin.py)

    async def upsert_scram_credential(self, user: str, password: str, *,
                                      mechanism: str = "SCRAM-SHA-256", iterations: int = 4096) -> None:
        """Create or replace a SCRAM credential (derived here: the password is never sent)."""
        self._check_open()
        await security_admin.upsert_scram_credential(self, user, password, mechanism=mechanism,
                                                     iterations=iterations)

    async def delete_scram_credential(self, user: str, *, mechanism: str = "SCRAM-SHA-256") -> None:
        self._check_open()
        await security_admin.delete_scram_credential(self, user, mechanism=mechanism)

    async def describe_scram_credentials(self, users: Iterable[str] | None = None) -> dict[str, dict[str, int]]:
        """user -> {mechanism: iterations} (never salts or keys)."""
        self._check_open()
        return await security_admin.describe_scram_credentials(self, users)

    # ------------------------------------------------------------------ reassignment (client/aio/reassign_admin.py)

    async def alter_partition_reassignments(self, reassignments: Mapping[Any, Sequence[int] | None], *,
                                            throttle_bytes_per_s: int = 0) -> None:
        """``{TopicPartition: [broker ids] | None}``: move replicas (None cancels); all or nothing."""
        self._check_open()
        await reassign_admin.alter_partition_reassignments(
            self, reassignments, throttle_bytes_per_s=throttle_bytes_per_s)

    async def list_partition_reassignments(self, partitions: Iterable[Any] | None = None
                                           ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress, with the adding replicas' catch-up lag."""
        self._check_open()
        return await reassign_admin.list_partition_reassignments(self, partitions)

    async def decommission_broker(self, broker_id: int, *, throttle_bytes_per_s: int = 0,
                                  cancel: bool = False) -> dict[TopicPartition, tuple[int, ...]]:
        """Move every replica off ``broker_id`` and place no new ones there (``cancel``: undo)."""
        self._check_open()
        return await reassign_admin.decommission_broker(
            self, broker_id, throttle_bytes_per_s=throttle_bytes_per_s, cancel=cancel)

    async def unregister_broker(self, broker_id: int) -> None:
        """Remove a stopped broker that holds no replica (Kafka's UNREGISTER_BROKER)."""
        self._check_open()
        await reassign_admin.unregister_broker(self, broker_id)


def _request_id() -> str:
    """One per logical admin call (see the module docstring): 32 hex characters."""
    return uuid.uuid4().hex


def _topic_message(t: Mapping[str, Any]) -> str:
    """The broker's message for a topic entry, naming the topic once."""
    msg = t.get("message") or ""
    name = t["name"]
    return msg if name in msg else (f"topic {name!r}: {msg}" if msg else f"topic {name!r}")
