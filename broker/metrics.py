"""Prometheus metrics of one node, served on its ``metrics_listener`` (``/metrics``).

Theory of operation
-------------------
``NodeMetrics`` owns a per-node ``CollectorRegistry`` (never prometheus_client's global one, so
several nodes in one test process do not clash). Two kinds of metrics live in it:

* **event metrics**, updated where the event happens, at most once per request or round:
  ``instrument(dispatch)`` wraps the server's dispatch and does one histogram observe per
  request (``rafka_request_duration_seconds{api}``; its ``_count`` is the request rate), plus,
  for PRODUCE and consumer FETCH, one counter add per *partition* entry of the request/answer
  (``rafka_topic_bytes_in_total`` / ``rafka_topic_bytes_out_total{topic}``: the produce
  payloads that were appended, the ``records_len`` fetched) — no per-record work. The
  replica manager reports each group-commit round to ``observe_flush`` (one observe per
  round: ``rafka_log_flush_duration_seconds``). ``on_metadata`` is a metadata subscriber: it
  compares each new registration of a partition this broker leads with the previous one
  (ISR shrinks/expands, counted on the leader as Kafka does) and counts rebalances
  (a new assignment epoch) of the groups this node coordinates.
* **state metrics**, computed at scrape time by ``_StateCollector`` from what the node already
  holds: partitions led and under-replicated (ISR smaller than the replica set), offline
  partitions and fenced brokers (reported by the active controller only, so a sum over nodes
  is right), active controller 0/1, the Raft term, commit index and leader changes of this
  voter (``SyncObjQuorum.statistics()``), the metadata offset, open connections, and per
  consumer group that this broker coordinates (leads its ``__consumer_offsets`` partition):
  state, members, epoch, committed offset and lag per partition (the committed offsets and the
  expiry count from ``GroupOffsetsManager.statistics()``, a typed snapshot: nothing here reads
  a coordinator's private attributes).

Lag is ``high watermark − committed offset``, computed server-side on the group's coordinator.
Its high watermarks need not be local, so ``render()`` first runs ``refresh()``: one
LIST_OFFSETS(latest) per partition leader — this broker's own partitions through the handler,
others through the node's ``ConnectionPool`` — all concurrently and bounded by
``LAG_TIMEOUT_S``; a leader that does not answer in time leaves its partitions without a lag
sample in that scrape rather than delaying it. Nothing is computed between scrapes.

``serve(host, port)`` runs the HTTP endpoint (``wire/http_server.py``) in the caller's
nursery: ``GET /metrics`` (text exposition format), ``GET /`` a pointer to it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import trio
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from rafka.broker.groups.offsets_cache import OFFSETS_TOPIC, offsets_partition
from rafka.broker.server import Dispatch, Reply
from rafka.metadata.image import MetadataImage, TopicPartition
from rafka.wire.errors import RafkaError
from rafka.wire.http_server import HttpResponse, serve_http
from rafka.wire.protocol import ApiKey, Request

if TYPE_CHECKING:
    from rafka.broker.groups.offsets import GroupOffsetsManager, GroupOffsetsStatistics

__all__ = ["NodeMetrics", "LAG_TIMEOUT_S", "REQUEST_BUCKETS_S"]

log = logging.getLogger("rafka.metrics")

LAG_TIMEOUT_S = 1.0
REQUEST_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                     2.5, 5.0, 10.0, 30.0, float("inf"))
FLUSH_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, float("inf"))
_LATEST = -1


def _api_name(key: int) -> str:
    try:
        return ApiKey(key).name.lower()
    except ValueError:
        return f"api_{key}"


class NodeMetrics:
    """The metrics of one node; see the module docstring. Every source is optional: a
    controller-only node has no replica manager, a broker-only node no controller."""

    def __init__(self, node_id: int, *, publisher: Any, replica_manager: Any = None,
                 controller: Any = None, groups: GroupOffsetsManager | None = None,
                 pool: Any = None,
                 server: Any = None) -> None:
        self.node_id = node_id
        self.publisher = publisher
        self.rm = replica_manager
        self.controller = controller
        self.groups = groups
        self.pool = pool
        self.server = server
        self.secured_server: Any = None  # the [security] listener's Server, when there is one
        self.kafka_listeners: list[Any] = []  # broker/kafka/listener.py, when configured
        disable_created_metrics()  # no *_created series: they double the output and help nobody here
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.request_seconds = Histogram(
            "rafka_request_duration_seconds", "Time from a request's dispatch to its answer, per api",
            ["api"], registry=r, buckets=REQUEST_BUCKETS_S)
        self.request_errors = Counter(
            "rafka_request_errors", "Requests answered with a top-level error, per api", ["api"],
            registry=r)
        self.bytes_in = Counter("rafka_topic_bytes_in", "Produce payload bytes appended, per topic",
                                ["topic"], registry=r)
        self.bytes_out = Counter("rafka_topic_bytes_out", "Bytes served to consumers, per topic",
                                 ["topic"], registry=r)
        self.replication_bytes_out = Counter(
            "rafka_replication_bytes_out", "Bytes served to follower fetches", registry=r)
        self.flush_seconds = Histogram(
            "rafka_log_flush_duration_seconds", "Duration of one log flush (group-commit) round",
            registry=r, buckets=FLUSH_BUCKETS_S)
        self.isr_shrinks = Counter("rafka_isr_shrinks", "ISR shrinks of partitions this broker leads",
                                   registry=r)
        self.isr_expands = Counter("rafka_isr_expands", "ISR expands of partitions this broker leads",
                                   registry=r)
        self.rebalances = Counter(
            "rafka_consumer_group_rebalances", "New target assignments of the groups this node "
            "coordinates", ["group"], registry=r)
        self._by_api: dict[int, tuple[Any, Any]] = {}
        self._lag_hw: dict[TopicPartition, int] = {}
        r.register(_StateCollector(self))
        if replica_manager is not None:
            replica_manager.flush_observer = self.observe_flush
            publisher.subscribe(self.on_metadata)

    # -- events -----------------------------------------------------------------------------

    def _children(self, key: int) -> tuple[Any, Any]:
        c = self._by_api.get(key)
        if c is None:
            name = _api_name(key)
            c = self._by_api[key] = (self.request_seconds.labels(name), self.request_errors.labels(name))
        return c

    def instrument(self, dispatch: Dispatch) -> Dispatch:
        """``dispatch`` plus one latency observe per request (and bytes per topic for
        PRODUCE / FETCH). The wrapper awaits ``dispatch`` directly, so the server's
        "arrival order up to the first wait" still holds."""

        async def instrumented(req: Request) -> Reply | dict[str, Any] | None:
            hist, errors = self._children(req.api_key)
            start = time.perf_counter()
            try:
                out = await dispatch(req)
            except RafkaError:
                errors.inc()
                raise
            finally:
                hist.observe(time.perf_counter() - start)
            body = out.body if isinstance(out, Reply) else out
            if body is None:
                if req.api_key == ApiKey.PRODUCE:  # acks=0: no answer, count what was sent
                    self._count_produce(req.body, None)
            else:
                if body.get("error"):
                    errors.inc()
                elif req.api_key == ApiKey.PRODUCE:
                    self._count_produce(req.body, body)
                elif req.api_key == ApiKey.FETCH:
                    self._count_fetch(req.body, body)
            return out

        return instrumented

    def _count_produce(self, request: Mapping[str, Any], answer: Mapping[str, Any] | None) -> None:
        answered = answer.get("topics", ()) if answer is not None else None
        for i, t_req in enumerate(request.get("topics", ())):
            entries = answered[i].get("partitions", ()) if answered is not None and i < len(answered) else None
            n = sum(len(pd["records"]) for j, pd in enumerate(t_req["partitions"])
                    if entries is None or (j < len(entries) and not entries[j].get("error")))
            if n:
                self.bytes_in.labels(t_req["name"]).inc(n)

    def _count_fetch(self, request: Mapping[str, Any], answer: Mapping[str, Any]) -> None:
        follower = (request.get("replica_id") or -1) >= 0
        for t in answer.get("topics", ()):
            n = sum(pd.get("records_len") or 0 for pd in t.get("partitions", ()))
            if not n:
                continue
            if follower:
                self.replication_bytes_out.inc(n)
            else:
                self.bytes_out.labels(t["name"]).inc(n)

    def observe_flush(self, seconds: float) -> None:
        self.flush_seconds.observe(seconds)

    async def on_metadata(self, image: MetadataImage, changes: Any) -> None:
        """Metadata subscriber: runs before ``image`` becomes current, so the publisher's
        image is still the previous one."""
        previous: MetadataImage = self.publisher.image
        for tp, reg in changes.leaders.items():
            old = previous.topics.partition(tp.topic, tp.partition)
            if old is None or old.leader != reg.leader:
                continue  # a new leadership is not an ISR change
            before, after = set(old.isr), set(reg.isr)
            if before - after:
                self.isr_shrinks.inc()
            if after - before:
                self.isr_expands.inc()
        if image.groups is previous.groups:
            return
        for gid, g in image.groups.groups.items():
            old_g = previous.groups.get(gid)
            if old_g is g or (old_g is not None and old_g.assignment_epoch >= g.assignment_epoch):
                continue
            if g.assignment_epoch > 0 and self._coordinates(image, gid):
                self.rebalances.labels(gid).inc()

    def _coordinates(self, image: MetadataImage, group_id: str) -> bool:
        """This broker leads the group's ``__consumer_offsets`` partition."""
        t = image.topics.get(OFFSETS_TOPIC)
        if t is None or not t.partitions:
            return False
        reg = t.partitions.get(offsets_partition(group_id, len(t.partitions)))
        return reg is not None and reg.leader == self.node_id

    # -- scrape -----------------------------------------------------------------------------

    def image(self) -> MetadataImage:
        """The freshest image this node has: its broker's, else its controller's quorum's."""
        if self.rm is None and self.controller is not None and self.controller.quorum is not None:
            return self.controller.quorum.image()
        return self.publisher.image

    def committed_offsets(
        self, stats: GroupOffsetsStatistics | None = None
    ) -> list[tuple[str, str, int, int]]:
        """``(group, topic, partition, committed offset)`` of every group this broker
        coordinates (the offsets caches of the ``__consumer_offsets`` partitions it leads), from
        ``stats`` (default: a fresh ``groups.statistics()``)."""
        if stats is None:
            if self.groups is None:
                return []
            stats = self.groups.statistics()
        return [(c.group_id, c.topic, c.partition, c.offset) for c in stats.committed]

    async def refresh(self) -> None:
        """High watermarks of the partitions the coordinated groups committed offsets for
        (see the module docstring); bounded by ``LAG_TIMEOUT_S``."""
        image = self.image()
        by_leader: dict[int, set[tuple[str, int]]] = {}
        for _gid, topic, partition, _off in self.committed_offsets():
            reg = image.topics.partition(topic, partition)
            if reg is not None and reg.leader >= 0:
                by_leader.setdefault(reg.leader, set()).add((topic, partition))
        found: dict[TopicPartition, int] = {}
        with trio.move_on_after(LAG_TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                for leader, tps in by_leader.items():
                    nursery.start_soon(self._high_watermarks, image, leader, tps, found)
        self._lag_hw = found

    async def _high_watermarks(self, image: MetadataImage, leader: int,
                               tps: Iterable[tuple[str, int]], found: dict[TopicPartition, int]) -> None:
        topics: dict[str, list[dict[str, int]]] = {}
        for topic, partition in sorted(tps):
            topics.setdefault(topic, []).append({"partition": partition, "timestamp": _LATEST})
        body = {"replica_id": -1, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        try:
            if leader == self.node_id and self.rm is not None:
                from rafka.broker.handlers.data import list_offsets

                answer = list_offsets(self.rm, body)
            else:
                reg = image.cluster.brokers.get(leader)
                if reg is None or self.pool is None:
                    return
                answer = (await self.pool.request(reg.host, reg.port, ApiKey.LIST_OFFSETS, body)).body
        except Exception as exc:  # noqa: BLE001 - a scrape never fails for one leader
            log.debug("metrics: high watermarks from broker %d: %r", leader, exc)
            return
        for t in answer.get("topics", ()):
            for pd in t.get("partitions", ()):
                if not pd.get("error") and pd.get("offset", -1) >= 0:
                    found[TopicPartition(t["name"], pd["partition"])] = pd["offset"]

    async def render(self) -> bytes:
        """The text exposition of every metric, lag refreshed first."""
        await self.refresh()
        return generate_latest(self.registry)

    async def _http(self, method: str, path: str, query: str) -> HttpResponse:
        if path == "/metrics":
            return HttpResponse(200, await self.render(), CONTENT_TYPE_LATEST)
        if path == "/":
            return HttpResponse(200, f"rafka node {self.node_id}: metrics at /metrics\n".encode())
        return HttpResponse(404, b"not found; metrics are at /metrics\n")

    async def serve(self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The ``/metrics`` endpoint, until cancelled; ``started(bound port)``."""
        await serve_http(self._http, host, port, task_status=task_status)


class _StateCollector:
    """State metrics, computed from the node's own objects at each scrape."""

    def __init__(self, m: NodeMetrics) -> None:
        self.m = m

    def collect(self) -> Iterator[Metric]:
        m = self.m
        image = m.image()
        yield from self._partitions(image)
        yield from self._controller(image)
        yield from self._groups(image)
        if m.server is not None:
            yield GaugeMetricFamily("rafka_connections_open", "Open client connections",
                                    m.server.stats.connections_open)
        if m.secured_server is not None:  # docs/security.md: inter-broker security
            st = m.secured_server.stats
            yield CounterMetricFamily("rafka_secured_tls_connections",
                                      "Connections past the secured listener's TLS handshake",
                                      st.tls_connections)
            yield CounterMetricFamily("rafka_secured_node_connections",
                                      "Of those, peer nodes by their certificate", st.node_connections)
        if m.kafka_listeners:  # docs/kafka-compat.md: how a Kafka fetch's records leave
            fam = CounterMetricFamily(
                "rafka_kafka_fetch_records_bytes", "Record bytes in Kafka fetch answers, by path: "
                "sendfile from the segment, or read into memory", labels=["path"])
            fam.add_metric(["sendfile"], sum(k.fetch_stats.sendfile_bytes for k in m.kafka_listeners))
            fam.add_metric(["memory"], sum(k.fetch_stats.memory_bytes for k in m.kafka_listeners))
            yield fam
            yield GaugeMetricFamily("rafka_kafka_connections_open", "Open Kafka-protocol connections",
                                    sum(k.connections for k in m.kafka_listeners))
        stats = getattr(m.pool, "stats", None)
        if stats is not None and hasattr(stats, "tls_connections"):  # security/peer_pool.py
            yield CounterMetricFamily("rafka_peer_tls_connections",
                                      "TLS connections this node opened to its peers",
                                      stats.tls_connections)

    def _partitions(self, image: MetadataImage) -> Iterator[Metric]:
        rm = self.m.rm
        if rm is None:
            return
        led = under = 0
        under_by_topic: dict[str, int] = {}
        for tp, p in list(rm.partitions.items()):
            if not p.is_leader:
                continue
            led += 1
            reg = image.topics.partition(tp.topic, tp.partition)
            # a replica being added by a reassignment does not count until it is in sync (as Kafka)
            if reg is not None and len(reg.isr) < len(reg.replicas) - len(reg.adding_replicas):
                under += 1
                under_by_topic[tp.topic] = under_by_topic.get(tp.topic, 0) + 1
        yield GaugeMetricFamily("rafka_partitions", "Partitions hosted by this broker", len(rm.partitions))
        yield GaugeMetricFamily("rafka_leader_partitions", "Partitions this broker leads", led)
        yield CounterMetricFamily(
            "rafka_log_flush_rounds", "fsync rounds of this broker's logs: leader group commits "
            "and a follower's syncs before its next fetch (each may cover many partitions)",
            rm.flush_rounds)
        yield GaugeMetricFamily("rafka_partition_logs_to_open",
                                "Partitions placed here whose log is still to open (after a restart)",
                                len(rm.logs_to_open))
        yield GaugeMetricFamily("rafka_under_replicated_partitions",
                                "Partitions this broker leads whose ISR is smaller than their replica set",
                                under)
        per_topic = GaugeMetricFamily("rafka_topic_under_replicated_partitions",
                                      "Under-replicated partitions this broker leads, per topic",
                                      labels=["topic"])
        for topic, n in sorted(under_by_topic.items()):
            per_topic.add_metric([topic], n)
        yield per_topic
        hw = GaugeMetricFamily("rafka_topic_high_watermark_sum",
                               "Sum of the high watermarks of the partitions this broker leads, per topic",
                               labels=["topic"])
        sums: dict[str, int] = {}
        for tp, p in list(rm.partitions.items()):
            if p.is_leader:
                sums[tp.topic] = sums.get(tp.topic, 0) + p.high_watermark
        for topic, n in sorted(sums.items()):
            hw.add_metric([topic], n)
        yield hw

    def _controller(self, image: MetadataImage) -> Iterator[Metric]:
        c = self.m.controller
        active = bool(c is not None and c.is_active)
        yield GaugeMetricFamily("rafka_active_controller",
                                "1 if this node is the active controller", int(active))
        yield GaugeMetricFamily("rafka_metadata_offset", "Offset of this node's metadata image",
                                image.offset)
        offline = sum(1 for t in image.topics.by_name.values() for reg in t.partitions.values()
                      if reg.leader < 0) if active else 0
        fenced = sum(1 for b in image.cluster.brokers.values() if b.fenced) if active else 0
        yield GaugeMetricFamily("rafka_offline_partitions",
                                "Partitions without a leader (active controller only)", offline)
        yield GaugeMetricFamily("rafka_fenced_brokers",
                                "Registered brokers that are fenced (active controller only)", fenced)
        if active:
            yield GaugeMetricFamily("rafka_registered_brokers", "Registered brokers (active controller only)",
                                    len(image.cluster.brokers))
        q = c.quorum if c is not None else None
        if q is None:
            return
        stats: dict[str, Any] = q.statistics() if hasattr(q, "statistics") else {}
        for key, name, doc in (("raft_term", "rafka_raft_term", "Current Raft term of this voter"),
                               ("raft_commit_index", "rafka_raft_commit_index",
                                "Raft commit index of this voter"),
                               ("raft_last_applied", "rafka_raft_last_applied",
                                "Last Raft entry this voter applied")):
            if stats.get(key) is not None:
                yield GaugeMetricFamily(name, doc, stats[key])
        yield CounterMetricFamily("rafka_raft_leader_changes",
                                  "Raft leader changes this voter has seen",
                                  stats.get("leader_changes", 0))
        leader = q.leader_id()
        yield GaugeMetricFamily("rafka_raft_leader_id", "Raft leader known to this voter (-1: none)",
                                -1 if leader is None else leader)
        yield from _quorum_watchdog(stats)

    def _groups(self, image: MetadataImage) -> Iterator[Metric]:
        m = self.m
        if m.groups is None:
            return
        stats = m.groups.statistics()
        committed = m.committed_offsets(stats)
        ids = {gid for gid, *_ in committed}
        ids |= {gid for gid in image.groups.groups if m._coordinates(image, gid)}
        states = GaugeMetricFamily("rafka_consumer_group_state",
                                   "1 for the state each coordinated group is in", labels=["group", "state"])
        members = GaugeMetricFamily("rafka_consumer_group_members", "Members of each coordinated group",
                                    labels=["group"])
        epochs = GaugeMetricFamily("rafka_consumer_group_epoch", "Group epoch of each coordinated group",
                                   labels=["group"])
        counts: dict[str, int] = {}
        for gid in sorted(ids):
            g = image.groups.get(gid)
            state = g.state if g is not None else "Empty"
            counts[state] = counts.get(state, 0) + 1
            states.add_metric([gid, state], 1)
            members.add_metric([gid], len(g.members) if g is not None else 0)
            epochs.add_metric([gid], g.group_epoch if g is not None else 0)
        by_state = GaugeMetricFamily("rafka_consumer_groups", "Coordinated groups per state",
                                     labels=["state"])
        for state, n in sorted(counts.items()):
            by_state.add_metric([state], n)
        yield from (by_state, states, members, epochs)
        offsets = GaugeMetricFamily("rafka_consumer_group_committed_offset",
                                    "Committed offset per group and partition",
                                    labels=["group", "topic", "partition"])
        lag = GaugeMetricFamily("rafka_consumer_group_lag",
                                "High watermark minus committed offset, per group and partition",
                                labels=["group", "topic", "partition"])
        lag_sum: dict[str, int] = {}
        for gid, topic, partition, off in sorted(committed):
            labels = [gid, topic, str(partition)]
            offsets.add_metric(labels, off)
            hw = m._lag_hw.get(TopicPartition(topic, partition))
            if hw is not None:
                n = max(0, hw - off)
                lag.add_metric(labels, n)
                lag_sum[gid] = lag_sum.get(gid, 0) + n
        total = GaugeMetricFamily("rafka_consumer_group_lag_sum", "Total lag of each coordinated group",
                                  labels=["group"])
        for gid, n in sorted(lag_sum.items()):
            total.add_metric([gid], n)
        yield from (offsets, lag, total)
        yield CounterMetricFamily("rafka_consumer_group_offsets_expired",
                                  "Committed offsets of empty groups expired by this node (offsets.retention)",
                                  value=stats.offsets_expired)


_PEER_STATES = {"none": 0, "disconnected": 0, "connecting": 1, "connected": 2}


def _quorum_watchdog(stats: dict[str, Any]) -> Iterator[Metric]:
    """The liveness watchdog's view (kraft/raft_watchdog.py), when the engine has one."""
    if "quorum_seconds_since_commit" not in stats:
        return
    yield GaugeMetricFamily("rafka_quorum_seconds_since_commit",
                            "Seconds without Raft commit progress while work waits or no leader is known "
                            "(0 when idle)", stats["quorum_seconds_since_commit"])
    yield GaugeMetricFamily("rafka_quorum_stalled",
                            "1 while no commit progress for the stall threshold with a quorum connected",
                            int(bool(stats.get("quorum_stalled"))))
    bound = stats.get("raft_listener_bound")
    yield GaugeMetricFamily("rafka_raft_listener_bound", "1 when this voter's Raft listener is bound",
                            int(bound is not False))
    peers = GaugeMetricFamily("rafka_raft_peer_connection",
                              "Raft link to each peer: 0 down, 1 connecting, 2 connected", labels=["peer"])
    for addr, state in sorted((stats.get("raft_peers") or {}).items()):
        peers.add_metric([addr], _PEER_STATES.get(state, 0))
    yield peers
    for key, name, doc in (("raft_prevote_rounds", "rafka_raft_prevote_rounds", "Pre-votes this voter started"),
                           ("raft_votes_ignored_in_lease", "rafka_raft_votes_ignored_in_lease",
                            "Higher-term vote requests ignored while a leader's lease held"),
                           ("raft_term_notices_sent", "rafka_raft_term_notices_sent",
                            "Appends of a leader behind this voter's term answered with its term"),
                           ("raft_term_notices_adopted", "rafka_raft_term_notices_adopted",
                            "Higher terms this voter learnt from a term notice (a leader steps down)"),
                           ("raft_chunk_pieces_deferred", "rafka_raft_chunk_pieces_deferred",
                            "Early 'finish' pieces of a large Raft entry held for the last piece "
                            "(kraft/chunked_append.py)"),
                           ("raft_chunk_pieces_dropped", "rafka_raft_chunk_pieces_dropped",
                            "Pieces of a large Raft entry with no 'start' before them, dropped for "
                            "the leader to resend (kraft/chunked_append.py)"),
                           ("raft_tick_polls_until_deadline", "rafka_raft_tick_polls_until_deadline",
                            "Raft tick-thread sleeps that lasted until the next heartbeat or election "
                            "deadline (kraft/tick_wait.py)"),
                           ("raft_tick_polls_period", "rafka_raft_tick_polls_period",
                            "Raft tick-thread sleeps of raft.tick.ms: a link down, a command queued, "
                            "or raft.tick.until.deadline=false (kraft/tick_wait.py)"),
                           ("raft_frames_opened_aes_gcm", "rafka_raft_frames_opened_aes_gcm",
                            "Raft frames received sealed with AES-256-GCM (kraft/raft_cipher.py)"),
                           ("raft_frames_opened_fernet", "rafka_raft_frames_opened_fernet",
                            "Raft frames received sealed with Fernet: a voter still sends "
                            "raft.frame.cipher=fernet (a rolling upgrade; kraft/raft_cipher.py)")):
        yield CounterMetricFamily(name, doc, stats.get(key, 0))
