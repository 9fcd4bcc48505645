"""Per-topic log configuration with Kafka's topic-config names.

Theory of operation: ``LogConfig`` is a frozen dataclass of already-parsed values; the only way
in from the outside world is ``LogConfig.from_dict({"segment.bytes": "1048576", ...})`` which
starts from the defaults, parses each value (str or int) and validates it, raising
``InvalidConfigError`` naming the offending key for unknown keys and bad values.
``to_dict()`` gives the Kafka-named strings back (for ``topic describe``).

``min.insync.replicas`` and ``unclean.leader.election.enable`` are topic configs used by the
broker, not by the log; they are accepted and carried here so that the broker can hand the whole
topic config to ``from_dict``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from .errors import InvalidConfigError

__all__ = ["LogConfig", "InvalidConfigError"]

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1 = forever
    retention_bytes: int = -1  # -1 = unbounded
    cleanup_policy: str = "delete"  # delete | compact | compact,delete
    delete_retention_ms: int = 24 * 3600 * 1000
    min_compaction_lag_ms: int = 0
    min_cleanable_dirty_ratio: float = 0.5
    max_message_bytes: int = 1024 * 1024 + 12  # as Kafka: 1 MiB + the v2 log overhead
    message_timestamp_type: str = "CreateTime"  # CreateTime | LogAppendTime
    flush_messages: int = _INT64_MAX  # set on a topic: overrides log.flush.policy (broker/flush_rule.py)
    flush_ms: int = _INT64_MAX  # set on a topic: overrides log.flush.policy (broker/flush_rule.py)
    file_delete_delay_ms: int = 60_000
    min_insync_replicas: int = 1  # broker's business, carried along
    unclean_leader_election_enable: bool = False  # broker's business, carried along

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None = None) -> LogConfig:
        """Defaults overridden by Kafka-named ``values``; ``InvalidConfigError`` names bad keys."""
        return cls().with_overrides(values or {})

    def with_overrides(self, values: Mapping[str, Any]) -> LogConfig:
        changes: dict[str, Any] = {}
        for key, raw in values.items():
            spec = _SPECS.get(key)
            if spec is None:
                raise InvalidConfigError(key, "unknown topic config")
            attr, parse = spec
            try:
                changes[attr] = parse(raw)
            except (TypeError, ValueError) as exc:
                raise InvalidConfigError(key, f"bad value {raw!r}: {exc}") from None
        return replace(self, **changes)

    def to_dict(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, (attr, _parse) in _SPECS.items():
            v = getattr(self, attr)
            out[key] = str(v).lower() if isinstance(v, bool) else str(v)
        return out


def _int(lo: int, hi: int = _INT64_MAX, *, allow_minus_one: bool = False):
    def parse(raw: Any) -> int:
        if isinstance(raw, bool) or isinstance(raw, float):
            raise ValueError("expected an integer")
        v = int(str(raw).strip())
        if allow_minus_one and v == -1:
            return v
        if not lo <= v <= hi:
            raise ValueError(f"must be in [{lo}, {hi}]" + (" or -1" if allow_minus_one else ""))
        return v
    return parse


def _ratio(raw: Any) -> float:
    v = float(str(raw).strip())
    if not 0.0 <= v <= 1.0:
        raise ValueError("must be in [0, 1]")
    return v


def _bool(raw: Any) -> bool:
    s = str(raw).strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError("expected true or false")


def _cleanup_policy(raw: Any) -> str:
    parts = sorted({p.strip() for p in str(raw).split(",") if p.strip()})
    if not parts or not set(parts) <= {"compact", "delete"}:
        raise ValueError("expected delete, compact or compact,delete")
    return ",".join(parts)


def _timestamp_type(raw: Any) -> str:
    s = str(raw).strip()
    if s not in ("CreateTime", "LogAppendTime"):
        raise ValueError("expected CreateTime or LogAppendTime")
    return s


_SPECS: dict[str, tuple[str, Any]] = {
    "segment.bytes": ("segment_bytes", _int(14, _INT32_MAX)),
    "segment.ms": ("segment_ms", _int(1)),
    "segment.index.bytes": ("segment_index_bytes", _int(8, _INT32_MAX)),
    "index.interval.bytes": ("index_interval_bytes", _int(0, _INT32_MAX)),
    "retention.ms": ("retention_ms", _int(0, allow_minus_one=True)),
    "retention.bytes": ("retention_bytes", _int(0, allow_minus_one=True)),
    "cleanup.policy": ("cleanup_policy", _cleanup_policy),
    "delete.retention.ms": ("delete_retention_ms", _int(0)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _int(0)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "max.message.bytes": ("max_message_bytes", _int(0, _INT32_MAX)),
    "message.timestamp.type": ("message_timestamp_type", _timestamp_type),
    "flush.messages": ("flush_messages", _int(1)),
    "flush.ms": ("flush_ms", _int(0)),
    "file.delete.delay.ms": ("file_delete_delay_ms", _int(0)),
    "min.insync.replicas": ("min_insync_replicas", _int(1, _INT32_MAX)),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _bool),
}
assert {a for a, _ in _SPECS.values()} == {f.name for f in fields(LogConfig)}
