"""Client byte-rate quotas on the admin client (``rafka quota``; docs/security.md, "Quotas").

Theory of operation
-------------------
``alter_client_quotas(admin, entries)`` sends ALTER_CLIENT_QUOTAS: each entry names an entity —
``user`` ("User:<name>", or a bare name, which gets the prefix) and/or ``client_id``, either
``DEFAULT`` ("<default>") for the default of its kind — and the values to set
(``producer_byte_rate`` / ``consumer_byte_rate`` in bytes per second; None removes one). Any
broker forwards it to the active controller, which writes ``ClientQuota`` records and answers
once committed (the broker waits for its own image); a refused entry raises its named error.

``describe_client_quotas(admin)`` lists the configured entities and values (any broker, from its
image). ``client_quota_usage(admin)`` asks *every* broker what it measured (its trackers: quota,
bytes per window, throttled answers) — quotas are enforced per broker, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from rafka.metadata.quotas import DEFAULT, QUOTA_KEYS
from rafka.wire.errors import error_for
from rafka.wire.protocol import ApiKey

if TYPE_CHECKING:
    from rafka.client.aio.admin import AsyncAdmin

__all__ = ["DEFAULT", "QUOTA_KEYS", "alter_client_quotas", "describe_client_quotas",
           "client_quota_usage", "principal_name"]


def principal_name(user: str | None) -> str | None:
    """``alice`` → ``User:alice``; ``User:alice`` and ``<default>`` unchanged."""
    if user is None or user == DEFAULT or user.startswith("User:"):
        return user
    return f"User:{user}"


async def alter_client_quotas(admin: AsyncAdmin, entries: Iterable[Mapping[str, Any]], *,
                              validate_only: bool = False) -> None:
    """Set / remove quotas: entries of ``{"user", "client_id", "values": {key: rate | None}}``."""
    body_entries = []
    for e in entries:
        values = e.get("values") or {}
        body_entries.append({
            "user": principal_name(e.get("user")), "client_id": e.get("client_id"),
            "ops": [{"key": k, "value": None if v is None else float(v)} for k, v in values.items()]})
    resp = await admin._request(ApiKey.ALTER_CLIENT_QUOTAS,
                                {"entries": body_entries, "validate_only": validate_only})
    resp.raise_for_error()
    for e, r in zip(body_entries, resp.body.get("results") or [], strict=False):
        if r.get("error"):
            who = ", ".join(f"{k} {e[k]}" for k in ("user", "client_id") if e[k] is not None)
            raise error_for(r["error"], f"{who}: {r.get('message') or ''}")


async def describe_client_quotas(admin: AsyncAdmin, *, user: str | None = None,
                                 client_id: str | None = None) -> list[dict[str, Any]]:
    """``[{"user", "client_id", "values": {key: bytes/s}}]`` (exact filters; None = any)."""
    resp = await admin._request(ApiKey.DESCRIBE_CLIENT_QUOTAS,
                                {"user": principal_name(user), "client_id": client_id})
    resp.raise_for_error()
    return list(resp.body.get("entries") or [])


async def client_quota_usage(admin: AsyncAdmin) -> dict[int, list[dict[str, Any]]]:
    """broker id -> what that broker measured (``security.throttle.ClientQuotas.usage``)."""
    core = admin._core
    await core.refresh_metadata()
    out: dict[int, list[dict[str, Any]]] = {}
    for node in sorted(core.metadata.brokers):
        resp = await core.request_node(node, ApiKey.DESCRIBE_CLIENT_QUOTAS, {})
        resp.raise_for_error()
        out[node] = list(resp.body.get("usage") or [])
    return out
