"""Node configuration: one TOML file per node (docs/internals.md §3).

Theory of operation
-------------------
``load_config(path)`` reads the file with ``tomllib`` and returns a frozen ``NodeConfig``;
``parse_config(mapping, source)`` does the same for an already-parsed mapping (tests). Every
problem is a ``ConfigError`` naming the file and the offending key, so ``rafka server`` can
print one clear line and exit non-zero instead of a traceback.

An optional ``[security]`` table adds a secured client listener (TLS and/or SASL/SCRAM;
``security/listener.py``, docs/security.md).

Broker and controller settings use Kafka's names (``[broker] "log.segment.bytes" = ...``).
Each known setting has a parser and a default in ``BROKER_SETTINGS`` / ``CONTROLLER_SETTINGS``;
unknown keys are an error (a typo must not silently fall back to a default). The broker-level
``log.*`` settings are the defaults of every topic's ``LogConfig``; ``topic_defaults()`` maps
them to topic-config names (``log.segment.bytes`` → ``segment.bytes``), and the topic's own
overrides from the metadata image go on top.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rafka.log.config import LogConfig
from rafka.wire.settings import ConfigError, parse_hostport

__all__ = [
    "ConfigError",
    "Voter",
    "NodeConfig",
    "BROKER_SETTINGS",
    "CONTROLLER_SETTINGS",
    "FLUSH_POLICIES",
    "load_config",
    "parse_config",
    "parse_hostport",
    "effective_topic_config",
    "offsets_retention_ms",
]

FLUSH_POLICIES = ("batch", "messages", "interval", "none")
ROLES = ("broker", "controller")
_I64 = 2**63 - 1


def _int(lo: int, hi: int = _I64, *, minus_one: bool = False) -> Callable[[Any], int]:
    def parse(raw: Any) -> int:
        if isinstance(raw, bool) or isinstance(raw, float):
            raise ValueError(f"expected an integer, got {raw!r}")
        try:
            v = int(str(raw).strip())
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
        if minus_one and v == -1:
            return v
        if not lo <= v <= hi:
            extra = " or -1" if minus_one else ""
            raise ValueError(f"must be between {lo} and {hi}{extra}, got {v}")
        return v

    return parse


def _choice(*options: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        v = str(raw).strip().lower()
        if v not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {raw!r}")
        return v

    return parse


def _bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    s = str(raw).strip().lower()
    if s not in ("true", "false"):
        raise ValueError(f"expected true or false, got {raw!r}")
    return s == "true"


# name -> (parser, default). Kafka names; defaults as Kafka's where it has the setting.
BROKER_SETTINGS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "socket.request.max.bytes": (_int(1024, 2**31 - 1), 100 * 1024 * 1024),
    "max.connections": (_int(1, 1_000_000), 1000),
    "max.connections.per.ip": (_int(1, 1_000_000), 1_000_000),  # security/connections.py
    # broker/server.py: an idle connection is closed; partial large frames share a budget
    "connections.max.idle.ms": (_int(100, 2**31 - 1), 600_000),
    "socket.partial.frame.budget.bytes": (_int(1024 * 1024, 2**40), 256 * 1024 * 1024),
    "max.inflight.requests.per.connection": (_int(1, 100_000), 64),
    "message.max.bytes": (_int(64, 2**31 - 1), 1024 * 1024 + 12),
    "log.segment.bytes": (_int(1024, 2**31 - 1), 1 << 30),
    "log.segment.ms": (_int(1), 7 * 24 * 3600 * 1000),
    "log.retention.ms": (_int(1, minus_one=True), 7 * 24 * 3600 * 1000),
    "log.retention.bytes": (_int(1, minus_one=True), -1),
    "log.cleanup.policy": (_choice("delete", "compact", "compact,delete"), "delete"),
    "log.flush.policy": (_choice(*FLUSH_POLICIES), "batch"),
    "log.flush.interval.messages": (_int(1), 10_000),
    "log.flush.interval.ms": (_int(1), 1000),
    # batch policy: a group-commit round of at most this many records runs its fdatasync on the
    # trio thread instead of a worker thread; 0: never (broker/replica_manager.py, "Inline
    # flushes"; docs/performance.md, issue 26)
    "log.flush.inline.max.records": (_int(0, 2**31 - 1), 1),
    # the same for a follower's sync of a fetch answer before its next fetch (the fetcher waits
    # for it either way): small answers skip the worker-thread hop (docs/performance.md,
    # "A follower's small syncs on its own thread")
    "log.flush.follower.inline.max.records": (_int(0, 2**31 - 1), 64),
    "log.retention.check.interval.ms": (_int(100), 300_000),
    "log.cleaner.backoff.ms": (_int(100), 15_000),
    # committed offsets of empty groups (broker/groups/offsets.py, KIP-211); Kafka's defaults
    "offsets.retention.minutes": (_int(1), 7 * 24 * 60),
    "offsets.retention.ms": (_int(1, minus_one=True), -1),  # rafka: overrides the minutes if set
    "offsets.retention.check.interval.ms": (_int(100), 600_000),
    "num.partitions": (_int(1, 10_000), 1),
    "default.replication.factor": (_int(1, 100), 1),
    # Kafka listener only (docs/kafka-compat.md): a Kafka client's METADATA naming a missing
    # topic creates it with num.partitions / default.replication.factor, as Kafka's default
    "auto.create.topics.enable": (_bool, True),
    # Kafka listener: KIP-227 fetch sessions kept per broker, least recently used out; 0: none
    "max.incremental.fetch.session.cache.slots": (_int(0, 1_000_000), 1000),
    "min.insync.replicas": (_int(1, 100), 1),
    "replica.lag.time.max.ms": (_int(100), 30_000),
    "replica.fetch.max.bytes": (_int(1024, 2**31 - 1), 1024 * 1024),
    "replica.fetch.wait.max.ms": (_int(1, 60_000), 500),
    "broker.heartbeat.interval.ms": (_int(10, 60_000), 500),
    "controlled.shutdown.timeout.ms": (_int(0, 600_000), 30_000),
    "request.forward.timeout.ms": (_int(100, 600_000), 30_000),
    "metadata.fetch.max.wait.ms": (_int(1, 60_000), 2000),
    # DATA_DIR/@metadata-image.ckpt (broker/image_checkpoint.py): the image is saved every this
    # many records, and a restart folds only what came after it; 0: no checkpoint
    "metadata.checkpoint.records": (_int(0, 2**31 - 1), 1000),
    "unclean.leader.election.enable": (_bool, False),
    "rack": (str, ""),
    # DATA_DIR/events.jsonl (broker/events.py): a line per high-watermark move is chaos-checker
    # evidence, off by default; the file is rotated once past events.max.bytes
    "events.hw.enable": (_bool, False),
    "events.max.bytes": (_int(4096), 64 * 1024 * 1024),
    # TEST ONLY (chaos tests): answer acks=all after the leader's own append (as acks=1),
    # before the ISR has the records. Breaks the acks=all promise; logged loudly at startup.
    "unsafe.ack.before.replication": (_bool, False),
}

CONTROLLER_SETTINGS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "broker.session.timeout.ms": (_int(100, 600_000), 3000),
    "metadata.snapshot.records": (_int(1), 10_000),
    "metadata.snapshot.min.records": (_int(1), 10_000),
    "metadata.snapshot.interval.ms": (_int(1), 3_600_000),
    "leader.imbalance.check.interval.ms": (_int(1), 300_000),
    "auto.leader.rebalance.enable": (_bool, True),
    "controller.propose.timeout.ms": (_int(100, 600_000), 10_000),
    "raft.compaction.min.entries": (_int(10), 5000),
    "raft.min.timeout.ms": (_int(10, 60_000), 700),
    "raft.max.timeout.ms": (_int(10, 60_000), 2000),
    # the leader's AppendEntries heartbeat; at most a 3.5th of raft.min.timeout.ms (kraft/syncobj_engine.py)
    "raft.append.entries.period.ms": (_int(10, 60_000), 200),
    # pysyncobj's tick (its poll timeout): election deadlines and heartbeats are checked per tick
    "raft.tick.ms": (_int(1, 1000), 50),
    # in steady state (every peer link up, nothing queued) the tick thread sleeps until its next
    # heartbeat or election deadline instead of raft.tick.ms (kraft/tick_wait.py); false: fixed ticks
    "raft.tick.until.deadline": (_bool, True),
    # what a voter seals its Raft frames with; every voter opens both (kraft/raft_cipher.py):
    # "fernet" only while voters of a version that reads nothing else are being upgraded
    "raft.frame.cipher": (_choice("aes-gcm", "fernet"), "aes-gcm"),
    # a Raft message smaller than this goes out uncompressed (a zlib stored block, which any
    # voter reads); larger ones are deflated as pysyncobj does. 0: deflate all (kraft/raft_zlib.py)
    "raft.compress.min.bytes": (_int(0, 65536), 4096),
}

# broker setting -> topic config name (LogConfig.from_dict)
_TOPIC_DEFAULTS = {
    "log.segment.bytes": "segment.bytes",
    "log.segment.ms": "segment.ms",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "message.max.bytes": "max.message.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}


def offsets_retention_ms(settings: Mapping[str, Any]) -> int:
    """How long an empty group keeps its committed offsets: ``offsets.retention.ms`` if set,
    else ``offsets.retention.minutes`` (Kafka's name and default, 7 days)."""
    ms = settings.get("offsets.retention.ms", -1)
    return int(ms) if ms > 0 else int(settings.get("offsets.retention.minutes", 7 * 24 * 60)) * 60_000


@dataclass(frozen=True, slots=True)
class Voter:
    id: int
    raft: tuple[str, int]
    rpc: tuple[str, int]
    # its secured listener, where peers reach it with inter-broker security (security/peer_pool.py)
    secure_rpc: tuple[str, int] | None = None


@dataclass(frozen=True)
class NodeConfig:
    node_id: int
    roles: frozenset[str]
    data_dir: Path
    listener: tuple[str, int]
    raft_listener: tuple[str, int] | None
    cluster_id: str
    cluster_secret: str | None
    voters: tuple[Voter, ...]
    broker: Mapping[str, Any] = field(default_factory=dict)
    controller: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<config>"
    advertised_host: str | None = None
    # Prometheus endpoint (broker/metrics.py): "HOST:PORT"; None = no metrics listener
    metrics_listener: tuple[str, int] | None = None
    # a secured client listener (security/listener.py SecurityConfig; docs/security.md)
    security: Any = None
    # the Kafka wire-protocol listener (``kafka.listener = "HOST:PORT"``; broker/kafka/,
    # docs/kafka-compat.md); None = off
    kafka_listener: tuple[str, int] | None = None
    # secured Kafka listeners: (protocol, (host, port)) for kafka.ssl_listener,
    # kafka.sasl_plaintext_listener, kafka.sasl_ssl_listener (need [security]: its TLS files,
    # SASL limits and authorizer); the mechanisms SASL ones offer (PLAIN: TLS only)
    kafka_secured_listeners: tuple[tuple[str, tuple[str, int]], ...] = ()
    kafka_sasl_mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def advertised(self) -> tuple[str, int]:
        host, port = self.listener
        if self.advertised_host:
            host = self.advertised_host
        elif host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return host, port

    def topic_defaults(self) -> dict[str, Any]:
        """Broker-level ``log.*`` settings under topic-config names (``LogConfig.from_dict``)."""
        return {topic: self.broker[name] for name, topic in _TOPIC_DEFAULTS.items()}


def _settings(raw: Any, specs: Mapping[str, tuple[Callable[[Any], Any], Any]], section: str,
              source: str) -> dict[str, Any]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(source, f"[{section}]", "must be a table")
    out = {name: default for name, (_p, default) in specs.items()}
    for key, value in raw.items():
        spec = specs.get(key)
        if spec is None:
            raise ConfigError(source, f"{section}.{key}", f"unknown {section} setting")
        try:
            out[key] = spec[0](value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(source, f"{section}.{key}", str(exc)) from None
    return out


def _required(raw: Mapping[str, Any], key: str, source: str) -> Any:
    if key not in raw:
        raise ConfigError(source, key, "missing (required)")
    return raw[key]


def _addr(raw: Any, key: str, source: str) -> tuple[str, int]:
    try:
        return parse_hostport(raw)
    except ValueError as exc:
        raise ConfigError(source, key, str(exc)) from None


def _voters(raw: Any, source: str) -> tuple[Voter, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(source, "voters", "need at least one [[voters]] entry (id, raft, rpc)")
    out: list[Voter] = []
    for i, v in enumerate(raw):
        key = f"voters[{i}]"
        if not isinstance(v, dict):
            raise ConfigError(source, key, "must be a table with id, raft, rpc")
        vid = v.get("id")
        if not isinstance(vid, int) or isinstance(vid, bool) or vid < 0:
            raise ConfigError(source, f"{key}.id", f"expected a non-negative integer, got {vid!r}")
        secure = v.get("secure_rpc")
        out.append(Voter(vid, _addr(v.get("raft"), f"{key}.raft", source),
                         _addr(v.get("rpc"), f"{key}.rpc", source),
                         None if secure is None else _addr(secure, f"{key}.secure_rpc", source)))
    ids = [v.id for v in out]
    if len(set(ids)) != len(ids):
        raise ConfigError(source, "voters", f"duplicate voter ids {ids}")
    return tuple(out)


def _secret(raw: Mapping[str, Any], base: Path, source: str) -> str | None:
    if "cluster_secret" in raw:
        s = raw["cluster_secret"]
        if not isinstance(s, str) or not s:
            raise ConfigError(source, "cluster_secret", "must be a non-empty string")
        return s
    if "cluster_secret_file" in raw:
        path = Path(str(raw["cluster_secret_file"]))
        path = path if path.is_absolute() else base / path
        try:
            s = path.read_text().strip()
        except OSError as exc:
            raise ConfigError(source, "cluster_secret_file", f"cannot read {path}: {exc.strerror}") from None
        if not s:
            raise ConfigError(source, "cluster_secret_file", f"{path} is empty")
        return s
    return None


def parse_config(raw: Mapping[str, Any], source: str = "<config>", base_dir: Path | None = None) -> NodeConfig:
    """A ``NodeConfig`` from a parsed TOML mapping; relative paths resolve against ``base_dir``."""
    base = base_dir or Path.cwd()
    known = {"node_id", "roles", "data_dir", "listener", "raft_listener", "cluster_id",
             "cluster_secret", "cluster_secret_file", "voters", "broker", "controller",
             "advertised_host", "metrics_listener", "security", "kafka"}
    for key in raw:
        if key not in known:
            raise ConfigError(source, key, "unknown setting")
    node_id = _required(raw, "node_id", source)
    if not isinstance(node_id, int) or isinstance(node_id, bool) or node_id < 0:
        raise ConfigError(source, "node_id", f"expected a non-negative integer, got {node_id!r}")
    roles = raw.get("roles", ["broker", "controller"])
    if isinstance(roles, str):
        roles = [r.strip() for r in roles.split(",")]
    if not isinstance(roles, list) or not roles or not set(roles) <= set(ROLES):
        raise ConfigError(source, "roles", f"expected a non-empty subset of {list(ROLES)}, got {roles!r}")
    data_dir = Path(str(_required(raw, "data_dir", source)))
    data_dir = data_dir if data_dir.is_absolute() else base / data_dir
    listener = _addr(_required(raw, "listener", source), "listener", source)
    raft_listener = None
    if "controller" in roles:
        raft_listener = _addr(_required(raw, "raft_listener", source), "raft_listener", source)
    cluster_id = str(raw.get("cluster_id", "rafka"))
    voters = _voters(raw.get("voters"), source)
    secret = _secret(raw, base, source)
    if len(voters) > 1 and secret is None:
        raise ConfigError(source, "cluster_secret",
                          f"a quorum of {len(voters)} voters needs cluster_secret or cluster_secret_file "
                          "(the Raft transport is authenticated and encrypted with it)")
    if "controller" in roles and node_id not in {v.id for v in voters}:
        raise ConfigError(source, "voters", f"node {node_id} has the controller role but is not a voter")
    advertised = raw.get("advertised_host")
    metrics = raw.get("metrics_listener")
    kafka = raw.get("kafka") or {}
    if not isinstance(kafka, dict) or set(kafka) - set(_KAFKA_KEYS):
        raise ConfigError(source, "kafka", f"expected only {', '.join(_KAFKA_KEYS)}, got {kafka!r}")
    from rafka.security.listener import parse_security  # (it imports this module)

    security = parse_security(raw.get("security"), source, base)
    kafka_secured, kafka_mechs = _kafka_secured(kafka, security, source)
    if security is not None and security.listener == listener and listener[1] != 0:
        raise ConfigError(source, "security.listener", "must differ from listener")
    if security is not None and security.inter_broker:
        missing = [v.id for v in voters if v.secure_rpc is None]
        if missing:
            raise ConfigError(source, "voters", f"inter.broker.security needs secure_rpc (the "
                              f"voter's secured listener) for voters {missing}")
    return NodeConfig(
        node_id=node_id,
        roles=frozenset(roles),
        data_dir=data_dir,
        listener=listener,
        raft_listener=raft_listener,
        cluster_id=cluster_id,
        cluster_secret=secret,
        voters=voters,
        broker=_settings(raw.get("broker"), BROKER_SETTINGS, "broker", source),
        controller=_settings(raw.get("controller"), CONTROLLER_SETTINGS, "controller", source),
        source=source,
        advertised_host=str(advertised) if advertised else None,
        metrics_listener=_addr(metrics, "metrics_listener", source) if metrics else None,
        security=security,
        kafka_listener=_addr(kafka["listener"], "kafka.listener", source) if kafka.get("listener") else None,
        kafka_secured_listeners=kafka_secured,
        kafka_sasl_mechanisms=kafka_mechs,
    )


# the [kafka] table (docs/kafka-compat.md "Security"): key -> the listener's protocol
_KAFKA_KEYS = {"listener": "PLAINTEXT", "ssl_listener": "SSL",
               "sasl_plaintext_listener": "SASL_PLAINTEXT", "sasl_ssl_listener": "SASL_SSL",
               "sasl_mechanisms": None}


def _kafka_secured(kafka: Mapping[str, Any], security: Any, source: str
                   ) -> tuple[tuple[tuple[str, tuple[str, int]], ...], tuple[str, ...]]:
    """The secured Kafka listeners and SASL mechanisms of the [kafka] table."""
    from rafka.security.listener import parse_mechanisms
    from rafka.security.scram import MECHANISMS

    allowed = (*MECHANISMS, "PLAIN")
    mechs = parse_mechanisms(kafka.get("sasl_mechanisms", list(allowed)), allowed, source,
                             "kafka.sasl_mechanisms")
    out = []
    for key, protocol in _KAFKA_KEYS.items():
        if protocol in (None, "PLAINTEXT") or not kafka.get(key):
            continue
        if security is None:
            raise ConfigError(source, f"kafka.{key}", "needs a [security] table (its TLS files, "
                              "SASL limits, authorizer and super users apply: docs/security.md)")
        if protocol.endswith("SSL") and not (security.certfile and security.keyfile):
            raise ConfigError(source, f"kafka.{key}", "needs security.ssl.certfile and "
                              "security.ssl.keyfile")
        out.append((protocol, _addr(kafka[key], f"kafka.{key}", source)))
    return tuple(out), tuple(mechs)


def load_config(path: str | os.PathLike[str]) -> NodeConfig:
    """Read and validate a node's TOML config; ``ConfigError`` on any problem."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(str(p), "(file)", f"cannot read: {exc.strerror}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(p), "(syntax)", f"not valid TOML: {exc}") from None
    return parse_config(raw, str(p), base_dir=Path.cwd())


def effective_topic_config(topic: Any, defaults: Mapping[str, Any]) -> LogConfig:
    """Log config of a topic (a ``TopicImage`` or None): ``LogConfig`` defaults ← the broker's
    ``log.*`` defaults (``NodeConfig.topic_defaults()``) ← the topic's own overrides."""
    cfg = LogConfig.from_dict(defaults)
    if topic is not None and topic.configs:
        cfg = cfg.with_overrides(topic.configs)
    return cfg
