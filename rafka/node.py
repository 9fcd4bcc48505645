"""One rafka node process: ``python -m rafka.node --config node.toml`` (= ``rafka server``).

Theory of operation
-------------------
``run_node(config)`` runs on the trio main thread (pysyncobj's ``SyncObj`` must be built there:
``ControllerService.run`` builds it). Everything lives in one nursery:

1. the listener (``Server``) dispatching through ``NodeApi``: broker APIs to this broker,
   controller APIs to ``ControllerService.handlers`` when this node is a controller;
2. the ``ControllerService`` (controllers);
3. for brokers: the ``ReplicaManager`` (partitions, group commit, retention, compaction), the
   transaction coordinator's background tasks (``broker/txn/coordinator.py``: completions of
   decided transactions, timeout aborts; it reaches other brokers through the node's
   ``ConnectionPool``), the ``MetadataListener`` tailing the ``@metadata`` log into the
   ``MetadataPublisher`` (the broker's only source of metadata), and the ``BrokerLifecycle``
   (register, heartbeat);
4. with ``metrics_listener`` set: the Prometheus endpoint (``broker/metrics.py``), whose
   ``NodeMetrics`` also wraps the dispatch (one latency observe per request).

Before the controller and the broker lifecycle start, the node checks its config against the
voters' (``kraft/membership.py``: cluster id, voter ids, secret proof) and waits until a
majority agrees; a node in the minority stops with a named error (exit 2, no traceback).

SIGINT/SIGTERM: a broker first does a controlled shutdown (bounded by
``controlled.shutdown.timeout.ms``), then the nursery is cancelled and every partition log is
closed cleanly (flush + clean-shutdown marker). A second signal skips the controlled shutdown,
and so does the death of the foreground ``rafka cluster up`` that owns the node (env
``RAFKA_PARENT_PID``; noticed by its death signal or by polling the parent pid): the whole
cluster is stopping, so there is no quorum left to hand leadership to, and the node exits in
well under 5 s instead of waiting out the controlled-shutdown timeout.
Logs go to ``DATA_DIR/node.log`` and stderr; node events to ``DATA_DIR/events.jsonl``.

A node process never imports Hypothesis (``_keep_test_tools_out``): kio, the Kafka listener's
codec, imports it whenever it is installed, and importing it switches trio's scheduler into
its deterministic test mode for the whole process.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import Any

import trio

from rafka.broker.config import ConfigError, NodeConfig, load_config
from rafka.broker.controller_channel import ControllerChannel
from rafka.broker.events import EventLog
from rafka.broker.handlers import NodeApi
from rafka.broker.image_checkpoint import CHECKPOINT_NAME, ImageCheckpoint
from rafka.broker.lifecycle import BrokerLifecycle
from rafka.broker.metadata_listener import MetadataListener, MetadataPublisher
from rafka.broker.replica_manager import ReplicaManager
from rafka.broker.server import Server, ServerLimits
from rafka.security.authz import authorizing_dispatch
from rafka.security.connections import ConnectionCounter
from rafka.security.listener import (
    ListenerSecurity,
    advertised,
    anonymous_dispatch,
    image_credentials,
    node_bypass,
    secured_dispatch,
)
from rafka.wire.connection import ConnectionPool
from rafka.wire.gc_freeze import freeze_startup_objects, raise_young_threshold

__all__ = ["run_node", "main", "setup_logging"]

log = logging.getLogger("rafka.node")

# broker settings the controller also needs (topic defaults for CREATE_TOPICS)
_SHARED_WITH_CONTROLLER = ("num.partitions", "default.replication.factor", "min.insync.replicas",
                           "unclean.leader.election.enable")


def setup_logging(config: NodeConfig, level: int = logging.INFO) -> None:
    config.data_dir.mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter(f"%(asctime)s node-{config.node_id} %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.setLevel(level)
    for h in (_QuietFileHandler(config.data_dir / "node.log"), logging.StreamHandler(sys.stderr)):
        h.setFormatter(fmt)
        root.addHandler(h)
    logging.getLogger("pysyncobj").setLevel(logging.WARNING)


class _QuietFileHandler(logging.FileHandler):
    """node.log lives on the data volume: when that is full a log line is lost, not turned into
    a "--- Logging error ---" traceback on stderr per line (the stderr handler still has it)."""

    dropped = 0

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        self.dropped += 1

    def flush(self) -> None:  # also called by close(): a full volume must not fail shutdown
        try:
            super().flush()
        except OSError:
            self.dropped += 1

    def close(self) -> None:
        try:
            super().close()
        except OSError:
            self.dropped += 1


class _Node:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.events = EventLog(config.data_dir / "events.jsonl", config.node_id,
                               hw=config.broker["events.hw.enable"],
                               max_bytes=config.broker["events.max.bytes"])
        self.controller: Any = None
        self.rm: ReplicaManager | None = None
        self.lifecycle: BrokerLifecycle | None = None
        self.publisher = MetadataPublisher(config.node_id, events=self.events)
        if config.is_controller:
            from rafka.kraft.service import ControllerService

            settings = {k: config.broker[k] for k in _SHARED_WITH_CONTROLLER}
            settings.update(config.controller)
            self.controller = ControllerService(
                config.node_id, config.voters, config.raft_listener, config.data_dir / "controller",
                config.cluster_secret, settings, cluster_id=config.cluster_id)
            self.controller.events = self.events
        if config.is_broker:
            self.rm = ReplicaManager(config.node_id, config.data_dir, dict(config.broker),
                                     config.topic_defaults(), self.events)
            self.publisher.subscribe(self.rm.on_metadata)

    def _raft_leader(self) -> int | None:
        """This voter's Raft view of the leader (ControllerChannel's ``leader_view``)."""
        q = self.controller.quorum if self.controller is not None else None
        return q.leader_id() if q is not None else None

    def _raft_leader_changed(self) -> trio.Event | None:
        """Set at the next change of ``_raft_leader`` (None: the quorum cannot tell; poll)."""
        q = self.controller.quorum if self.controller is not None else None
        changed = getattr(q, "leader_changed", None)
        return changed() if changed is not None else None

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        cfg = self.config
        self.events.emit("start")
        try:
            async with trio.open_nursery() as nursery:
                pool = self._peer_pool(nursery)
                channel = ControllerChannel(pool, [(v.id, *v.rpc) for v in cfg.voters],
                                            leader_view=self._raft_leader if self.controller else None,
                                            view_changed=self._raft_leader_changed if self.controller else None)
                api = NodeApi(cluster_id=cfg.cluster_id, replica_manager=self.rm,
                              publisher=self.publisher, channel=channel,
                              controller_handlers=self.controller.handlers if self.controller else None,
                              topic_defaults=cfg.topic_defaults(), pool=pool)
                limits = ServerLimits(cfg.broker["max.connections"],
                                      cfg.broker["max.inflight.requests.per.connection"],
                                      cfg.broker["socket.request.max.bytes"],
                                      cfg.broker["max.connections.per.ip"],
                                      cfg.broker["connections.max.idle.ms"],
                                      cfg.broker["socket.partial.frame.budget.bytes"])
                # one ledger for both listeners: the limits bound the node (security/connections.py)
                connections = ConnectionCounter(limits.max_connections, limits.max_connections_per_ip)
                dispatch = api.quotas.wrap(api.dispatch)  # byte-rate quotas (security/throttle.py)
                if cfg.metrics_listener is not None:  # Prometheus /metrics (broker/metrics.py)
                    from rafka.broker.metrics import NodeMetrics

                    metrics = NodeMetrics(cfg.node_id, publisher=self.publisher, replica_manager=self.rm,
                                          controller=self.controller, groups=api.groups, pool=pool)
                    dispatch = metrics.instrument(dispatch)
                main_dispatch = dispatch
                if cfg.security is not None and cfg.security.main_listener_authorizer:
                    # nothing but clients uses it: User:ANONYMOUS behind the ACLs (security/listener.py)
                    main_dispatch = anonymous_dispatch(dispatch, authorizing_dispatch(
                        dispatch, lambda: self.publisher.image, cfg.security.super_users))
                server = Server(main_dispatch, cfg.listener[0], cfg.listener[1], limits,
                                connections=connections)
                port = await nursery.start(server.serve)
                secured = None
                if cfg.security is not None:  # docs/security.md
                    secured = await nursery.start(self._serve_secured, dispatch, limits, connections)
                kafka_advertised = None  # the Kafka listener (broker/kafka/, docs/kafka-compat.md)
                if (cfg.kafka_listener is not None or cfg.kafka_secured_listeners) \
                        and self.rm is not None:
                    from rafka.broker.kafka.listener import start_kafka_listeners

                    kafka_advertised = await start_kafka_listeners(
                        nursery, cfg, main_dispatch, dispatch, lambda: self.publisher.image, self.rm,
                        started=metrics.kafka_listeners if cfg.metrics_listener is not None else None)
                if cfg.metrics_listener is not None:
                    metrics.server, metrics.secured_server = server, secured
                    mport = await nursery.start(metrics.serve, *cfg.metrics_listener)
                    log.info("node %d: metrics at http://%s:%d/metrics", cfg.node_id,
                             cfg.metrics_listener[0], mport)
                agreed = trio.Event()
                nursery.start_soon(self._check_membership, agreed)
                # the Raft voter starts and the broker registers only once a majority of the
                # voters is known to share this node's cluster id, voter ids and secret
                await agreed.wait()
                if self.controller is not None:
                    await nursery.start(self.controller.run)
                if self.rm is not None:
                    self.lifecycle = BrokerLifecycle(
                        cfg.node_id, cfg.advertised, channel, self.publisher,
                        heartbeat_interval_ms=cfg.broker["broker.heartbeat.interval.ms"],
                        rack=cfg.broker["rack"],
                        secure_listener=advertised(cfg.security) if cfg.security else None,
                        kafka_listener=kafka_advertised)
                    self._attach_replication(pool, channel)
                    await nursery.start(self.rm.run)
                    if api.txn is not None:  # transaction completions and timeouts
                        await nursery.start(api.txn.run)
                    if api.groups is not None:  # expiry of empty groups' committed offsets
                        await nursery.start(api.groups.run)
                    listener = MetadataListener(self.publisher, channel,
                                                max_wait_ms=cfg.broker["metadata.fetch.max.wait.ms"],
                                                checkpoint=self._image_checkpoint())
                    await nursery.start(listener.run)
                    await nursery.start(self.lifecycle.run)
                log.info("node %d up: roles %s, listener %s:%d", cfg.node_id, sorted(cfg.roles),
                         cfg.listener[0], port)
                freeze_startup_objects()  # full GC passes later walk only what came since
                raise_young_threshold()  # young passes only past a busy broker's working set
                if self.rm is not None and cfg.broker["unsafe.ack.before.replication"]:
                    _warn_unsafe(cfg.node_id)
                    self.events.emit("unsafe", setting="unsafe.ack.before.replication")
                task_status.started(port)
                await self._wait_for_signal()
                nursery.cancel_scope.cancel()
        finally:
            if self.rm is not None:
                self.rm.close()
            self.events.emit("stop")
            self.events.close()
            log.info("node %d stopped", cfg.node_id)

    async def _serve_secured(self, dispatch: Any, limits: ServerLimits,
                             connections: ConnectionCounter, *,
                             task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The ``[security]`` listener: TLS and/or SASL in front of the same dispatch."""
        sec = self.config.security

        def image_of() -> Any:
            return self.publisher.image

        if sec.authorizer:  # ACLs on every API (security/authz.py)
            authorized = authorizing_dispatch(dispatch, image_of, sec.super_users)
            # peer nodes (their certificates) are super users
            dispatch = node_bypass(dispatch, authorized) if sec.inter_broker else authorized
        server = Server(secured_dispatch(dispatch, image_of), sec.listener[0], sec.listener[1],
                        limits, security=ListenerSecurity.build(sec, image_credentials(image_of)),
                        connections=connections)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve)
            log.info("node %d: %s listener on %s:%d%s", self.config.node_id, sec.protocol,
                     sec.listener[0], port, " (inter-broker)" if sec.inter_broker else "")
            task_status.started(server)

    def _peer_pool(self, nursery: trio.Nursery) -> ConnectionPool:
        """The node's pool to its peers: over their secured listeners with inter-broker security
        (security/peer_pool.py), else plaintext to their main listeners."""
        cfg = self.config
        client_id = f"rafka-node-{cfg.node_id}"
        if cfg.security is None or not cfg.security.inter_broker:
            return ConnectionPool(nursery, client_id=client_id)
        from rafka.security.peer_pool import PeerPool

        voters = [(v.rpc, v.secure_rpc) for v in cfg.voters if v.secure_rpc is not None]
        return PeerPool(nursery, cfg.security, voters, lambda: self.publisher.image,
                        client_id=client_id)

    async def _check_membership(self, agreed: trio.Event) -> None:
        """Stops the node (a QuorumConfigError leaves the nursery) when its cluster id, voter
        list or secret disagrees with a majority of the voters (kraft/membership.py)."""
        from rafka.kraft.membership import verify_cluster_membership

        cfg = self.config
        await verify_cluster_membership(cfg.node_id, [(v.id, v.rpc) for v in cfg.voters],
                                        cfg.cluster_id, cfg.cluster_secret, agreed=agreed)

    def _image_checkpoint(self) -> ImageCheckpoint | None:
        """The broker's metadata image on disk (broker/image_checkpoint.py), unless disabled."""
        every = self.config.broker["metadata.checkpoint.records"]
        if every <= 0:
            return None
        return ImageCheckpoint(self.config.data_dir / CHECKPOINT_NAME, self.config.cluster_id,
                               every_records=every)

    def _attach_replication(self, pool: ConnectionPool, channel: ControllerChannel) -> None:
        from rafka.broker.replication.fetcher import ReplicaFetcherManager

        assert self.rm is not None and self.lifecycle is not None
        lifecycle, publisher, b = self.lifecycle, self.publisher, self.config.broker

        def lookup(broker_id: int) -> tuple[str, int] | None:
            reg = publisher.image.cluster.brokers.get(broker_id)
            return None if reg is None else (reg.host, reg.port)

        fetcher = ReplicaFetcherManager(
            self.config.node_id, pool, lookup, broker_epoch=lambda: lifecycle.broker_epoch,
            max_wait_ms=b["replica.fetch.wait.max.ms"],
            partition_max_bytes=b["replica.fetch.max.bytes"])
        self.rm.attach_replication(fetcher, channel, lambda: lifecycle.broker_epoch)

    async def _wait_for_signal(self) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as watch:
                watch.start_soon(_watch_parent, watch.cancel_scope)
                async for sig in signals:
                    log.info("received %s: shutting down", signal.Signals(sig).name)
                    break
                watch.cancel_scope.cancel()
            if self.lifecycle is None:
                return
            if parent_died():  # the rest of the cluster is going too: no quorum to hand over to
                log.info("the parent 'rafka cluster up' died: skipping the controlled shutdown")
                return
            timeout_s = self.config.broker["controlled.shutdown.timeout.ms"] / 1000
            async with trio.open_nursery() as nursery:
                async def second_signal() -> None:
                    async for _ in signals:
                        log.info("second signal: skipping the controlled shutdown")
                        nursery.cancel_scope.cancel()

                nursery.start_soon(second_signal)
                with trio.move_on_after(timeout_s) as cs:
                    await self.lifecycle.controlled_shutdown()
                if cs.cancelled_caught:
                    log.warning("controlled shutdown did not finish within %.1f s", timeout_s)
                else:
                    log.info("controlled shutdown complete")
                nursery.cancel_scope.cancel()


