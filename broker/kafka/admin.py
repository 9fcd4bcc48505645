"""Kafka admin APIs beyond topics: groups, partitions, configs, cluster (AdminClient).

Theory of operation: as every adapter, one native request each (``apis.py``). Groups are
rafka's controller-assigned groups, shown as classic ``consumer`` groups: KIP-848 states map
to the classic names a Kafka tool knows (Empty, Assigning → PreparingRebalance, Reconciling →
CompletingRebalance, Stable), a member's subscription and assignment are encoded as the
ConsumerProtocolSubscription v0 / ConsumerProtocolAssignment v0 bytes Kafka tools decode.
Configs: topics (resource type 2) are described and altered; a broker (4) describes its own
settings (node.toml, read-only: STATIC_BROKER_CONFIG) and its Kafka listener as
``listeners`` / ``advertised.listeners``. AlterConfigs replaces a topic's overrides (the
ones it does not name are removed, as Kafka does); IncrementalAlterConfigs SETs and DELETEs
(APPEND/SUBTRACT, list-valued configs, are ``INVALID_REQUEST``).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from typing import Any

from kio.serial import entity_writer
from rafka.broker.kafka import groups
from rafka.broker.kafka.codec import KafkaRequest, build
from rafka.broker.kafka.context import call_native, kafka_address, kafka_error, kafka_listeners, ms
from rafka.wire.protocol import ApiKey

__all__ = ["describe_groups", "list_groups", "delete_groups", "create_partitions",
           "describe_configs", "alter_configs", "incremental_alter_configs", "describe_cluster"]

TOPIC, BROKER = 2, 4
INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION = 42, 3
_STATES = {"Empty": "Empty", "Assigning": "PreparingRebalance",
           "Reconciling": "CompletingRebalance", "Stable": "Stable"}


def _subscription(topics: list[str]) -> bytes:
    entity = build(groups._Subscription, {"topics": topics, "user_data": None})
    buf = io.BytesIO()
    entity_writer(groups._Subscription)(buf, entity)
    return struct.pack(">h", 0) + buf.getvalue()


async def describe_groups(ctx: Any, req: KafkaRequest) -> dict[str, Any]:

    names = list(req.body.groups)
    native = await call_native(ctx, req, ApiKey.DESCRIBE_GROUPS, {"groups": names})
    by_id = {g["group_id"]: g for g in native.get("groups") or []}
    out = []
    for name in names:
        g = by_id.get(name, {"error": native.get("error") or 69})  # GROUP_ID_NOT_FOUND
        members = [{
            "member_id": m["member_id"], "group_instance_id": m.get("instance_id") or None,
            "client_id": m.get("client_id") or "", "client_host": m.get("client_host") or "",
            "member_metadata": _subscription(list(m.get("subscribed_topics") or [])),
            "member_assignment": groups.encode_assignment(frozenset(
                (a["name"], p) for a in m.get("assignment") or () for p in a["partitions"]))}
            for m in g.get("members") or []]
        out.append({"error_code": kafka_error(g.get("error")), "group_id": name,
                    "group_state": _STATES.get(g.get("state") or "", "Dead"),
                    "protocol_type": "consumer", "protocol_data": "" if not members else
                    groups.group_protocol(ctx, name) or "range",
                    "members": members, "authorized_operations": -(2**31)})
    return {"throttle_time": 0, "groups": out}


async def list_groups(ctx: Any, req: KafkaRequest) -> dict[str, Any]:

    native = await call_native(ctx, req, ApiKey.LIST_GROUPS, {})
    wanted = {s for s in getattr(req.body, "states_filter", ())}
    out = [{"group_id": g["group_id"], "protocol_type": "consumer",
            "group_state": _STATES.get(g.get("state") or "", "Dead")}
           for g in native.get("groups") or []]
    if wanted:
        out = [g for g in out if g["group_state"] in wanted]
    return {"throttle_time": 0, "error_code": kafka_error(native.get("error")), "groups": out}


async def delete_groups(ctx: Any, req: KafkaRequest) -> dict[str, Any]:

    names = list(req.body.groups_names)
    native = await call_native(ctx, req, ApiKey.DELETE_GROUPS, {"groups": names})
    by_id = {g["group_id"]: g for g in native.get("groups") or []}
    return {"throttle_time": 0, "results": [
        {"group_id": n, "error_code": kafka_error(by_id.get(n, native).get("error"))}
        for n in names]}


async def create_partitions(ctx: Any, req: KafkaRequest) -> dict[str, Any]:

    b = req.body
    if b.validate_only:
        return {"throttle_time": 0, "results": [
            {"name": t.name, "error_code": INVALID_REQUEST,
             "error_message": "validate_only is not supported for CreatePartitions"}
            for t in b.topics]}
    native = await call_native(ctx, req, ApiKey.CREATE_PARTITIONS, {
        "topics": [{"name": t.name, "count": t.count} for t in b.topics],
        "timeout_ms": ms(b.timeout)})
    by_name = {t["name"]: t for t in native.get("topics") or []}
    out = []
    for t in b.topics:
        a = by_name.get(t.name, native)
        err = kafka_error(a.get("error"))
        out.append({"name": t.name, "error_code": err,
                    "error_message": a.get("message") if err else None})
    return {"throttle_time": 0, "results": out}


def _text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


async def describe_configs(ctx: Any, req: KafkaRequest) -> dict[str, Any]:

    resources = list(req.body.resources)
    names = [r.resource_name for r in resources if r.resource_type == TOPIC]
    native = await call_native(ctx, req, ApiKey.DESCRIBE_CONFIGS, {"topics": names}) if names else {}
    by_name = {t["name"]: t for t in native.get("topics") or []}
    out = []
    for r in resources:
        base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
        if r.resource_type == BROKER:
            out.append({**base, **_broker_configs(ctx, r)})
            continue
        if r.resource_type != TOPIC:
            out.append({**base, "error_code": INVALID_REQUEST, "error_message":
                        f"resource type {r.resource_type} is not served", "configs": ()})
            continue
        t = by_name.get(r.resource_name, {"error": native.get("error") or UNKNOWN_TOPIC_OR_PARTITION})
        err = kafka_error(t.get("error"))
        keys = set(r.configuration_keys) if r.configuration_keys is not None else None
        overrides = set(t.get("overrides") or ())
        configs = [{"name": k, "value": _text(v), "read_only": False,
                    "config_source": 1 if k in overrides else 5, "is_sensitive": False,
                    "synonyms": (), "config_type": _config_type(v), "documentation": None,
                    "is_default": k not in overrides}
                   for k, v in sorted((t.get("configs") or {}).items())
                   if keys is None or k in keys]
        out.append({**base, "error_code": err, "error_message": t.get("message") if err else None,
                    "configs": configs if not err else ()})
    return {"throttle_time": 0, "results": out}


def _config_type(v: Any) -> int:
    """Kafka's ConfigType of a value by its Python type (or its text): BOOLEAN 1, STRING 2,
    LONG 5, DOUBLE 6, LIST 7 (UNKNOWN 0 otherwise)."""
    if isinstance(v, bool):
        return 1
    if isinstance(v, int):
        return 5
    if isinstance(v, float):
        return 6
    if isinstance(v, str):  # rafka keeps some settings as their text
        if v in ("true", "false"):
            return 1
        return 5 if v.lstrip("-").isdigit() else 2
    if isinstance(v, (list, tuple)):
        return 7
    return 0


def _broker_configs(ctx: Any, r: Any) -> dict[str, Any]:
    """This broker's settings (node.toml: read-only here, STATIC_BROKER_CONFIG) and its
    listener addresses; another broker's id is that broker's to answer (INVALID_REQUEST)."""

    if r.resource_name not in ("", str(ctx.node_id)):
        return {"error_code": INVALID_REQUEST, "error_message":
                f"broker {ctx.node_id} answers for itself only, not {r.resource_name!r}",
                "configs": ()}
    settings = dict(ctx.settings)
    reg = ctx.image().cluster.brokers.get(ctx.node_id)
    named = kafka_listeners(reg.kafka_listener if reg is not None else None)
    if named:  # Kafka's form: NAME://HOST:PORT for each of its Kafka listeners
        settings["listeners"] = settings["advertised.listeners"] = ",".join(
            f"{name}://{addr}" for name, addr in named.items())
    keys = set(r.configuration_keys) if r.configuration_keys is not None else None
    return {"error_code": 0, "error_message": None, "configs": [
        {"name": k, "value": _text(v), "read_only": True, "config_source": 4,
         "is_sensitive": False, "synonyms": (), "config_type": _config_type(v),
         "documentation": None, "is_default": False}
        for k, v in sorted(settings.items()) if keys is None or k in keys]}


async def _alter(ctx: Any, req: KafkaRequest, changes: dict[str, dict[str, str | None]]
                 ) -> dict[str, dict[str, Any]]:

    if not changes:
        return {}
    native = await call_native(ctx, req, ApiKey.ALTER_CONFIGS, {
        "topics": [{"name": n, "configs": c} for n, c in changes.items()]})
    by_name = {t["name"]: t for t in native.get("topics") or []}
    return {n: by_name.get(n, native) for n in changes}


async def _alter_topics(ctx: Any, req: KafkaRequest,
                        changes_of: Callable[[Any], dict[str, str | None] | str]) -> dict[str, Any]:
    """AlterConfigs and IncrementalAlterConfigs: ``changes_of(resource)`` gives a topic's
    changes (a value of None deletes the override) or the reason it is refused; other
    resource types are refused; then one forwarded ALTER_CONFIGS for them all."""
    changes: dict[str, dict[str, str | None]] = {}
    refused: dict[str, tuple[int, str]] = {}
    for r in req.body.resources:
        got = (changes_of(r) if r.resource_type == TOPIC
               else "only topic configs can be altered")
        if isinstance(got, str):
            refused[r.resource_name] = (INVALID_REQUEST, got)
        else:
            changes[r.resource_name] = got
    answers = {} if req.body.validate_only else await _alter(ctx, req, changes)
    return {"throttle_time": 0, "responses": [_alter_answer(r, refused, answers, kafka_error)
                                              for r in req.body.resources]}


async def alter_configs(ctx: Any, req: KafkaRequest) -> dict[str, Any]:
    image = ctx.image()

    def replace(r: Any) -> dict[str, str | None]:  # Kafka's AlterConfigs replaces all overrides
        topic = image.topics.by_name.get(r.resource_name)
        given = {c.name: c.value for c in r.configs}
        old = dict(topic.configs) if topic is not None else {}
        return {**{k: None for k in old if k not in given}, **given}

    return await _alter_topics(ctx, req, replace)


def _alter_answer(r: Any, refused: dict[str, tuple[int, str]], answers: dict[str, Any],
                  kafka_error: Any) -> dict[str, Any]:
    base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
    if r.resource_name in refused:
        code, msg = refused[r.resource_name]
        return {**base, "error_code": code, "error_message": msg}
    a = answers.get(r.resource_name, {})
    err = kafka_error(a.get("error"))
    return {**base, "error_code": err, "error_message": a.get("message") if err else None}


async def incremental_alter_configs(ctx: Any, req: KafkaRequest) -> dict[str, Any]:

    def apply(r: Any) -> dict[str, str | None] | str:  # SET (0) and DELETE (1) only
        ops: dict[str, str | None] = {}
        for c in r.configs:
            if c.config_operation not in (0, 1):
                return f"{c.name}: APPEND/SUBTRACT (list-valued configs) are not supported"
            ops[c.name] = c.value if c.config_operation == 0 else None
        return ops

    return await _alter_topics(ctx, req, apply)


async def describe_cluster(ctx: Any, req: KafkaRequest) -> dict[str, Any]:

    image = ctx.image()
    brokers = []
    for b in sorted(image.cluster.brokers.values(), key=lambda b: b.broker_id):
        addr = kafka_address(image, b.broker_id, ctx.listener)
        if addr is not None and not b.fenced:
            brokers.append({"broker_id": b.broker_id, "host": addr[0], "port": addr[1],
                            "rack": b.rack})
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
            "cluster_id": ctx.cluster_id, "controller_id": ctx.node_id, "brokers": brokers,
            "cluster_authorized_operations": -(2**31)}
