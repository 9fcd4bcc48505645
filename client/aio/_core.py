"""What every async client shares: connections, the metadata cache, request routing.

Theory of operation
-------------------
A ``ClientCore`` lives inside the nursery of the client that owns it (producer, consumer or
admin); its ``ConnectionPool`` keeps at most one pipelined connection per broker, with the
reader tasks in that nursery.

``ClusterMetadata`` is a plain, synchronous fold of METADATA responses (testable without
sockets): brokers by id, partitions by topic, the controller id. ``ClientCore.refresh_metadata``
fetches it from any known broker, falling back to the bootstrap list, and is *single-flight*
(concurrent callers share one request) and *rate-limited* (at most one request per
``retry_backoff_ms``, doubling while every broker fails, up to 1 s): callers that meet
NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION / LEADER_NOT_AVAILABLE or a broken
connection call ``invalidate()`` and then refresh, and cannot hammer the cluster.

``request_node`` / ``request_any`` wrap each request in ``request_timeout_ms``; a timed-out
connection is discarded (its late responses would be orphans anyway), as Kafka does.

Errors that cannot heal end a wait at once instead of at its deadline: when no address of
``request_any`` resolves (every host name is unknown to DNS) it raises ``UnresolvableHostError``
(not retriable); ``wait_for_topic`` raises any non-retriable error it meets, and gives up on a
topic the brokers keep calling unknown after ``unknown_topic_grace_ms`` (rafka creates no topic
on demand; the grace covers a topic created a moment ago that some broker has not seen yet).
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterable
from typing import Any

import trio
from rafka.client.errors import (
    BootstrapTimeoutError,
    KafkaTimeoutError,
    NoBrokersAvailableError,
    UnresolvableHostError,
)
from rafka.client.types import BrokerMetadata, PartitionMetadata, TopicPartition
from rafka.security.client import ClientSecurity
from rafka.wire.connection import (
    ConnectionPool,
    PendingResponse,
    backoff_ms,
    parse_bootstrap,
    setup_timeout_ms,
)
from rafka.wire.errors import ErrorCode, RafkaError, error_for
from rafka.wire.gc_freeze import freeze_startup_objects
from rafka.wire.protocol import ApiKey, Response

__all__ = ["ClusterMetadata", "ClientCore", "REFRESH_CODES", "is_retriable"]

# Errors after which the client's idea of who leads what is probably stale.
REFRESH_CODES: frozenset[int] = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.BROKER_FENCED,
    }
)


def is_retriable(exc: BaseException) -> bool:
    return isinstance(exc, RafkaError) and exc.retriable


class ClusterMetadata:
    """The client's view of the cluster, folded from METADATA responses (no I/O)."""

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.brokers: dict[int, BrokerMetadata] = {}
        self.fenced: set[int] = set()  # brokers METADATA marks fenced (dead or not yet caught up)
        self.topics: dict[str, dict[int, PartitionMetadata]] = {}
        self.topic_errors: dict[str, int] = {}
        self.topic_ids: dict[str, Any] = {}
        self.internal: set[str] = set()
        self.version = 0
        self.updated_at = 0.0

    def update(self, body: dict[str, Any], *, all_topics: bool) -> None:
        self.cluster_id = body.get("cluster_id", self.cluster_id)
        cid = body.get("controller_id")
        self.controller_id = -1 if cid is None else int(cid)
        self.brokers = {
            int(b["node_id"]): BrokerMetadata(int(b["node_id"]), b["host"], int(b["port"]), b.get("rack"))
            for b in body.get("brokers") or []
        }
        self.fenced = {int(b["node_id"]) for b in body.get("brokers") or [] if b.get("fenced")}
        previous = self.topics
        if all_topics:
            self.topics = {}
            self.topic_errors = {}
            self.internal = set()
        for t in body.get("topics") or []:
            name = t["name"]
            err = t.get("error") or 0
            if err and not t.get("partitions"):
                self.topics.pop(name, None)
                self.topic_errors[name] = err
                continue
            self.topic_errors.pop(name, None)
            topic_id = t.get("topic_id")
            old_id = self.topic_ids.get(name)
            self.topic_ids[name] = topic_id
            if t.get("is_internal"):
                self.internal.add(name)
            # the same topic (not deleted and re-created) keeps what it knew per partition
            known = (previous.get(name) or {}) if old_id is None or topic_id is None or old_id == topic_id else {}
            parts: dict[int, PartitionMetadata] = {}
            for p in t.get("partitions") or []:
                pm = PartitionMetadata(
                    name,
                    int(p["partition"]),
                    -1 if p.get("leader") is None else int(p["leader"]),
                    int(p.get("leader_epoch", -1) if p.get("leader_epoch") is not None else -1),
                    tuple(p.get("replicas") or ()),
                    tuple(p.get("isr") or ()),
                    p.get("error") or 0,
                )
                old = known.get(pm.partition)
                if old is not None and 0 <= pm.leader_epoch < old.leader_epoch:
                    # a broker with a stale view (e.g. a deposed leader cut off from the
                    # controller) must not roll the leader back: keep the newer entry, as
                    # Kafka's Metadata does (KIP-320) — else a consumer fetches from the old
                    # leader in its old epoch, is told OFFSET_OUT_OF_RANGE and resets
                    pm = old
                parts[pm.partition] = pm
            self.topics[name] = parts
        self.version += 1
        self.updated_at = time.monotonic()

    def num_partitions(self, topic: str) -> int | None:
        parts = self.topics.get(topic)
        return len(parts) if parts else None

    def partitions_for(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in sorted(self.topics.get(topic) or ())]

    def leader(self, tp: TopicPartition) -> int:
        p = (self.topics.get(tp.topic) or {}).get(tp.partition)
        if p is None or p.leader < 0 or p.leader not in self.brokers:
            return -1
        return p.leader

    def partition(self, tp: TopicPartition) -> PartitionMetadata | None:
        return (self.topics.get(tp.topic) or {}).get(tp.partition)

    def invalidate_leader(self, tp: TopicPartition) -> None:
        """Forget ``tp``'s leader until the next refresh."""
        parts = self.topics.get(tp.topic)
        if parts and tp.partition in parts:
            parts[tp.partition] = parts[tp.partition]._replace(leader=-1)


