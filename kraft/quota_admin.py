"""The controller's side of ALTER_CLIENT_QUOTAS: decide, then write ``ClientQuota`` records.

Theory of operation
-------------------
``decide_alter_client_quotas(image, entries)`` checks each entry — an entity naming a user
principal ("User:<name>"), a client id, or both (either may be "<default>"), and operations on
the keys ``producer_byte_rate`` / ``consumer_byte_rate`` with a positive finite value or None
(remove) — and returns per-entry results and a ``Decision`` of ``ClientQuota`` records for the
valid entries' values that differ from the image (setting a value that is already there, or
removing one that is not, writes nothing). An invalid entry is refused as a whole with
``INVALID_REQUEST`` naming the problem; the others are applied. ``validate_only`` decides and
writes nothing. The handler (``HANDLERS``, against the service's narrow
:class:`~rafka.kraft.admin_context.AdminContext`) runs under its decision lock and answers
with ``metadata_offset`` so a forwarding broker waits for its own image
(``broker/handlers/admin.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rafka.kraft import controller as ctl
from rafka.kraft.admin_context import AdminContext, HandlerTable, answer_with_offset, decide_each
from rafka.metadata import MetadataImage, MetadataRecord
from rafka.metadata.quotas import DEFAULT, QUOTA_KEYS, ClientQuota, entity_key
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

__all__ = ["HANDLERS", "alter_client_quotas", "decide_alter_client_quotas", "entry_problem"]

_MAX_NAME = 255


def entry_problem(entry: Mapping[str, Any]) -> str | None:
    """Why ``entry`` cannot be applied, or None."""
    user, client_id = entry.get("user"), entry.get("client_id")
    if user is None and client_id is None:
        return "a quota entity names a user, a client id or both"
    if user is not None and user != DEFAULT and (
            not user.startswith("User:") or len(user) <= len("User:")):
        return f"user {user!r}: expected User:<name> or {DEFAULT}"
    for what, name in (("user", user), ("client id", client_id)):
        if name is not None and not 0 < len(name) <= _MAX_NAME:
            return f"{what} must be 1-{_MAX_NAME} characters"
    keys = [op["key"] for op in entry["ops"]]
    if not keys:
        return "no quota operations"
    if len(set(keys)) != len(keys):
        return "a key appears twice"
    for op in entry["ops"]:
        if op["key"] not in QUOTA_KEYS:
            return f"unknown quota key {op['key']!r} (known: {', '.join(QUOTA_KEYS)})"
        v = op.get("value")
        if v is not None and not (math.isfinite(v) and v > 0):
            return f"{op['key']}: the byte rate must be a positive number, got {v!r}"
    return None


def decide_alter_client_quotas(image: MetadataImage, entries: Sequence[Mapping[str, Any]]
                               ) -> tuple[list[dict[str, Any]], ctl.Decision]:
    """Per entry: INVALID_REQUEST naming the problem, or success (its changed values written)."""
    pending: dict[tuple[tuple[str, ...], str], float | None] = {}  # set by earlier entries

    def one(entry: Mapping[str, Any]) -> tuple[dict[str, Any], list[MetadataRecord]]:
        problem = entry_problem(entry)
        if problem:
            return {"error": int(ErrorCode.INVALID_REQUEST), "message": problem}, []
        user, client_id = entry.get("user"), entry.get("client_id")
        ent = entity_key(user, client_id)
        records: list[MetadataRecord] = []
        for op in entry["ops"]:
            key, value = op["key"], op.get("value")
            value = None if value is None else float(value)
            current = pending.get((ent, key), image.quotas.get(ent, key))
            if current != value:
                pending[(ent, key)] = value
                records.append(ClientQuota(user, client_id, key, value))
        return {"error": 0, "message": None}, records

    return decide_each(entries, one)


async def alter_client_quotas(ctx: AdminContext, body: dict[str, Any]) -> dict[str, Any]:
    results, decision = decide_alter_client_quotas(ctx.require_quorum().image(), body["entries"])
    return await answer_with_offset(ctx, decision, {"error": 0, "results": results},
                                    write=not body.get("validate_only"))


HANDLERS: HandlerTable = {ApiKey.ALTER_CLIENT_QUOTAS: alter_client_quotas}