# set by a foreground ``rafka cluster up`` (rafka/cluster.py) on the nodes it owns: its pid
PARENT_PID_ENV = "RAFKA_PARENT_PID"
_PARENT_POLL_S = 0.5


def parent_died() -> bool:
    """True when this node belongs to a foreground ``cluster up`` that is gone (the node was
    re-parented): its SIGTERM came from PR_SET_PDEATHSIG, and every other node of the cluster
    is stopping too, so a controlled shutdown could only wait out its timeout."""
    owner = os.environ.get(PARENT_PID_ENV)
    return bool(owner) and os.getppid() != int(owner)


async def _watch_parent(stop: trio.CancelScope) -> None:
    """Stop the node when its ``cluster up`` parent is gone, also if the death signal was
    missed (the parent died before ``prctl`` took effect, or a non-Linux system)."""
    if not os.environ.get(PARENT_PID_ENV):
        return
    while not parent_died():
        await trio.sleep(_PARENT_POLL_S)
    log.info("the parent 'rafka cluster up' died: shutting down")
    stop.cancel()


def _warn_unsafe(node_id: int) -> None:
    banner = "!" * 78
    for line in (banner,
                 f"node {node_id}: unsafe.ack.before.replication = true (TEST ONLY)",
                 "acks=all is answered after the leader's own append, before the in-sync",
                 "replicas have the records: acknowledged records CAN BE LOST when this",
                 "leader fails. Never use this outside fault-injection tests.",
                 banner):
        log.warning(line)