class ClientCore:
    """Connections + metadata for one client; open with ``await core.open(nursery)``."""

    def __init__(
        self,
        bootstrap_servers: str | list[str],
        *,
        client_id: str,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300000,
        unknown_topic_grace_ms: int = 1000,
        security: ClientSecurity | None = None,
        connection_setup_timeout_ms: int | None = None,
    ) -> None:
        self.security = security  # TLS / SASL for every connection (security/client.py)
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.unknown_topic_grace_ms = unknown_topic_grace_ms
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.connection_setup_timeout_ms = setup_timeout_ms(connection_setup_timeout_ms)
        self.metadata_max_age_ms = metadata_max_age_ms
        self.metadata = ClusterMetadata()
        self.pool: ConnectionPool | None = None
        self._stack: contextlib.AsyncExitStack | None = None  # start() .. shutdown()
        self._nursery: trio.Nursery | None = None
        self.wanted_topics: set[str] = set()
        self._refreshing: trio.Event | None = None
        self._last_refresh = -1e9
        self._failures = 0
        self._stale = True
        # when the client began failing to reach any bootstrap address, before it ever reached
        # the cluster (None: it has, or has not tried yet); see ``request_any``
        self._unreachable_since: float | None = None

    async def start(self) -> trio.Nursery:
        """Open the owning client's nursery — its background tasks and this core's connection
        readers run there — and the connection pool in it; ``shutdown`` leaves it. Call both
        from the same task (``__aenter__`` / ``close``)."""
        stack = contextlib.AsyncExitStack()
        nursery = await stack.enter_async_context(trio.open_nursery())
        self.open(nursery)
        self._stack, self._nursery = stack, nursery
        return nursery

    async def shutdown(self) -> None:
        """Close every connection, cancel the client's tasks and leave its nursery. Idempotent;
        nothing to do when ``start`` never ran."""
        stack, self._stack = self._stack, None
        if stack is None:
            return
        assert self._nursery is not None
        try:
            await self.aclose()
        finally:
            self._nursery.cancel_scope.cancel()
            await stack.aclose()

    def open(self, nursery: trio.Nursery) -> None:
        """The connection pool, its readers in ``nursery`` (``start`` does this for a client)."""
        freeze_startup_objects()  # the first client of the process: short full GC passes later
        self.pool = ConnectionPool(nursery, client_id=self.client_id, security=self.security,
                                   setup_timeout_ms=self.connection_setup_timeout_ms)

    async def aclose(self) -> None:
        if self.pool is not None:
            await self.pool.aclose()

    # ------------------------------------------------------------------ requests

    async def request_address(
        self, host: str, port: int, api_key: ApiKey, body: dict[str, Any], *, extra_timeout_ms: int = 0,
        pending: PendingResponse | None = None,
    ) -> Response:
        """``api_key`` with ``body`` to ``host:port``, bounded by ``request_timeout_ms`` (+
        ``extra_timeout_ms``); ``pending``: the request was already written
        (``Connection.send_request_nowait``), only its answer is awaited, under the same bound."""
        assert self.pool is not None, "client is not open"
        timeout = (self.request_timeout_ms + extra_timeout_ms) / 1000
        with trio.move_on_after(timeout) as scope:
            if pending is not None:
                return await pending.wait()
            return await self.pool.request(host, port, int(api_key), body)
        if scope.cancelled_caught:
            self.pool.discard(host, port)
        raise error_for(
            ErrorCode.REQUEST_TIMED_OUT,
            f"{api_key.name} to {host}:{port} got no answer within {timeout * 1000:.0f} ms",
        )

    async def request_node(
        self, node_id: int, api_key: ApiKey, body: dict[str, Any], *, extra_timeout_ms: int = 0,
        pending: PendingResponse | None = None,
    ) -> Response:
        b = self.metadata.brokers.get(node_id)
        if b is None:
            if pending is not None:
                pending.abandon()
            self.invalidate()
            raise error_for(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {node_id} is not in the metadata")
        try:
            return await self.request_address(b.host, b.port, api_key, body,
                                              extra_timeout_ms=extra_timeout_ms, pending=pending)
        except RafkaError as exc:
            if exc.code in REFRESH_CODES:
                self.invalidate()
            raise

    def send_only_node(self, node_id: int) -> tuple[str, int]:
        b = self.metadata.brokers[node_id]
        return b.host, b.port

    def candidates(self) -> list[tuple[str, int]]:
        """Where ``request_any`` tries: the known brokers in random order — unfenced ones
        first, fenced ones (a killed broker until it is back: its address may not even answer
        a SYN, costing a whole connection setup timeout) last — then the bootstrap list."""
        md = self.metadata
        live = [(b.host, b.port) for b in md.brokers.values() if b.node_id not in md.fenced]
        random.shuffle(live)
        fenced = [(b.host, b.port) for b in md.brokers.values() if b.node_id in md.fenced]
        return live + [a for a in self.bootstrap if a not in live and a not in fenced] + fenced

    async def request_any(self, api_key: ApiKey, body: dict[str, Any]) -> Response:
        """Send to the first broker that answers (known brokers, then the bootstrap list).

        A client that has never reached the cluster gives up for good once every address has
        failed for ``connection_setup_timeout_ms`` (``BootstrapTimeoutError``, not retriable:
        a wrong ``--bootstrap`` fails in seconds, not after ``max_block_ms``); the message names
        each address tried and why it failed."""
        last: BaseException | None = None
        unresolved: list[str] = []
        failed: dict[str, str] = {}
        candidates = self.candidates()
        started = time.monotonic()
        for host, port in candidates:
            try:
                resp = await self.request_address(host, port, api_key, body)
                self._unreachable_since = None
                return resp
            except RafkaError as exc:
                if exc.code not in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.BROKER_NOT_AVAILABLE,
                                    ErrorCode.REQUEST_TIMED_OUT):
                    raise
                last = exc
                failed[f"{host}:{port}"] = exc.message
                if exc.details.get("unresolvable"):
                    unresolved.append(exc.message)
        if unresolved and len(unresolved) == len(candidates):  # no name resolves: cannot heal
            raise UnresolvableHostError("; ".join(dict.fromkeys(unresolved)))
        tried = "; ".join(f"{addr} ({why})" for addr, why in failed.items())
        if self.bootstrapping:
            if self._unreachable_since is None:
                self._unreachable_since = started
            if self.bootstrap_deadline_passed():
                raise BootstrapTimeoutError(
                    f"could not reach any broker within {self.connection_setup_timeout_ms} ms "
                    f"(connection setup timeout; CLI --timeout); tried {tried}")
        raise NoBrokersAvailableError(f"no broker answered: {tried or last}")

    @property
    def bootstrapping(self) -> bool:
        """True until the first METADATA answer: the client has never reached the cluster."""
        return self.metadata.version == 0

    def bootstrap_deadline_passed(self) -> bool:
        since = self._unreachable_since
        return since is not None and time.monotonic() - since >= self.connection_setup_timeout_ms / 1000

    def _bootstrap_time_left_s(self) -> float:
        since = self._unreachable_since
        if since is None or not self.bootstrapping:
            return float("inf")
        return max(0.0, since + self.connection_setup_timeout_ms / 1000 - time.monotonic())

    # ------------------------------------------------------------------ metadata

    def invalidate(self) -> None:
        self._stale = True

    @property
    def stale(self) -> bool:
        age_ms = (time.monotonic() - self.metadata.updated_at) * 1000
        return self._stale or age_ms > self.metadata_max_age_ms

    async def refresh_metadata(self, topics: Iterable[str] = (), *, all_topics: bool = False) -> ClusterMetadata:
        """Refresh the cache (single-flight, rate limited); returns it."""
        self.wanted_topics.update(topics)
        want = set(self.wanted_topics)
        while self._refreshing is not None:
            ev = self._refreshing
            await ev.wait()
            if not all_topics and want <= self.wanted_topics and not self._stale:
                return self.metadata
        ev = self._refreshing = trio.Event()
        try:
            delay = backoff_ms(self._failures, self.retry_backoff_ms, 1000) if self._failures else self.retry_backoff_ms
            # a failing bootstrap's last attempt lands on its deadline, not a backoff past it
            await trio.sleep(min(max(0.0, self._last_refresh + delay / 1000 - time.monotonic()),
                                 self._bootstrap_time_left_s()))
            self._last_refresh = time.monotonic()
            body = {"topics": None if all_topics else sorted(self.wanted_topics)}
            try:
                resp = await self.request_any(ApiKey.METADATA, body)
                resp.raise_for_error()
            except RafkaError:
                self._failures += 1
                raise
            self._failures = 0
            self._stale = False
            self.metadata.update(resp.body, all_topics=all_topics or not self.wanted_topics)
            return self.metadata
        finally:
            self._refreshing = None
            ev.set()

    async def ensure_fresh(self) -> None:
        if self.stale:
            try:
                await self.refresh_metadata()
            except RafkaError:
                pass  # callers work with what they have and retry later

    async def wait_for_topic(self, topic: str, timeout_ms: float, *,
                             unknown_topic_grace_ms: float | None = None) -> int:
        """Partition count of ``topic``, refreshing until it is known or ``timeout_ms`` passes.

        Raises at once what cannot heal: a non-retriable error, and UNKNOWN_TOPIC_OR_PARTITION
        once the brokers have called the topic unknown for ``unknown_topic_grace_ms`` (default:
        the core's; pass ``timeout_ms`` for a topic being created right now)."""
        n = self.metadata.num_partitions(topic)
        if n:
            return n
        grace_s = (self.unknown_topic_grace_ms if unknown_topic_grace_ms is None else unknown_topic_grace_ms) / 1000
        last: BaseException | None = None
        unknown_since: float | None = None
        with trio.move_on_after(timeout_ms / 1000):
            while True:
                self.invalidate()
                try:
                    await self.refresh_metadata([topic])
                except RafkaError as exc:
                    if not exc.retriable:
                        raise
                    last = exc
                n = self.metadata.num_partitions(topic)
                if n:
                    return n
                code = self.metadata.topic_errors.get(topic)
                if code and code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    refused = error_for(code, f"topic {topic!r}: {ErrorCode(code).name.lower()}")
                    if not refused.retriable:  # e.g. TOPIC_AUTHORIZATION_FAILED: cannot heal
                        raise refused
                if code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    unknown_since = None
                elif unknown_since is None:
                    unknown_since = time.monotonic()
                elif time.monotonic() - unknown_since >= grace_s:
                    raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
        code = self.metadata.topic_errors.get(topic)
        if code:
            raise error_for(code, f"topic {topic!r}: {ErrorCode(code).name.lower()} after {timeout_ms:.0f} ms")
        raise KafkaTimeoutError(f"no metadata for topic {topic!r} within {timeout_ms:.0f} ms: {last}")
