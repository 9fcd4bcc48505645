"""Options of the ``rafka`` Spark source and sink, parsed and checked once (pure, no Spark).

Theory of operation
-------------------
Spark hands a data source its options as a case-insensitive map of strings. The names and
meanings are those of Spark's own Kafka source (``subscribe``, ``startingOffsets``,
``maxOffsetsPerTrigger``…) so that a Kafka job moves to rafka by changing the format name.
``parse_source_options`` turns the raw map into a frozen ``SourceOptions`` and refuses, with a
message naming the option, anything unknown, malformed or contradictory — at ``load()`` time,
not in the middle of a query. ``parse_sink_options`` does the same for the sink.

Starting/ending positions are kept symbolic (``Position``): "earliest", "latest", a JSON map of
explicit offsets (-2 = earliest, -1 = latest), or a timestamp (global or per partition). They
are resolved against the cluster by the reader, which knows the partitions.

Isolation: ``isolation.level`` (or Spark's ``kafka.isolation.level``) is ``read_committed`` by
default — Spark's Kafka source reads what its consumer reads, and a rafka topic written by
transactional producers should show only committed records. On a topic without transactions
both levels read exactly the same records.

Security: ``rafka.security.protocol``, ``rafka.sasl.mechanism``, ``rafka.sasl.username``,
``rafka.sasl.password``, ``rafka.ssl.cafile``, ``rafka.ssl.certfile``, ``rafka.ssl.keyfile``
(or Spark's ``kafka.``-prefixed names: ``kafka.security.protocol``, …) are the client's
kafka-python options (``security/client.py``), checked here and kept as plain pairs
(``security``) — the source's connections and the sink's producer are built from them.

Everything here is picklable plain data: executors rebuild readers from it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "OptionError",
    "Position",
    "SourceOptions",
    "SinkOptions",
    "parse_source_options",
    "parse_sink_options",
    "parse_bool",
    "EARLIEST",
    "LATEST",
]

EARLIEST = -2
LATEST = -1

_SOURCE_OPTIONS = {
    "bootstrap.servers",
    "kafka.bootstrap.servers",
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "failondataloss",
    "minpartitions",
    "includeheaders",
    "fetch.max.bytes",
    "request.timeout.ms",
    "isolation.level",
    "kafka.isolation.level",
}
# rafka.<name> / kafka.<name> → the client's kafka-python keyword (security/client.py)
_SECURITY = {"security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
             "sasl.username": "sasl_plain_username", "sasl.password": "sasl_plain_password",
             "ssl.cafile": "ssl_cafile", "ssl.certfile": "ssl_certfile",
             "ssl.keyfile": "ssl_keyfile"}
_SECURITY_OPTIONS = {f"{p}.{k}" for p in ("rafka", "kafka") for k in _SECURITY}
_SOURCE_OPTIONS |= _SECURITY_OPTIONS

_STREAM_ONLY = {"maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"}
_BATCH_ONLY = {"endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"}

_SINK_OPTIONS = {
    "bootstrap.servers",
    "kafka.bootstrap.servers",
    "topic",
    "acks",
    "linger.ms",
    "compression.type",
    "includeheaders",
    "checkpointlocation",
    "path",
} | _SECURITY_OPTIONS

# Spark's spelling of each option, for messages (the map we get is lower-cased).
_SPELLING = {
    n.lower(): n
    for n in (
        "bootstrap.servers subscribe subscribePattern assign startingOffsets endingOffsets "
        "startingTimestamp endingTimestamp startingOffsetsByTimestamp endingOffsetsByTimestamp "
        "startingOffsetsByTimestampStrategy maxOffsetsPerTrigger minOffsetsPerTrigger "
        "maxTriggerDelay failOnDataLoss minPartitions includeHeaders topic acks linger.ms "
        "compression.type checkpointLocation path fetch.max.bytes request.timeout.ms"
    ).split()
}
_SPELLING.update({n: n for n in ("kafka.bootstrap.servers", "isolation.level", "kafka.isolation.level")})
_SPELLING.update({n: n for n in _SECURITY_OPTIONS})

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?)?\s*$")
_DURATION_MS = {"ms": 1, "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
                "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000,
                "minutes": 60_000, "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000}


class OptionError(ValueError):
    """A rafka source/sink option is unknown, malformed or contradicts another one."""


def _spell(name: str) -> str:
    return _SPELLING.get(name.lower(), name)


@dataclass(frozen=True, slots=True)
class Position:
    """Where to start or end, before resolution against the cluster.

    ``kind``: "earliest" | "latest" | "offsets" (``offsets``: topic → partition → offset, with
    -2/-1 for earliest/latest) | "timestamp" (``timestamp`` ms for every partition) |
    "timestamps" (``offsets`` holds per-partition timestamps).
    """

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    offsets: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    timestamp: int = -1


@dataclass(frozen=True, slots=True)
class SourceOptions:
    bootstrap_servers: str
    strategy: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()                 # subscribe
    pattern: str = ""                            # subscribePattern
    assignment: tuple[tuple[str, int], ...] = ()  # assign, sorted
    starting: Position = Position("latest")
    ending: Position = Position("latest")
    timestamp_strategy: Literal["error", "latest"] = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    include_headers: bool = False
    fetch_max_bytes: int = 8 * 1024 * 1024
    request_timeout_ms: int = 30_000
    isolation_level: int = 1  # FETCH/LIST_OFFSETS isolation_level: 1 read_committed, 0 read_uncommitted
    security: tuple[tuple[str, str], ...] = ()  # kafka-python security options (module docstring)

    def matches(self, topic: str) -> bool:
        """Does a topic name belong to this subscription (internal topics never do)?"""
        if topic.startswith("__"):
            return False
        if self.strategy == "subscribe":
            return topic in self.topics
        if self.strategy == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assignment)


@dataclass(frozen=True, slots=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None = None
    acks: str = "all"
    linger_ms: int = 5
    compression_type: str = "none"
    security: tuple[tuple[str, str], ...] = ()  # kafka-python security options (module docstring)


def parse_bool(name: str, raw: str) -> bool:
    v = str(raw).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise OptionError(f"option {_spell(name)}: expected true or false, got {raw!r}")


def _positive_int(name: str, raw: str, *, minimum: int = 1) -> int:
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {_spell(name)}: expected an integer, got {raw!r}") from None
    if v < minimum:
        raise OptionError(f"option {_spell(name)}: must be >= {minimum}, got {v}")
    return v


def _duration_ms(name: str, raw: str) -> int:
    m = _DURATION.match(str(raw))
    if not m:
        raise OptionError(f"option {_spell(name)}: expected a duration like '5m', '30s' or "
                          f"'500ms', got {raw!r}")
    return int(m.group(1)) * _DURATION_MS[m.group(2) or "ms"]


def _topic_partition_json(name: str, raw: str, *, values: bool) -> dict[str, dict[int, int]]:
    """``{"t": {"0": 5}}`` (values=True) or ``{"t": [0, 1]}`` (values=False) → t → p → value."""
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        raise OptionError(f"option {_spell(name)}: not valid JSON ({exc}): {raw!r}") from None
    if not isinstance(obj, dict) or not obj:
        raise OptionError(f"option {_spell(name)}: expected a non-empty JSON object keyed by "
                          f"topic, got {raw!r}")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in obj.items():
        if values:
            if not isinstance(parts, dict):
                raise OptionError(f"option {_spell(name)}: topic {topic!r} must map partition "
                                  f"numbers to values, got {parts!r}")
            items = list(parts.items())
        else:
            if not isinstance(parts, list):
                raise OptionError(f"option {_spell(name)}: topic {topic!r} must map to a list "
                                  f"of partition numbers, got {parts!r}")
            items = [(p, 0) for p in parts]
        tp: dict[int, int] = {}
        for p, v in items:
            try:
                pn = int(p)
            except (TypeError, ValueError):
                raise OptionError(f"option {_spell(name)}: bad partition {p!r} for topic "
                                  f"{topic!r}") from None
            if pn < 0 or not isinstance(v, int) or isinstance(v, bool):
                raise OptionError(f"option {_spell(name)}: bad entry {p!r}: {v!r} for topic "
                                  f"{topic!r}")
            tp[pn] = v
        out[str(topic)] = tp
    return out


def _position(opts: Mapping[str, str], prefix: str, default: str) -> Position:
    """Resolve ``{prefix}Offsets`` / ``{prefix}Timestamp`` / ``{prefix}OffsetsByTimestamp``."""
    off_key, ts_key, by_ts_key = f"{prefix}offsets", f"{prefix}timestamp", \
        f"{prefix}offsetsbytimestamp"
    given = [k for k in (off_key, ts_key, by_ts_key) if k in opts]
    if len(given) > 1:
        # Kafka lets the timestamp options win silently; a contradiction is better reported.
        raise OptionError("options " + " and ".join(_spell(k) for k in given)
                          + " contradict each other: give only one")
    if ts_key in opts:
        return Position("timestamp", timestamp=_positive_int(ts_key, opts[ts_key], minimum=0))
    if by_ts_key in opts:
        tps = _topic_partition_json(by_ts_key, opts[by_ts_key], values=True)
        for t, ps in tps.items():
            for p, v in ps.items():
                if v < 0:
                    raise OptionError(f"option {_spell(by_ts_key)}: timestamp of {t}-{p} must "
                                      f"be >= 0, got {v}")
        return Position("timestamps", offsets=tps)
    raw = str(opts.get(off_key, default)).strip()
    if raw.lower() in ("earliest", "latest"):
        return Position(raw.lower())  # type: ignore[arg-type]
    tps = _topic_partition_json(off_key, raw, values=True)
    for t, ps in tps.items():
        for p, v in ps.items():
            if v < EARLIEST:
                raise OptionError(f"option {_spell(off_key)}: offset of {t}-{p} must be >= 0, "
                                  f"-2 (earliest) or -1 (latest), got {v}")
    return Position("offsets", offsets=tps)


def _bootstrap(opts: Mapping[str, str]) -> str:
    servers = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
    if not servers or not str(servers).strip():
        raise OptionError("option bootstrap.servers is required (e.g. '127.0.0.1:9092')")
    for addr in str(servers).split(","):
        host, sep, port = addr.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise OptionError(f"option bootstrap.servers: bad address {addr.strip()!r}, "
                              f"expected HOST:PORT[,HOST:PORT...]")
    return str(servers)


def _check_known(opts: Mapping[str, str], allowed: set[str], what: str) -> None:
    unknown = sorted(k for k in opts if k.lower() not in allowed)
    if unknown:
        raise OptionError(f"unknown option(s) for the rafka {what}: {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(_spell(k) for k in allowed))}")


def parse_source_options(raw: Mapping[str, str], *, streaming: bool | None = None) -> SourceOptions:
    """Check and parse source options. ``streaming`` None = not known yet (``schema()`` time)."""
    opts = {str(k).lower(): v for k, v in raw.items()}
    _check_known(opts, _SOURCE_OPTIONS, "source")
    if streaming is True:
        bad = sorted(_spell(k) for k in opts if k in _BATCH_ONLY)
        if bad:
            raise OptionError(f"option(s) {', '.join(bad)} apply to batch queries only "
                              f"(spark.read), not to readStream")
    if streaming is False:
        bad = sorted(_spell(k) for k in opts if k in _STREAM_ONLY)
        if bad:
            raise OptionError(f"option(s) {', '.join(bad)} apply to streaming queries only "
                              f"(spark.readStream), not to spark.read")
    servers = _bootstrap(opts)

    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise OptionError("exactly one of the options subscribe, subscribePattern, assign is "
                          f"required, got {len(given)}"
                          + (f" ({', '.join(_spell(k) for k in given)})" if given else ""))
    kw: dict = {}
    if given[0] == "subscribe":
        topics = tuple(sorted({t.strip() for t in str(opts["subscribe"]).split(",") if t.strip()}))
        if not topics:
            raise OptionError("option subscribe: no topic given (comma-separated topic names)")
        kw.update(strategy="subscribe", topics=topics)
    elif given[0] == "subscribepattern":
        pattern = str(opts["subscribepattern"])
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option subscribePattern: bad regular expression {pattern!r}: "
                              f"{exc}") from None
        if not pattern.strip():
            raise OptionError("option subscribePattern: empty pattern")
        kw.update(strategy="subscribePattern", pattern=pattern)
    else:
        tps = _topic_partition_json("assign", str(opts["assign"]), values=False)
        assignment = tuple(sorted((t, p) for t, ps in tps.items() for p in ps))
        if not assignment:
            raise OptionError("option assign: no partition given, e.g. {\"events\": [0, 1]}")
        kw.update(strategy="assign", assignment=assignment)

    starting = _position(opts, "starting", "latest")
    ending = _position(opts, "ending", "latest")
    if ending.kind == "earliest":
        raise OptionError("option endingOffsets: 'earliest' is not allowed (use 'latest' or JSON)")
    if ending.kind == "offsets" and any(v == EARLIEST for ps in ending.offsets.values()
                                        for v in ps.values()):
        raise OptionError("option endingOffsets: -2 (earliest) is not allowed as an ending offset")
    if starting.kind == "latest" and streaming is False:
        raise OptionError("option startingOffsets: 'latest' is not allowed for batch queries")
    if starting.kind == "offsets" and streaming is False and any(
            v == LATEST for ps in starting.offsets.values() for v in ps.values()):
        raise OptionError("option startingOffsets: -1 (latest) is not allowed for batch queries")
    for pos, name in ((starting, "startingOffsets"), (ending, "endingOffsets")):
        if pos.kind in ("offsets", "timestamps") and kw["strategy"] == "assign":
            extra = sorted(f"{t}-{p}" for t, ps in pos.offsets.items() for p in ps
                           if (t, p) not in set(kw["assignment"]))
            if extra:
                raise OptionError(f"option {name}: partitions {', '.join(extra)} are not in "
                                  f"the assign option")
    kw.update(starting=starting, ending=ending)

    strat = str(opts.get("startingoffsetsbytimestampstrategy", "error")).strip().lower()
    if strat not in ("error", "latest"):
        raise OptionError("option startingOffsetsByTimestampStrategy: expected 'error' or "
                          f"'latest', got {strat!r}")
    kw["timestamp_strategy"] = strat

    if "maxoffsetspertrigger" in opts:
        kw["max_offsets_per_trigger"] = _positive_int("maxoffsetspertrigger",
                                                      opts["maxoffsetspertrigger"])
    if "minoffsetspertrigger" in opts:
        kw["min_offsets_per_trigger"] = _positive_int("minoffsetspertrigger",
                                                      opts["minoffsetspertrigger"])
    if "maxtriggerdelay" in opts:
        if "minoffsetspertrigger" not in opts:
            raise OptionError("option maxTriggerDelay needs minOffsetsPerTrigger")
        kw["max_trigger_delay_ms"] = _duration_ms("maxtriggerdelay", opts["maxtriggerdelay"])
    lo, hi = kw.get("min_offsets_per_trigger"), kw.get("max_offsets_per_trigger")
    if lo is not None and hi is not None and lo > hi:
        raise OptionError(f"option minOffsetsPerTrigger ({lo}) is greater than "
                          f"maxOffsetsPerTrigger ({hi})")
    if "failondataloss" in opts:
        kw["fail_on_data_loss"] = parse_bool("failondataloss", opts["failondataloss"])
    if "minpartitions" in opts:
        kw["min_partitions"] = _positive_int("minpartitions", opts["minpartitions"])
    if "includeheaders" in opts:
        kw["include_headers"] = parse_bool("includeheaders", opts["includeheaders"])
    if "fetch.max.bytes" in opts:
        kw["fetch_max_bytes"] = _positive_int("fetch.max.bytes", opts["fetch.max.bytes"],
                                              minimum=1024)
    if "request.timeout.ms" in opts:
        kw["request_timeout_ms"] = _positive_int("request.timeout.ms", opts["request.timeout.ms"])
    kw["isolation_level"] = _isolation_level(opts)
    kw["security"] = _security(opts)
    return SourceOptions(bootstrap_servers=servers, **kw)


def _security(opts: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``rafka.security.protocol`` & co. → sorted (keyword, value) pairs, checked as the
    clients check them (a bad protocol, a SASL protocol without user and password, an
    unreadable CA file → ``OptionError`` naming it)."""
    from rafka.security.client import ClientSecurity

    out: dict[str, str] = {}
    for key in sorted(opts):
        prefix, _, name = key.partition(".")
        if prefix in ("rafka", "kafka") and name in _SECURITY:
            kw = _SECURITY[name]
            if kw in out and out[kw] != str(opts[key]):
                raise OptionError(f"options rafka.{name} and kafka.{name} contradict each other")
            out[kw] = str(opts[key])
    if out:
        try:
            ClientSecurity.from_options(**out)
        except ValueError as exc:
            raise OptionError(f"security options: {exc}") from None
    return tuple(sorted(out.items()))