async def run_node(config: NodeConfig, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Run one node until SIGINT/SIGTERM (see the module docstring)."""
    await _Node(config).run(task_status=task_status)


def _keep_test_tools_out() -> None:
    """Make ``import hypothesis`` fail in this node process, unless something already imported it.

    kio (``broker/kafka/codec.py``) imports ``hypothesis.strategies`` whenever Hypothesis is
    installed, to register strategies for its types, and it is installed wherever the test
    extras are (the ``make run`` venv included). Importing Hypothesis runs its entry-point
    plugins, and trio's plugin switches trio's scheduler to its test mode for the whole
    process: every batch of runnable tasks is sorted and shuffled with a seeded ``Random``
    instead of reversed half of the time. In a node that was ~8 ``getrandbits`` calls per
    produce request on the leader, and the import added ~0.2 s to the Kafka listener's start,
    inside the running trio loop (docs/performance.md, "A busy leader's CPU, a node in trio's
    test mode, and the produce waiters' herd"). kio falls back to its plain types on
    ``ImportError``. Called only from ``main``, the process entry of ``rafka server`` and
    ``python -m rafka.node``; a test process that runs a node on its own trio loop (pytest
    running a node in-process) keeps its Hypothesis."""
    if "hypothesis" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]  # import -> ImportError


def main(argv: list[str] | None = None) -> int:
    _keep_test_tools_out()
    parser = argparse.ArgumentParser(prog="rafka server", description="run one rafka node")
    parser.add_argument("--config", required=True, help="the node's TOML config")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"rafka: config error: {exc}", file=sys.stderr)
        return 2
    return serve_config(config)


def serve_config(config: NodeConfig) -> int:
    from rafka.kraft.quorum import QuorumConfigError

    try:
        setup_logging(config)
    except OSError as exc:
        print(f"rafka: cannot use data_dir {config.data_dir}: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(run_node, config)
    except Exception as exc:
        leaf = _leaf(exc)
        if isinstance(leaf, (OSError, QuorumConfigError)) or "Config" in type(leaf).__name__:
            # a port in use, a bad quorum config, a node that disagrees with the cluster's
            # voters (kraft.membership): one clear line naming the error, no traceback
            name = type(leaf).__name__
            log.error("node %d failed: %s: %s", config.node_id, name, leaf)
            print(f"rafka: node {config.node_id}: {name}: {leaf}", file=sys.stderr)
            return 1 if isinstance(leaf, OSError) else 2
        raise
    return 0


def _leaf(exc: BaseException) -> BaseException:
    """The error to report: the only leaf of nested groups, or the first config/OS error."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        from rafka.kraft.quorum import QuorumConfigError

        for leaf in _leaves(exc):
            if isinstance(leaf, (QuorumConfigError, OSError)):
                return leaf
    return exc


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


if __name__ == "__main__":
    sys.exit(main())
