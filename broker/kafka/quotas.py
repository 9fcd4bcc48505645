"""Kafka's client quota APIs (DescribeClientQuotas 48, AlterClientQuotas 49) on rafka's.

Theory of operation: rafka's byte-rate quotas (``metadata/quotas.py``) are Kafka's: an entity
is a user, a client id or both, either part possibly the default; the keys are
``producer_byte_rate`` and ``consumer_byte_rate``. Kafka names a user by its name and the
default by a null name; rafka by its principal (``User:<name>``) and ``<default>`` — the two
functions below convert. AlterClientQuotas → native ALTER_CLIENT_QUOTAS (forwarded to the
controller; an entry with an entity type or key rafka does not have is refused here with
INVALID_REQUEST, the others go on). DescribeClientQuotas → native DESCRIBE_CLIENT_QUOTAS of
every entity, filtered here by Kafka's components (exact name, the default, any; ``strict``:
no other entity types); ``ip`` entities never match (rafka has no IP quotas).
"""

from __future__ import annotations

from typing import Any

from rafka.broker.kafka.codec import KafkaRequest
from rafka.broker.kafka.context import KafkaContext, call_native, kafka_error
from rafka.metadata.quotas import DEFAULT, QUOTA_KEYS
from rafka.wire.protocol import ApiKey

__all__ = ["describe_client_quotas", "alter_client_quotas"]

INVALID_REQUEST = 42
USER, CLIENT_ID = "user", "client-id"
EXACT, DEFAULT_MATCH, ANY = 0, 1, 2


def to_native(entity_type: str, name: str | None) -> str:
    if name is None:
        return DEFAULT
    return f"User:{name}" if entity_type == USER else name


def to_kafka(entity_type: str, value: str) -> str | None:
    if value == DEFAULT:
        return None
    return value.removeprefix("User:") if entity_type == USER else value


async def alter_client_quotas(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    refused: dict[int, str] = {}
    native_entries: list[tuple[int, dict[str, Any]]] = []
    for i, e in enumerate(b.entries):
        parts: dict[str, str] = {}
        for ent in e.entity:
            if ent.entity_type not in (USER, CLIENT_ID) or ent.entity_type in parts:
                refused[i] = f"entity type {ent.entity_type!r} is not supported (user, client-id)"
                break
            parts[ent.entity_type] = to_native(ent.entity_type, ent.entity_name)
        bad = [op.key for op in e.ops if op.key not in QUOTA_KEYS]
        if i not in refused and (bad or not parts):
            refused[i] = (f"quota keys {bad} are not supported ({', '.join(QUOTA_KEYS)})" if bad
                          else "an entry needs an entity")
        if i not in refused:
            native_entries.append((i, {
                "user": parts.get(USER), "client_id": parts.get(CLIENT_ID),
                "ops": [{"key": op.key, "value": None if op.remove else float(op.value)}
                        for op in e.ops]}))
    results: dict[int, tuple[int, str | None]] = {
        i: (INVALID_REQUEST, msg) for i, msg in refused.items()}
    if native_entries:
        native = await call_native(ctx, req, ApiKey.ALTER_CLIENT_QUOTAS, {
            "entries": [n for _, n in native_entries], "validate_only": bool(b.validate_only)})
        answers = native.get("results") or []
        for k, (i, _) in enumerate(native_entries):
            a = answers[k] if k < len(answers) else native
            err = kafka_error(a.get("error"))
            results[i] = (err, a.get("message") if err else None)
    return {"throttle_time": 0, "entries": [
        {"error_code": results[i][0], "error_message": results[i][1],
         "entity": [{"entity_type": ent.entity_type, "entity_name": ent.entity_name}
                    for ent in e.entity]} for i, e in enumerate(b.entries)]}


def _matches(parts: dict[str, str], components: Any, strict: bool) -> bool:
    for c in components:
        value = parts.get(c.entity_type)
        if value is None:
            return False
        if c.match_type == EXACT and value != to_native(c.entity_type, c.match):
            return False
        if c.match_type == DEFAULT_MATCH and value != DEFAULT:
            return False
    return not strict or set(parts) == {c.entity_type for c in components}


async def describe_client_quotas(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    for c in b.components:
        if c.match_type not in (EXACT, DEFAULT_MATCH, ANY):
            return {"throttle_time": 0, "error_code": INVALID_REQUEST, "entries": None,
                    "error_message": f"match type {c.match_type} (0 exact, 1 default, 2 any)"}
    native = await call_native(ctx, req, ApiKey.DESCRIBE_CLIENT_QUOTAS, {})
    err = kafka_error(native.get("error"))
    if err:
        return {"throttle_time": 0, "error_code": err, "error_message": native.get("message"),
                "entries": None}
    entries = []
    for e in native.get("entries") or []:
        parts = {k: v for k, v in ((USER, e.get("user")), (CLIENT_ID, e.get("client_id")))
                 if v is not None}
        if _matches(parts, b.components, b.strict):
            entries.append({
                "entity": [{"entity_type": k, "entity_name": to_kafka(k, v)}
                           for k, v in parts.items()],
                "values": [{"key": k, "value": float(v)}
                           for k, v in sorted((e.get("values") or {}).items())]})
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "entries": entries}