def _isolation_level(opts: Mapping[str, str]) -> int:
    """``isolation.level`` / ``kafka.isolation.level`` (the same if both are given) → 0 or 1."""
    from rafka.client.txn_filter import READ_COMMITTED, isolation_level_code

    given = {k: str(opts[k]).strip().lower() for k in ("isolation.level", "kafka.isolation.level") if k in opts}
    if len(set(given.values())) > 1:
        raise OptionError("options isolation.level and kafka.isolation.level contradict each other: "
                          "give only one")
    name, raw = next(iter(given.items()), ("isolation.level", READ_COMMITTED))
    try:
        return isolation_level_code(raw)
    except ValueError:
        raise OptionError(f"option {name}: expected read_committed or read_uncommitted, "
                          f"got {opts.get(name)!r}") from None


def parse_sink_options(raw: Mapping[str, str]) -> SinkOptions:
    opts = {str(k).lower(): v for k, v in raw.items()}
    _check_known(opts, _SINK_OPTIONS, "sink")
    kw: dict = {"bootstrap_servers": _bootstrap(opts), "security": _security(opts)}
    if "topic" in opts:
        topic = str(opts["topic"]).strip()
        if not topic:
            raise OptionError("option topic: empty topic name")
        kw["topic"] = topic
    if "acks" in opts:
        acks = str(opts["acks"]).strip().lower()
        if acks not in ("0", "1", "all", "-1"):
            raise OptionError(f"option acks: expected 0, 1 or all, got {opts['acks']!r}")
        kw["acks"] = "all" if acks == "-1" else acks
    if "linger.ms" in opts:
        kw["linger_ms"] = _positive_int("linger.ms", opts["linger.ms"], minimum=0)
    if "compression.type" in opts:
        comp = str(opts["compression.type"]).strip().lower()
        if comp not in ("none", "lz4"):
            raise OptionError(f"option compression.type: expected none or lz4, got {comp!r}")
        kw["compression_type"] = comp
    return SinkOptions(**kw)
